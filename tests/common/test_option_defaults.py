"""Every default is declared once (issue 35 item 4): each Config field, and
each feature default that an option sets, equals its option's own default,
parsed. A literal typed beside the option would drift from it unseen (the
slow threshold was written in the option, the collector's Config and
diag.slow.api)."""

import dataclasses
import inspect
import re

import pytest

from diag.agent.config import AgentConfig
from diag.collector import config as collector_config
from diag.common import options
from diag.launcher import config as launcher_config
from diag.perf.window import PerfWindow
from diag.slow.api import Thresholds
from tests.launcher.test_help import doc_table


def field_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def parsed(opt):
    return options.parse_value(opt, opt.default)


@pytest.mark.parametrize("cls, opts", [
    (launcher_config.Config, options.LAUNCHER),
    (collector_config.Config, options.COLLECTOR),
    (AgentConfig, options.AGENT),
], ids=["launcher", "collector", "agent"])
def test_each_config_field_defaults_to_its_options_default(cls, opts):
    defaults = field_defaults(cls)
    wrong = {o.dest: (defaults[o.dest], parsed(o)) for o in opts
             if o.dest in defaults and defaults[o.dest] != parsed(o)}
    assert not wrong, f"field default vs option default: {wrong}"


def test_the_feature_defaults_an_option_sets_are_the_options():
    th = Thresholds()
    assert (th.window_s, th.slow) == (parsed(options.PERF_WINDOW), parsed(options.SLOW_THRESHOLD))
    window = inspect.signature(PerfWindow).parameters
    assert (window["window_s"].default, window["step_name"].default) == (
        parsed(options.PERF_WINDOW), parsed(options.PERF_STEP))


def test_the_docs_option_table_states_each_options_default():
    """docs/launcher.md's default column says what the option parses to."""
    by_flag = {o.flag: o for o in options.LAUNCHER if o.flag}
    by_env = {o.env: o for o in options.LAUNCHER if o.env}
    checked = set()
    for row in doc_table():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))]   # "\|" is a pipe inside a cell
        flag = re.match(r"`(--[a-z-]+)", cells[0])
        opt = by_flag.get(flag.group(1)) if flag else by_env.get(cells[1].strip("`"))
        if opt is None:
            continue
        stated = re.fullmatch(r"`([^`]+)`", cells[2])
        if parsed(opt) is None or parsed(opt) is False:
            continue    # unset: the doc says what that means ("off", "node-rank 0 starts one")
        assert stated and options.parse_value(opt, stated.group(1)) == parsed(opt), (opt.name, cells[2])
        checked.add(opt.name)
    assert checked == {o.name for o in options.LAUNCHER if parsed(o) is not None and parsed(o) is not False}
