"""Launcher and collector judge every forwarded value the same way (issue 23).

For each option the launcher hands on (to the collector, the agent or the
workers), a table of careless values: either the launcher refuses it in one
line, and so does the collector with the same line, or the launcher accepts it
and whatever it passes on reads back as the same value. Before the bounds,
``--hang-timeout 1e400`` was inf to the launcher and ``'infs'`` to the collector.
"""

import math

import pytest

from diag.collector import config as collector_config
from diag.common import options
from diag.common.options import ConfigError
from diag.launcher import collector_proc, runner
from diag.launcher import config as launcher_config

TOKEN = {"XPU_TIMER_JOB_TOKEN": "tok"}
CARELESS = ["1e30", "99999999999999999999", "1e400", "-5", "0", "soon", "", "nan", "inf", "NaN%",
            "3e9", "1e-400", "8761h", "70000", "2G"]


def launcher(argv, env=None):
    """(Config, None) or (None, the one-line message); anything else raises."""
    try:
        return launcher_config.parse_args(argv + ["t.py"], env or {}), None
    except ConfigError as exc:
        return None, str(exc)


def collector(argv):
    try:
        return collector_config.parse_args(["--job-id", "j"] + argv, TOKEN), None
    except ConfigError as exc:
        return None, str(exc)


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=0))


def one_line(message):
    assert message and "\n" not in message and "Traceback" not in message, message


@pytest.mark.parametrize("value", CARELESS + ["30s", "report", "kill", "10%", "0.5", "/tmp/tl"])
@pytest.mark.parametrize("opt", options.TO_COLLECTOR, ids=lambda o: o.flag)
def test_launcher_and_collector_agree_on_every_forwarded_option(opt, value):
    cfg, refused = launcher([opt.flag, value])
    direct, direct_refused = collector([opt.flag, value])
    if cfg is None:
        one_line(refused)
        assert direct_refused == refused, (refused, direct_refused)
        return
    assert direct_refused is None, f"launcher took {value!r}, collector said: {direct_refused}"
    # What the launcher really starts the collector with reads back to its own value.
    passed, passed_refused = collector(collector_proc.collector_argv(cfg, "/tmp/addr")[4:])
    assert passed_refused is None, passed_refused
    mine = getattr(cfg, opt.dest)
    assert same(getattr(passed, opt.dest), mine) and same(getattr(direct, opt.dest), mine)
    assert collector_proc.argv_problem(cfg) is None


@pytest.mark.parametrize("value", CARELESS)
@pytest.mark.parametrize("opt", [o for o in options.LAUNCHER if o.env and not o.switch],
                         ids=lambda o: o.env)
def test_every_launcher_variable_is_one_line_or_a_value_its_readers_take(opt, value):
    cfg, refused = launcher([], {opt.env: value})
    if cfg is None:
        one_line(refused)
        assert refused.startswith(opt.env), refused    # names what the user set
        return
    if opt in options.AGENT:
        runner.agent_config(cfg, "h:1", "t", "/d", {})   # validated on construction
    if opt in options.TO_WORKERS and getattr(cfg, opt.dest) is not None:  # "" is unset everywhere
        exported = options.env_for([opt], cfg)[opt.env]
        again, again_refused = launcher([], {opt.env: exported})
        assert again_refused is None and same(getattr(again, opt.dest), getattr(cfg, opt.dest))


