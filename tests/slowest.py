"""The slowest tests of `make test`'s two phases together, from their JUnit XML.

Usage: ``python tests/slowest.py N REPORT.xml...``. Each test's time is its
set-up, call and tear-down (a module fixture's job counts to the first test
that uses it); beside it, the CPU-seconds it cost (the property cpu_s that
tests/conftest.py records: the test process and the children it reaped). A
report that is missing (its phase never ran) is said and skipped; one that
is not JUnit XML is named in one line, exit 2.

After them, each test that failed or errored, with the first line of its
message: CI shows only the end of make test's output, and a failure named
there is a failure a later session can act on.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET


def test_id(case: ET.Element) -> str:
    """pytest's id of a JUnit test case: path.py[::Class]::name."""
    parts = case.get("classname", "").split(".")
    # pytest writes module.Class for a test in a class
    cls = [parts.pop()] if len(parts) > 1 and parts[-1][:1].isupper() else []
    return "::".join(["/".join(parts) + ".py", *cls, case.get("name", "")])


def cases(path: str) -> list[tuple[float, str, str, float | None]]:
    """(seconds, test id, phase, CPU-seconds or None) for each test case in
    the report at ``path``."""
    phase = os.path.splitext(os.path.basename(path))[0]
    out = []
    for case in ET.parse(path).iter("testcase"):
        name = test_id(case)
        cpu = [float(p.get("value")) for p in case.iter("property") if p.get("name") == "cpu_s"]
        out.append((float(case.get("time") or 0.0), name, phase, cpu[0] if cpu else None))
    return out


def failures(path: str) -> list[str]:
    """One line for each test in the report at ``path`` that failed or
    errored: the phase, the test id and the first line of its message."""
    phase = os.path.splitext(os.path.basename(path))[0]
    out = []
    for case in ET.parse(path).iter("testcase"):
        for bad in [*case.iter("failure"), *case.iter("error")]:
            lines = (bad.get("message") or bad.text or "").strip().splitlines()
            said = "FAILED" if bad.tag == "failure" else "ERROR"     # pytest's words
            out.append(f"{said:<7}{phase:<14} {test_id(case)}: {lines[0][:300] if lines else '-'}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python tests/slowest.py N REPORT.xml...", file=sys.stderr)
        return 2
    found, failed = [], []
    for path in argv[1:]:
        if not os.path.exists(path):
            print(f"slowest: no {path} (that phase did not run)")
            continue
        try:
            found += cases(path)
            failed += failures(path)
        except (ET.ParseError, ValueError) as exc:
            print(f"slowest: {path} is not a JUnit XML report ({exc}); pass pytest's --junitxml file",
                  file=sys.stderr)
            return 2
    found.sort(key=lambda case: case[0], reverse=True)
    cpu = sum(c for *_, c in found if c is not None)
    print(f"==== the {argv[0]} slowest tests of make test ({sum(t for t, *_ in found):.0f} s in all, "
          f"{cpu:.0f} CPU-s) ====")
    print(f"{'wall':>9}  {'CPU':>8}")
    for seconds, name, phase, cpu in found[:int(argv[0])]:
        print(f"{seconds:8.2f}s  {'-' if cpu is None else f'{cpu:.1f}':>7}s  {phase:<14} {name}")
    if failed:
        print(f"==== {len(failed)} of make test's tests failed ====")
        print("\n".join(failed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
