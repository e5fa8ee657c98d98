"""p2p pairing (diag/hang/p2p.py): a send against its peer's recv of the same number."""

from diag.hang.p2p import unpaired
from diag.pb import collector_pb2 as pb


def lane(rank, ops):
    comm = pb.CommProgress(comm_id=5, comm_rank=rank, comm_size=2, lane=pb.OP_KIND_P2P)
    comm.recent.first_seq = 1
    comm.recent.ops.extend(pb.Fingerprint(name=n, bytes=b, dtype=7, peer=peer, nth=nth) for n, b, peer, nth in ops)
    return rank, comm


def test_a_send_whose_peers_recv_differs_in_size_is_said_once():
    windowed = [lane(0, [("send", 1024, 1, 1), ("send", 1024, 1, 2)]),
                lane(1, [("recv", 1024, 0, 1), ("recv", 2048, 0, 2)])]
    assert unpaired(windowed, {2}, 2) == (
        "rank 0's send #2 to rank 1 (1 KiB float32) met rank 1's recv #2 from rank 0 (2 KiB float32)",)


def test_two_ranks_sending_to_each_other_1f1b_pair_fine():
    windowed = [lane(0, [("send", 64, 1, 1), ("recv", 64, 1, 1)]), lane(1, [("send", 64, 0, 1), ("recv", 64, 0, 1)])]
    assert unpaired(windowed, {2}, 2) == ()


def test_a_per_pair_communicator_inside_a_larger_group_is_not_judged():
    windowed = [lane(0, [("send", 1024, 1, 1)]), lane(1, [("recv", 2048, 0, 1)])]
    assert unpaired(windowed, {2}, 3) == ()
