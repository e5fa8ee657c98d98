"""Golden cases: run the real CLI on tests/viewer/data/cases/<case>/ and collect
the outputs that are compared exactly (folded stacks and summary.txt).

Re-record after an intended change, then review the diff by hand:
    .venv/bin/python -m tests.viewer.goldens
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).parent / "data"
CASES = DATA / "cases"
EXPECTED = DATA / "expected"
COMPARED = ("py_stack.folded", "cpp_stack.folded", "summary.txt")


def run_case(case: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "viewer", "--path", str(case), "--out", str(out),
                           "--format", "folded,text"], capture_output=True, text=True, timeout=120)


def outputs(case: Path) -> dict[str, str]:
    """name -> text with the case's absolute path replaced by <CASE> (absent file: '')."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = run_case(case, Path(tmp))
        if proc.returncode != 0:
            raise RuntimeError(f"{case.name}: stack-viewer exited {proc.returncode}: {proc.stderr}")
        got = {}
        for name in COMPARED:
            p = Path(tmp) / name
            got[name] = p.read_text().replace(str(case), "<CASE>") if p.exists() else ""
        return got


def main() -> None:
    for case in sorted(p for p in CASES.iterdir() if p.is_dir()):
        dest = EXPECTED / case.name
        dest.mkdir(parents=True, exist_ok=True)
        for name, text in outputs(case).items():
            (dest / name).write_text(text)
        print(f"recorded {dest}")


if __name__ == "__main__":
    main()
