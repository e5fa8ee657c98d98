"""The slowest tests of `make test`'s two phases together, from their JUnit XML.

Usage: ``python tests/slowest.py N REPORT.xml...``. Each test's time is its
set-up, call and tear-down (a module fixture's job counts to the first test
that uses it). A report that is missing (its phase never ran) is said and
skipped; one that is not JUnit XML is named in one line, exit 2.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET


def cases(path: str) -> list[tuple[float, str, str]]:
    """(seconds, test id, phase) for each test case in the report at ``path``."""
    phase = os.path.splitext(os.path.basename(path))[0]
    out = []
    for case in ET.parse(path).iter("testcase"):
        parts = case.get("classname", "").split(".")
        # pytest writes module.Class for a test in a class
        cls = [parts.pop()] if len(parts) > 1 and parts[-1][:1].isupper() else []
        name = "::".join(["/".join(parts) + ".py", *cls, case.get("name", "")])
        out.append((float(case.get("time") or 0.0), name, phase))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: python tests/slowest.py N REPORT.xml...", file=sys.stderr)
        return 2
    found = []
    for path in argv[1:]:
        if not os.path.exists(path):
            print(f"slowest: no {path} (that phase did not run)")
            continue
        try:
            found += cases(path)
        except (ET.ParseError, ValueError) as exc:
            print(f"slowest: {path} is not a JUnit XML report ({exc}); pass pytest's --junitxml file",
                  file=sys.stderr)
            return 2
    found.sort(reverse=True)
    print(f"==== the {argv[0]} slowest tests of make test ({sum(t for t, _, _ in found):.0f} s in all) ====")
    for seconds, name, phase in found[:int(argv[0])]:
        print(f"{seconds:8.2f}s  {phase:<14} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
