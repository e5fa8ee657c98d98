"""The declared dependency floors run the package: a fresh venv with exactly
the minimum grpcio, grpcio-health-checking and protobuf that pyproject.toml
asks for imports the generated stubs, the collector and the agent, and serves
real RPCs on loopback. (Generated code from a newer grpcio-tools refuses an
older runtime at import; `make proto` pins the tools for that reason.)"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.pinned_venv import ROOT, make_venv

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None

PACKAGES = ("grpcio", "grpcio-health-checking", "protobuf")
pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(tomllib is None, reason="needs tomllib (Python 3.11+)")]

CHECK = r"""
import sys, tempfile, grpc, google.protobuf
want = dict(a.split("==") for a in sys.argv[1:])
have = {"grpcio": grpc.__version__, "protobuf": google.protobuf.__version__}
same = lambda h, w: h.split(".")[:len(w.split("."))] == w.split(".")  # 1.60.0 is ==1.60
assert all(same(have[k], want[k]) for k in have), (have, want)
from diag.pb import collector_pb2 as pb, collector_pb2_grpc as pb_grpc
import diag.agent.agent, diag.agent.connection
from diag.collector.config import Config
from diag.collector.server import create_server
from grpc_health.v1 import health_pb2, health_pb2_grpc
report = pb.NodeReport(job_id="j", ranks=[pb.RankProgress(rank=1, world_size=2, idle_ns=5)])
assert pb.NodeReport.FromString(report.SerializeToString()) == report
server, port = create_server("127.0.0.1:0", Config(job_id="j", token="t", timeline_path=tempfile.mkdtemp()))
server.start()
from diag.common import handshake
with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
    md = handshake.session_metadata(ch, "t", f"127.0.0.1:{port}")
    health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), metadata=md, timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    try:
        pb_grpc.CollectorStub(ch).UploadStacks(pb.StackDump(job_id="j", event_id="nope"), metadata=md, timeout=10)
        raise SystemExit("an upload for an unknown event was accepted")
    except grpc.RpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND, exc
server.stop(None)
print("OK", have)
"""


def declared_floors() -> list[str]:
    """``name==floor`` for each of PACKAGES, from pyproject's ``name>=floor``."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    pins = []
    for name in PACKAGES:
        found = [m.group(1) for d in deps if (m := re.fullmatch(rf"{re.escape(name)}\s*>=\s*([\w.]+)", d.strip()))]
        assert len(found) == 1, f"pyproject.toml declares no single floor for {name}: {deps}"
        pins.append(f"{name}=={found[0]}")
    return pins


def test_declared_minimum_versions_import_and_serve(tmp_path):
    pins = declared_floors()
    python = make_venv(tmp_path / "venv", pins)
    done = subprocess.run([str(python), "-c", CHECK, *pins], cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "OK" in done.stdout, done.stdout + done.stderr
