"""--help and docs/launcher.md's option table agree with the parser (issue 34 item 7)."""

from __future__ import annotations

import argparse
import os
import re

from diag.common import options
from diag.launcher.config import HELP_GROUPS, parse_args, torchrun_parser

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "launcher.md")


def own_actions():
    """Our options as --help shows them: {flag: action}, by group title."""
    ours = {o.flag for o in options.LAUNCHER if o.flag}
    groups = {}
    for group in torchrun_parser()._action_groups:
        shown = {a.option_strings[0]: a for a in group._group_actions
                 if a.option_strings and a.option_strings[0] in ours and a.help != argparse.SUPPRESS}
        if shown:
            groups[group.title] = shown
    return groups


def doc_table() -> list[str]:
    """The rows of the Options table: it starts at its header and ends at the first non-row line."""
    lines = open(DOC).read().splitlines()
    start = lines.index("| option | env equivalent | default | meaning |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_help_groups_our_options_and_shows_no_made_up_variable_or_the_default_switch():
    groups = own_actions()
    assert len(groups) == len(HELP_GROUPS) and all(t.startswith("xpu-diag options: ") for t in groups), list(groups)
    actions = [a for shown in groups.values() for a in shown.values()]
    assert not [a.metavar for a in actions if a.metavar and str(a.metavar).startswith("XPU")]
    text = torchrun_parser().format_help()
    assert "XPU_INGEST_PROCS" not in text and "--link-plugin " not in text
    assert parse_args(["--link-plugin", "train.py"], env={}).link_plugin   # still accepted


def test_the_docs_option_table_is_one_table_with_every_option_the_parser_shows():
    rows = doc_table()
    documented = {}
    for row in rows:
        found = re.match(r"^\| `(--[a-z-]+)[^`]*` \| (`?)([A-Z_]+|-)", row)
        if found:
            documented[found.group(1)] = found.group(3)
    shown = {flag for shown in own_actions().values() for flag in shown}
    assert set(documented) == shown
    envs = {o.flag: o.env for o in options.LAUNCHER if o.flag}
    assert {f: e for f, e in documented.items() if e != "-"} == {f: envs[f] for f in shown if envs[f]}
    # The env-only settings the launcher reads are in it too.
    assert any("XPU_TIMER_REPORT_INTERVAL" in row for row in rows)
