"""The names of the files in an event directory (docs/event-dir.md), in one
place: the collector writes them and stack-viewer reads them.

``<timeline>/<job-id>/<event-id>/`` holds ``hang.json`` and one file per rank
and dumper, ``rank<R>-of-<W>.<tag>.<ext>`` with 5-digit numbers, so that the
files sort by rank.
"""

from __future__ import annotations

import re

HANG_JSON = "hang.json"
SLOW_JSON = "slow.json"           # a SLOW event with stacks: its document instead of hang.json
FAILURE_JSON = "failure.json"     # a FAILED event (the job crashed): its document instead of hang.json
TIMELINE_JSON = "timeline.json"   # the event's trace (docs/timeline.md), not stacks
SUMMARY_TXT = "summary.txt"       # stack-viewer's own output, written next to the dumps
FAULTS_JSON = "faults.json"       # nodes a hang blames on hardware (diag/faultlist.py format); recover leaves them out
NCCL_RAS_TXT = "nccl_ras.txt"     # NCCL's RAS report on a stuck link (docs/link.md), not stacks

# Every file the collector writes into an event directory that is not a
# stack dump: stack-viewer passes over these without a word.
COLLECTOR_FILES = (HANG_JSON, SLOW_JSON, FAILURE_JSON, TIMELINE_JSON, FAULTS_JSON, NCCL_RAS_TXT)

# tag -> extension, per dumper
PYSPY, GDB, EU_STACK, ERROR = "py", "gdb", "eu-stack", "error"
EXTENSIONS = {PYSPY: "json", GDB: "txt", EU_STACK: "txt", ERROR: "txt"}

# Also matches tags we do not write (a user's own dumps), so the viewer can say so.
DUMP_NAME = re.compile(r"^rank(\d+)-of-(\d+)\.([A-Za-z][\w-]*)\.(json|txt)$")


def dump_filename(rank: int, world_size: int, tag: str) -> str:
    """``rank00002-of-00004.py.json``; the arguments must be validated."""
    return f"rank{rank:05d}-of-{world_size:05d}.{tag}.{EXTENSIONS[tag]}"