def test_the_worker_knobs_reach_the_workers_in_the_one_spelling_each_reader_takes():
    # The tracer reads anything but "" and "0" as "disable", the hook only "1":
    # a documented "false" or "yes" must reach them as 0 or 1.
    env = {"XPU_TIMER_TRACER_DISABLE": "false", "XPU_TIMER_HOOK_DISABLE": "yes",
           "XPU_TIMER_TRACER_CPP_COLLECTIVES": "off", "XPU_TIMER_RING_CAPACITY": " 8192 ",
           "XPU_TIMER_HOOK_POLL_US": "+500", "XPU_TIMER_HOST_TRACING_FUNC": "m@C@f"}
    out = runner.worker_env(launcher_config.parse_args(["t.py"], env), "tok", "/d", env={})
    assert {k: out[k] for k in env} == {
        "XPU_TIMER_TRACER_DISABLE": "0", "XPU_TIMER_HOOK_DISABLE": "1",
        "XPU_TIMER_TRACER_CPP_COLLECTIVES": "0", "XPU_TIMER_RING_CAPACITY": "8192",
        "XPU_TIMER_HOOK_POLL_US": "500", "XPU_TIMER_HOST_TRACING_FUNC": "m@C@f"}
    unset = runner.worker_env(launcher_config.parse_args(["t.py"], {}), "tok", "/d", env={})
    assert not {k for k in unset if k in env}


@pytest.mark.parametrize("name, value, message", [
    ("XPU_TIMER_RING_CAPACITY", "abc", "XPU_TIMER_RING_CAPACITY: 'abc' is not a whole number; use e.g. 4096"),
    ("XPU_TIMER_RING_CAPACITY", "1000", "XPU_TIMER_RING_CAPACITY: '1000' is not a power of two; use e.g. 4096"),
    ("XPU_TIMER_RING_CAPACITY", "4194304",
     "XPU_TIMER_RING_CAPACITY: '4194304' is too large; at most 1048576 (128 MiB of /dev/shm per ring)"),
    ("XPU_TIMER_TRACER_DISABLE", "abc", "XPU_TIMER_TRACER_DISABLE: 'abc' is not a yes/no value; use 1 or 0"),
    ("XPU_TIMER_HOOK_DISABLE", "2", "XPU_TIMER_HOOK_DISABLE: '2' is not a yes/no value; use 1 or 0"),
    ("XPU_TIMER_HOOK_POLL_US", "1ms", "XPU_TIMER_HOOK_POLL_US: '1ms' is not a whole number; use e.g. 1000"),
    ("XPU_TIMER_DUMP_TOOLS", "garbage,,", "XPU_TIMER_DUMP_TOOLS: 'garbage,,': 'garbage' unknown; use a "
     "comma-separated list of py-spy, gdb, eu-stack"),
    ("XPU_TIMER_DUMP_TOOLS", ",,", "XPU_TIMER_DUMP_TOOLS: ',,': names none; use a comma-separated list "
     "of py-spy, gdb, eu-stack"),
    ("XPU_TIMER_HOST_TRACING_FUNC", "train.step", "XPU_TIMER_HOST_TRACING_FUNC: 'train.step' is not "
     "module@object@function (object may be empty: module@@function)"),
])
def test_worker_variables_with_garbage_are_one_line_naming_the_variable(name, value, message):
    assert launcher([], {name: value}) == (None, message)


def test_dump_tool_names_are_the_agents():
    assert options.DUMP_TOOL_NAMES == runner.dumps.ALL_TOOLS


@pytest.mark.parametrize("token, where", [("a\nb", "character 2 ('\\n')"), ("tok en", "character 4 (' ')"),
                                          ("tök", "character 2 ('ö')"), ("x" * 1025, "1025 characters")])
def test_a_token_grpc_metadata_cannot_carry_is_refused_up_front_and_never_echoed(token, where):
    _, refused = launcher([], {"XPU_TIMER_JOB_TOKEN": token})
    one_line(refused)
    assert refused.startswith(f"XPU_TIMER_JOB_TOKEN: {where}") and token not in refused, refused
    with pytest.raises(ConfigError) as err:
        collector_config.Config(job_id="j", token=token)
    assert str(err.value) == refused
    good, _ = launcher([], {"XPU_TIMER_JOB_TOKEN": "Abc-_.~9"})
    assert good.job_token == "Abc-_.~9" and "Abc" not in repr(good)
