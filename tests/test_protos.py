"""The generated stubs in diag/pb match protos/ as `make proto` generates them:
with the grpcio-tools version pinned in the Makefile (GRPC_TOOLS), in its own
venv (build/protoc-venv), so that they run on the declared dependency floors."""

import re
import shutil
import subprocess

import pytest

from tests.pinned_venv import ROOT, index_reachable

pytestmark = pytest.mark.timeout(300)


def pinned_tools() -> str:
    found = re.search(r"^GRPC_TOOLS := (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert found, "the Makefile has no GRPC_TOOLS := ... line"
    return found.group(1)


def protoc_python():
    """build/protoc-venv's python, made by `make protoc-tools` when missing."""
    venv = ROOT / "build" / "protoc-venv"
    if not (venv / f".stamp-{pinned_tools()}").exists():
        if shutil.which("make") is None:
            pytest.skip("no make to build the pinned protoc venv (make protoc-tools)")
        done = subprocess.run(["make", "-s", "protoc-tools"], cwd=ROOT, capture_output=True, text=True, timeout=240)
        if done.returncode != 0:
            if not index_reachable():
                pytest.skip(f"cannot install {pinned_tools()}: the package index is not reachable")
            pytest.fail(f"make protoc-tools failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return venv / "bin" / "python"


def test_generated_stubs_match_protos(tmp_path):
    python = protoc_python()
    protos = sorted(str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos").rglob("*.proto"))
    subprocess.run([str(python), "-m", "grpc_tools.protoc", "-I", str(ROOT / "protos"),
                    f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", *protos], check=True)
    generated = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "protoc generated nothing"
    for path in generated:
        committed = ROOT / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), f"{committed} is stale: run make proto"


def test_stubs_carry_no_runtime_version_guard():
    """A guard would refuse any grpcio/protobuf older than the generator's own,
    whatever pyproject.toml declares (issue 13, item 8)."""
    for path in (ROOT / "diag" / "pb").glob("*_pb2*.py"):
        text = path.read_text()
        assert "GRPC_GENERATED_VERSION" not in text and "ValidateProtobufRuntimeVersion" not in text, path
