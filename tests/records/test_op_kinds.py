"""One set of op-kind numbers: the proto's OpKind, the records format (Python
and C++), the hook's op table, the tracer's op table and the collector's
names agree, and collectives and p2p ops are different lanes everywhere."""

import os
import re

from diag.agent.comms import NCCL_TO_TORCH
from diag.hang.api import KIND_COLLECTIVE, KIND_NAMES, KIND_P2P
from diag.pb import collector_pb2 as pb
from diag.records import format as fmt
from diag.tracer.collectives import OPS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def test_kind_numbers_agree_across_proto_records_hook_and_collector():
    proto = {name[len("OP_KIND_"):]: v for name, v in pb.OpKind.items() if v}
    py = {n[len("KIND_"):]: getattr(fmt, n) for n in dir(fmt) if n.startswith("KIND_")}
    assert proto == py == {"KERNEL": 1, "GEMM": 2, "COLLECTIVE": 3, "P2P": 4, "HOST_FUNC": 5}
    cpp = {m[0].upper(): int(m[1]) for m in re.findall(r"kKind(\w+) = (\d+)", _read("kernel_hook/records.h"))}
    assert cpp and all(py[name] == value for name, value in cpp.items())
    assert {KIND_NAMES[v].upper() for v in py.values()} == {"KERNEL", "GEMM", "COLLECTIVE", "P2P", "HOST_FUNC"}
    assert (KIND_COLLECTIVE, KIND_P2P) == (fmt.KIND_COLLECTIVE, fmt.KIND_P2P) == fmt.COMM_LANES
    assert "| 4 | event" not in _read("docs/records.md")   # the table below is the contract
    assert "3 collective, 4 p2p, 5 host function" in _read("docs/records.md")


def test_p2p_ops_are_the_p2p_lane_in_hook_and_tracer():
    table = dict(re.findall(r'\{"(nccl\w+)", kKind(\w+)\}', _read("kernel_hook/op_table.cc")))
    assert set(table) == set(NCCL_TO_TORCH)
    for nccl, kind in table.items():
        torch_kind = OPS[NCCL_TO_TORCH[nccl]][0]
        assert getattr(fmt, "KIND_" + kind.upper()) == torch_kind, nccl
    assert {n for n, (k, _) in OPS.items() if k == fmt.KIND_P2P} == {"send", "recv", "isend", "irecv"}
    # comm_table.cc keeps one counter per lane; op_queue.cc picks it by the op's kind.
    assert "seq, p2p_seq" in _read("kernel_hook/comm_table.cc")
    assert "comm_next_seq(d->comm, op_kind(d->op) == kKindP2P)" in _read("kernel_hook/op_queue.cc")
