"""p2p pairing, for the divergence rule: each send is judged against its
peer's recv of the same number. The members' seqs on a p2p lane count
different ops (a first stage sends what the next receives), so they are
never compared seq by seq, and two ranks sending to each other in a 1F1B
schedule are no mismatch."""

from __future__ import annotations

from diag.common.units import format_size
from diag.records.format import DTYPE_NAMES, torch_name


def unpaired(windowed, sizes: set, members: int) -> tuple[str, ...]:
    """p2p: each send whose peer's recv of the same number (Fingerprint.nth)
    differs from it in size or dtype, said once per pair. Only where every
    member reports the group's own communicator (its comm ranks are the
    peers named); torch's per-pair communicators inside a larger group
    number their peers otherwise, and nothing is said."""
    by_comm_rank = {c.comm_rank: (r, c.recent) for r, c in windowed}
    if sizes != {members} or len(by_comm_rank) != len(windowed) or len(windowed) != members:
        return ()
    recvs = {}
    for comm_rank, (rank, window) in by_comm_rank.items():
        for fp in window.ops:
            if torch_name(fp.name) in ("recv", "irecv"):
                recvs[(comm_rank, fp.peer, fp.nth)] = fp
    said = []
    for comm_rank, (rank, window) in sorted(by_comm_rank.items(), key=lambda kv: kv[1][0]):
        for fp in window.ops:
            if torch_name(fp.name) not in ("send", "isend") or fp.peer not in by_comm_rank:
                continue
            recv = recvs.get((fp.peer, comm_rank, fp.nth))
            if recv is not None and (recv.bytes, recv.dtype) != (fp.bytes, fp.dtype):
                peer = by_comm_rank[fp.peer][0]
                said.append(f"rank {rank}'s send #{fp.nth} to rank {peer} ({_size_dtype(fp)}) met rank "
                            f"{peer}'s recv #{recv.nth} from rank {rank} ({_size_dtype(recv)})")
                break      # the first of each sender is enough: the rest follow from it
    return tuple(said)


def _size_dtype(fp) -> str:
    text = format_size(fp.bytes)
    return f"{text} {DTYPE_NAMES[fp.dtype]}" if 0 <= fp.dtype < len(DTYPE_NAMES) else text
