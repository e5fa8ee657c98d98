"""The generated stubs in diag/pb match protos/ (run `make proto` to refresh)."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_generated_stubs_match_protos(tmp_path):
    protos = sorted(str(p.relative_to(ROOT / "protos")) for p in (ROOT / "protos").rglob("*.proto"))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "protos"),
                    f"--python_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", *protos], check=True)
    generated = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert generated, "protoc generated nothing"
    for path in generated:
        committed = ROOT / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), f"{committed} is stale: run make proto"
