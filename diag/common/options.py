"""The one declaration of every option that travels launcher -> collector/agent.

Each ``Option`` is declared once, with its flag, environment variable,
default, parser and help. The launcher, the collector and the agent pick the
options they take from the tuples at the bottom (``LAUNCHER``, ``COLLECTOR``,
``AGENT``, ``TO_COLLECTOR``), so adding an option is: declare it here, add it
to the tuples of the programs that take it, add the field of the same name to
their ``Config``, and use it. Nothing else.

Values are parsed once, here: a duration is a float of seconds, a size an int
of bytes. ``to_argv`` writes a parsed value back as text that parses to the
same value, which is how the launcher starts the collector.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from typing import Any, Callable, Iterable, Mapping, Sequence

from diag.common import envnames
from diag.common.host_func_spec import HostFuncSpecError, parse_spec
from diag.common.units import UnitError, parse_duration, parse_size


class ConfigError(ValueError):
    """A bad option; the message is one user-facing line that names it."""


# -- parsers: (text, name) -> value; errors are ConfigError naming ``name`` --

def text(value: str, name: str) -> str:
    return value


def nonempty(example: str) -> Callable[[str, str], str]:
    def parse(value: str, name: str) -> str:
        if not value:
            raise ConfigError(f"{name}: empty; use e.g. {example}")
        return value
    return parse


def duration(value: str, name: str) -> float:
    try:
        return parse_duration(value, name)
    except UnitError as exc:
        raise ConfigError(str(exc)) from None


def size(value: str, name: str) -> int:
    try:
        return parse_size(value, name)
    except UnitError as exc:
        raise ConfigError(str(exc)) from None


def size_up_to(maximum: int, maximum_text: str) -> Callable[[str, str], int]:
    def parse(value: str, name: str) -> int:
        try:
            return parse_size(value, name, maximum, maximum_text)
        except UnitError as exc:
            raise ConfigError(str(exc)) from None
    return parse


def integer(minimum: int, example: str, maximum: int,
            why_maximum: str = "") -> Callable[[str, str], int]:
    """A whole number in [minimum, maximum]; every count has a ceiling, and
    the message gives it (with ``why_maximum``, its reason)."""
    def parse(value: str, name: str) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise ConfigError(f"{name}: {value!r} is not a whole number; use e.g. {example}") from None
        if number < minimum:
            raise ConfigError(f"{name}: {value!r} must be at least {minimum}; use e.g. {example}")
        if number > maximum:
            why = f" ({why_maximum})" if why_maximum else ""
            raise ConfigError(f"{name}: {value!r} is too large; at most {maximum}{why}")
        return number
    return parse


def power_of_two(maximum: int, example: str, why_maximum: str) -> Callable[[str, str], int]:
    whole = integer(1, example, maximum, why_maximum)

    def parse(value: str, name: str) -> int:
        number = whole(value, name)
        if number & (number - 1):
            raise ConfigError(f"{name}: {value!r} is not a power of two; use e.g. {example}")
        return number
    return parse


def names(*known: str) -> Callable[[str, str], tuple[str, ...]]:
    """A comma-separated list of ``known`` words (empty items ignored)."""
    def parse(value: str, name: str) -> tuple[str, ...]:
        words = tuple(w for w in (p.strip() for p in str(value).split(",")) if w)
        unknown = [w for w in words if w not in known]
        if unknown or not words:
            what = f"{', '.join(map(repr, unknown))} unknown" if unknown else "names none"
            raise ConfigError(f"{name}: {value!r}: {what}; use a comma-separated list of "
                              f"{', '.join(known)}")
        return words
    return parse


# gRPC metadata values are printable ASCII (0x20-0x7e); spaces may be trimmed at
# the ends, so none at all. The whole header block is 8 KiB by default.
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]*")
MAX_TOKEN_CHARS = 1024


def job_token(value: str, name: str) -> str:
    """The job token as gRPC metadata can carry it. Never quoted in a message."""
    fix = "use printable ASCII without spaces, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if not _TOKEN_CHARS.fullmatch(value):
        at = next(i for i, ch in enumerate(value) if not _TOKEN_CHARS.fullmatch(ch))
        raise ConfigError(f"{name}: character {at + 1} ({value[at]!r}) cannot travel in gRPC "
                          f"metadata; {fix}")
    if len(value) > MAX_TOKEN_CHARS:
        raise ConfigError(f"{name}: {len(value)} characters is too long; at most "
                          f"{MAX_TOKEN_CHARS}; {fix}")
    return value


def host_functions(value: str, name: str) -> str:
    """XPU_TIMER_HOST_TRACING_FUNC, read by the tracer's own parser (no torch)."""
    try:
        parse_spec(value)
    except HostFuncSpecError as exc:
        raise ConfigError(str(exc)) from None
    return value


def choice(*choices: str) -> Callable[[str, str], str]:
    def parse(value: str, name: str) -> str:
        if value not in choices:
            raise ConfigError(f"{name}: {value!r} is not one of {', '.join(choices)}")
        return value
    return parse


def host_port(example: str, any_port: bool) -> Callable[[str, str], str]:
    """HOST:PORT, IPv6 in brackets; port 0 ("any free one") only if ``any_port``."""
    low = 0 if any_port else 1

    def parse(value: str, name: str) -> str:
        host, sep, port = value.rpartition(":")
        if (not sep or not host or not re.fullmatch(r"[0-9]{1,5}", port)
                or not low <= int(port) <= 65535):
            raise ConfigError(f"{name}: {value!r} is not HOST:PORT; use e.g. {example}")
        if host.startswith("[") != host.endswith("]"):
            raise ConfigError(f"{name}: {value!r} has an unbalanced IPv6 bracket; use e.g. [::1]:0")
        return value
    return parse


TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def yes_no(value: str, name: str) -> bool:
    word = str(value).strip().lower()
    if word not in TRUE + FALSE:
        raise ConfigError(f"{name}: {value!r} is not a yes/no value; use 1 or 0")
    return word in TRUE


def duration_at_least(floor_s: float, why: str, example: str) -> Callable[[str, str], float]:
    """A duration of at least ``floor_s`` seconds; the message gives the
    floor and ``why`` (below it the option would judge what it cannot see)."""
    def parse(value: str, name: str) -> float:
        seconds = duration(value, name)
        if seconds < floor_s:
            raise ConfigError(f"{name}: {value!r} is below its floor of {floor_s:g}s ({why}); "
                              f"use {floor_s:g}s or more, e.g. {example}")
        return seconds
    return parse


def duration_within(low: float, high: float, example: str) -> Callable[[str, str], float]:
    """A duration in [low, high] seconds; "0" or "off" switches the feature off (0.0)."""
    def parse(value: str, name: str) -> float:
        if str(value).strip().lower() in ("0", "off"):
            return 0.0
        seconds = duration(value, name)
        if not low <= seconds <= high:
            raise ConfigError(f"{name}: {value!r} is out of range; use {low:g}s to {high:g}s "
                              f"(e.g. {example}), or 0 for off")
        return seconds
    return parse


def fraction(value: str, name: str) -> float:
    """``10%`` or ``0.1``: a share strictly between 0 and 1."""
    raw = str(value).strip()
    try:
        number = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        number = -1.0
    if not 0.0 < number < 1.0:
        raise ConfigError(f"{name}: {value!r} is not a share between 0 and 1; use e.g. 10% or 0.1")
    return number


@dataclasses.dataclass(frozen=True)
class Every:
    """A cadence in steps or in seconds (exactly one is set); text: ``100`` or ``30s``."""
    steps: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        return str(self.steps) if self.steps is not None else seconds_text(self.seconds)


MAX_EVERY_STEPS = 1_000_000_000


def every(value: str, name: str) -> Every:
    """``100`` (steps) or ``30s``/``5m`` (seconds): a bare whole number counts
    steps, a number with a unit is a duration."""
    raw = str(value).strip()
    if re.fullmatch(r"\+?[0-9]+", raw):
        return Every(steps=integer(1, "100 (steps) or 30s", MAX_EVERY_STEPS, "a billion steps")(raw, name))
    try:
        return Every(seconds=parse_duration(raw, name))
    except UnitError:
        raise ConfigError(f"{name}: {value!r} is neither a step count nor a duration; "
                          f"use e.g. 100 (steps) or 30s") from None


def seconds_text(value: float) -> str:
    """A duration as text that ``duration`` reads back exactly (repr is exact)."""
    return f"{value!r}s"


def one_zero(value: bool) -> str:
    """A yes/no value as the one spelling every reader takes (the hook wants "1")."""
    return "1" if value else "0"


def comma_list(value: Sequence[str]) -> str:
    return ",".join(value)


@dataclasses.dataclass(frozen=True)
class Option:
    flag: str | None                 # "--hang-timeout"; None: environment only
    env: str | None                  # its environment variable, read by the launcher
    default: Any                     # text the parser reads, or None (unset) / False (switch)
    parse: Callable[[str, str], Any]
    help: str
    dest: str = ""                   # the Config field; default: the flag's name
    metavar: str | None = None
    switch: bool = False             # a flag without a value; its env value is yes/no
    format: Callable[[Any], str] = str  # parsed value -> text that ``parse`` reads back

    def __post_init__(self):
        if not self.dest:
            object.__setattr__(self, "dest", self.flag.lstrip("-").replace("-", "_"))

    @property
    def name(self) -> str:
        return self.flag or self.env


# -- argparse --

def one_line(parser: argparse.ArgumentParser,
             rewrite: Callable[[str], str] | None = None) -> argparse.ArgumentParser:
    """Make ``parser`` raise ConfigError(one line) instead of printing usage
    and exiting; ``rewrite`` may turn argparse's wording into a better hint."""
    def error(message: str):
        raise ConfigError(rewrite(message) if rewrite else message)
    parser.error = error
    return parser


def parser(prog: str, description: str | None = None) -> argparse.ArgumentParser:
    """A new one-line-error parser (see ``one_line``)."""
    return one_line(argparse.ArgumentParser(prog=prog, description=description))


def add_arguments(target, options: Iterable[Option], prefix: str = "") -> None:
    """Add each option's flag to a parser or group. Defaults stay None so
    ``resolve`` can tell "not given" and fall back on the environment."""
    for opt in options:
        if opt.flag is None:
            continue
        hint = opt.help
        if opt.default not in (None, False):
            hint += f" ({opt.default})"
        if opt.env:
            hint += f" [{opt.env}]"
        hint = hint.replace("%", "%%")
        if opt.switch:
            target.add_argument(opt.flag, dest=prefix + opt.dest, action="store_true",
                                default=None, help=hint)
        else:
            # Without a metavar argparse shows the dest, prefix included:
            # "--ingest-procs XPU_INGEST_PROCS" read as a variable that is not one.
            target.add_argument(opt.flag, dest=prefix + opt.dest, default=None,
                                metavar=opt.metavar or opt.dest.upper(), help=hint)


def resolve(ns, options: Iterable[Option], env: Mapping[str, str] | None = None,
            prefix: str = "") -> dict[str, Any]:
    """Parsed value of each option: its flag, else its environment variable
    (only when ``env`` is given), else its default. Errors name what the user
    set: the flag, or the variable and its flag."""
    values = {}
    for opt in options:
        raw = getattr(ns, prefix + opt.dest, None) if opt.flag else None
        name = opt.name
        if raw is None or raw is False:
            from_env = env.get(opt.env) if (env is not None and opt.env) else None
            if from_env:
                raw = from_env
                name = f"{opt.env} ({opt.flag})" if opt.flag else opt.env
            else:
                raw = opt.default
        values[opt.dest] = parse_value(opt, raw, name)
    return values


def parse_value(opt: Option, raw: Any, name: str | None = None) -> Any:
    name = name or opt.name
    if opt.switch:
        return raw if isinstance(raw, bool) else yes_no(raw, name)
    if raw is None:
        return None
    return opt.parse(raw, name)


def to_argv(options: Iterable[Option], values) -> list[str]:
    """The flags that give ``values`` (a Config or a mapping) back through
    ``resolve``; unset (None) and off switches are left out."""
    get = values.get if isinstance(values, Mapping) else (lambda key: getattr(values, key))
    argv: list[str] = []
    for opt in options:
        value = get(opt.dest)
        if opt.flag is None or value is None or value is False:
            continue
        argv += [opt.flag] if opt.switch else [opt.flag, opt.format(value)]
    return argv


def default(opt: Option) -> Any:
    """The option's default as its parser reads it: what every Config field
    and feature default that the option sets takes, so the value is written
    once, in the option (tests/common/test_option_defaults.py)."""
    return parse_value(opt, opt.default)


def flags_taking_value(options: Iterable[Option]) -> dict[str, bool]:
    """flag -> whether it takes a value (to strip them from another argv)."""
    return {opt.flag: not opt.switch for opt in options if opt.flag}


# -- the declarations --

# The floors of the hang options. Each judges what the agents' reports show,
# and they come once a second (REPORT_INTERVAL): below its floor an option
# reads a healthy job as hung (--idle-timeout 1e-9 once declared a job idle at
# its first report). tests/common/test_option_floors.py ties them to the
# report interval and --silent-after.
HANG_TIMEOUT_FLOOR_S = 1.0     # one report interval: a report sees an op end
BLOCKED_AFTER_FLOOR_S = 2.0    # quiet is the counters unchanged from one report to the next
IDLE_TIMEOUT_FLOOR_S = 5.0     # --silent-after's default: a report that late is not silence yet
HANG_TIMEOUT = Option(
    "--hang-timeout", envnames.HANG_TIMEOUT, "300s",
    duration_at_least(HANG_TIMEOUT_FLOOR_S, "the agents report once a second", "300s"), metavar="D",
    help="a rank in one op longer than this is hung", dest="hang_timeout_s", format=seconds_text)
# Longer than any legitimate pause with no op at all: model loading before the
# first collective, a checkpoint save outside a named host function.
IDLE_TIMEOUT = Option(
    "--idle-timeout", envnames.IDLE_TIMEOUT, "10m",
    duration_at_least(IDLE_TIMEOUT_FLOOR_S, "a node's report may come that late, and a late report reads "
                      "as idle", "10m"), metavar="D",
    help="no rank starting or finishing any op for this long, none in flight, is a hang",
    dest="idle_timeout_s", format=seconds_text)
# A hang proven by its evidence is declared once the proof has held
# its minimum wait (diag/hang/decide.py), not after --hang-timeout.
VERDICTS = Option(
    "--verdicts", envnames.VERDICTS, "evidence", choice("evidence", "timeout"), metavar="HOW",
    help="evidence: a hang its evidence proves is declared at once (diverged, exited: 5 s; blocked: "
         "--blocked-after), anything else after --hang-timeout; timeout: only after --hang-timeout")
# Above any pause of a rank that does nothing at all while its peers wait; a
# rank that evaluates, compiles, writes or loads is busy, whatever its length.
BLOCKED_AFTER = Option(
    "--blocked-after", envnames.BLOCKED_AFTER, "30s",
    duration_at_least(BLOCKED_AFTER_FLOOR_S, "quiet is read between two reports a second apart", "30s"),
    metavar="D",
    help="ranks the others wait for, with no op in flight and no CPU, I/O or kernel launch anywhere in their "
         "process trees for this long, are hung (--verdicts evidence)", dest="blocked_after_s",
    format=seconds_text)
TIMELINE_PATH = Option(
    "--timeline-path", envnames.TIMELINE_PATH, "/root/timeline", nonempty("/root/timeline"),
    metavar="DIR", help="where hang events are written")
COLLECTOR_ADDRESS = Option(
    "--collector", envnames.COLLECTOR, None, host_port("10.0.0.1:29501", any_port=False),
    metavar="HOST:PORT", dest="collector",
    help="HOST:PORT of a running collector; default: node-rank 0 starts one")
HANG_ACTION = Option(
    "--hang-action", envnames.HANG_ACTION, "report", choice("report", "kill", "recover"),
    metavar="{report,kill,recover}", help="report; kill the workers so --max-restarts takes over; "
    "recover: kill after the last words, and every rank restores the newest step all have (docs/recovery.md)")
NO_HOOK = Option("--no-hook", envnames.NO_HOOK, False, yes_no, switch=True,
                 help="do not LD_PRELOAD the C++ hook")
# On by default since it ran under real NCCL with proxy peers on two H100s at
# no measurable step-time cost (docs/link.md); --link-plugin stays accepted so
# the scripts that opted in before still run.
LINK_PLUGIN = Option("--link-plugin", envnames.LINK_PLUGIN, False, yes_no, switch=True,
                     help="load xpu-diag's NCCL profiler plugin (the default; docs/link.md)")
NO_LINK_PLUGIN = Option("--no-link-plugin", envnames.NO_LINK_PLUGIN, False, yes_no, switch=True,
                        help="do not give NCCL xpu-diag's profiler plugin: a hang where every rank waits then "
                        "names no link (docs/link.md)")
FAULT_LIST = Option(
    "--fault-list", envnames.FAULT_LIST, None, nonempty("the faults.json netcheck wrote"),
    metavar="PATH", help="netcheck fault list; exit 75 if this node is in it")
FAULT_LIST_MAX_AGE = Option(
    "--fault-list-max-age", envnames.FAULT_LIST_MAX_AGE, "24h", duration, metavar="D",
    help="warn when the fault list is older", format=seconds_text)
RANK_ORDER = Option(
    "--rank-order", None, None, nonempty("order.json from netcheck --rank-order"), metavar="FILE",
    help="netcheck's topology-aware order: this node's --node-rank comes from it (static rendezvous)")
HOOK_TIME_EVERY = Option(
    "--hook-time-every", envnames.HOOK_TIME_EVERY, None, integer(1, "8 (1 times every call)", (1 << 31) - 1, "the hook reads an int"),
    metavar="N", help="the hook device-times 1 GEMM/collective in N (8; 1 = all)")
HOOK_COMPLETION = Option(
    "--hook-completion", envnames.HOOK_COMPLETION, None, choice("fence", "event"),
    metavar="{fence,event}", help="how the hook sees untimed collectives complete: fence "
    "(drainer, no launch cost, per poll) or event (exact per op)")
TIMELINE_WINDOW = Option(
    "--timeline-window", envnames.TIMELINE_WINDOW, "30s", duration, metavar="D",
    dest="timeline_window_s", format=seconds_text,
    help="seconds of every rank's spans the agent keeps for timeline.json (docs/timeline.md)")
REPORT_INTERVAL = Option(
    None, envnames.REPORT_INTERVAL, "1s", duration, dest="report_interval",
    help="how often the agent reports to the collector", format=seconds_text)

# The performance view and its Prometheus endpoint (docs/metrics.md); the agent's.
PERF_WINDOW = Option(
    "--perf-window", envnames.PERF_WINDOW, "60s", duration, metavar="D", dest="perf_window_s",
    format=seconds_text, help="the performance view's sliding window")
PERF_STEP = Option(
    "--perf-step", envnames.PERF_STEP, "optimizer.step", nonempty("optimizer.step"),
    metavar="NAME", help="the host function whose calls mark steps: optimizer.step "
    "(torch.optim, traced by default) or a Class.function of XPU_TIMER_HOST_TRACING_FUNC")
METRICS_PORT = Option(
    "--metrics-port", envnames.METRICS_PORT, None, integer(1, "9464", 65535, "a TCP port"), metavar="N",
    help="serve Prometheus metrics on http://<node>:N/metrics from each node's agent (off)")
METRICS_ADDR = Option(
    "--metrics-addr", envnames.METRICS_ADDR, "0.0.0.0", nonempty("0.0.0.0 or 127.0.0.1"),
    metavar="HOST", help="the address the metrics port binds")
# The collector's verdicts as series (hang active, SLOW episodes open), for alerts.
COLLECTOR_METRICS_PORT = Option(
    "--collector-metrics-port", envnames.COLLECTOR_METRICS_PORT, None, integer(1, "9465", 65535, "a TCP port"),
    metavar="N", help="serve the collector's verdict metrics on http://<collector host>:N/metrics, "
    "bound to --metrics-addr (off)")
# NVML health of the ranks' GPUs (docs/gpu.md); the agent's. A sample is a
# few dozen NVML calls a GPU: seconds apart, never faster than twice a second.
GPU_SAMPLE_INTERVAL = Option(
    "--gpu-sample-interval", envnames.GPU_SAMPLE_INTERVAL, "5s", duration_within(0.5, 600.0, "5s"),
    metavar="D", dest="gpu_sample_interval_s", format=lambda v: seconds_text(v) if v else "0",
    help="how often the agent reads NVML for its ranks' GPUs (0: off)")
NVML_REPLAY = Option(
    "--nvml-replay", envnames.NVML_REPLAY, None, nonempty("a recording from python -m diag.gpu.record"),
    metavar="FILE", help="the agent answers NVML queries from this recording (tests, reproducing a report)")
# The slow-rank verdicts (docs/slow.md); the collector's, over --perf-window.
SLOW_THRESHOLD = Option(
    "--slow-threshold", envnames.SLOW_THRESHOLD, "10%", fraction, metavar="F",
    help="a rank this far under its peers' median GEMM TFLOP/s for a window is a slow GPU")
SLOW_ACTION = Option(
    "--slow-action", envnames.SLOW_ACTION, "report", choice("report", "dump"),
    metavar="{report,dump}", help="on SLOW, also dump the stacks of the slow rank and of one healthy rank")

# Recovery (docs/recovery.md): the agent writes the snapshots its node holds to disk.
CKPT_PERSIST_EVERY = Option(
    "--ckpt-persist-every", envnames.CKPT_PERSIST_EVERY, "10m", every, metavar="N|D",
    dest="ckpt_persist_every", help="the agent writes the newest in-memory snapshot to --ckpt-dir "
    "every N steps (100) or every D (30s, 10m)")
CKPT_DIR = Option(
    "--ckpt-dir", envnames.CKPT_PERSIST_DIR, None, nonempty("/mnt/shared/ckpt"), metavar="DIR",
    help="where snapshots are persisted (shared by all nodes for a node loss; default: "
    "<timeline-path>/<job-id>/ckpt)")

# The collector's own (python -m diag.collector; the launcher sets them).
LISTEN = Option("--listen", None, "127.0.0.1:0", host_port("127.0.0.1:0 or 0.0.0.0:50051", True),
                metavar="HOST:PORT", help="HOST:PORT to bind; port 0 picks a free one")
JOB_ID = Option("--job-id", None, None, nonempty("the torchrun --rdzv-id"),
                help="job id (torchrun --rdzv-id); [A-Za-z0-9._-] kept in paths")
ADDRESS_FILE = Option("--address-file", None, None, nonempty("/tmp/collector.addr"),
                      metavar="PATH", help="write the bound HOST:PORT here once serving")
# The agent reports about once a second (REPORT_INTERVAL); three missed reports
# plus slack for a busy node before its ranks count as silent.
DEFAULT_SILENT_AFTER_S = 3 * default(REPORT_INTERVAL) + 2.0
SILENT_AFTER = Option("--silent-after", None, f"{DEFAULT_SILENT_AFTER_S:g}s", duration,
                      dest="silent_after_s", format=seconds_text,
                      help="an agent with no report for this long is silent")
DUMP_TIMEOUT = Option("--dump-timeout", None, "60s", duration, dest="dump_timeout_s",
                      format=seconds_text,
                      help="with --hang-action kill, kill after this even if dumps are missing")
# gRPC's receive limit (this plus 1 MiB) is a C int: 2 GiB at most.
# Persisting a large model's snapshot takes longer than dumping stacks.
LAST_WORDS_TIMEOUT = Option("--last-words-timeout", None, "120s", duration, dest="last_words_timeout_s",
                            format=seconds_text,
                            help="with --hang-action kill/recover, kill after this even if last words are missing")
MAX_DUMP_SIZE = Option("--max-dump-size", None, "64M", size_up_to(1 << 30, "1G (one gRPC message)"),
                       dest="max_dump_bytes",
                       help="largest accepted stack dump file")
MAX_AGENTS = Option("--max-agents", None, "16384",
                    integer(1, "16384", 65536, "one socket each"),
                    help="most agents connected at once")
INGEST_PROCS = Option("--ingest-procs", envnames.INGEST_PROCS, "0", integer(0, "4", 64, "one per spare core at most"),
                      metavar="N",
                      help="processes that serve the agents' streams beside the judge, on the same address "
                           "(SO_REUSEPORT), for jobs past ~5,000 nodes; 0: one process (docs/collector.md)")
NODES_PER_RELAY = Option("--nodes-per-relay", envnames.NODES_PER_RELAY, "0",
                         integer(0, "32", 4096, "a relay's streams"), metavar="N",
                         help="one report relay per this many nodes, served by one of their agents, merging "
                              "their reports into few messages, for jobs past ~5,000 nodes; 0: every agent "
                              "reports to the collector (docs/collector.md)")
STATS_INTERVAL = Option("--stats-interval", None, "60s", duration, dest="stats_interval_s",
                        format=seconds_text, help="log an ingest-rate line this often")

# Read in each worker: the tracer, the hook, the agent (env only). The launcher
# checks them before anything starts, so a bad value is one line there and not
# a silent default in every rank, and hands the workers the one spelling
# (``format``) that each reader takes.
RING_CAPACITY = Option(
    None, envnames.RING_CAPACITY, None,
    power_of_two(1 << 20, "4096", "128 MiB of /dev/shm per ring"), dest="ring_capacity",
    help="records in each rank's progress ring, a power of two (4096; docs/records.md)")
TRACER_DISABLE = Option(None, envnames.TRACER_DISABLE, None, yes_no, dest="tracer_disable",
                        format=one_zero, help="1: the workers run without the Python tracer")
TRACER_CPP_COLLECTIVES = Option(
    None, envnames.TRACER_CPP_COLLECTIVES, None, yes_no, dest="tracer_cpp_collectives",
    format=one_zero, help="0: no dispatcher kernel for C++-issued collectives (docs/tracer.md)")
HOST_TRACING_FUNC = Option(
    None, envnames.HOST_TRACING_FUNC, None, host_functions, dest="host_tracing_func",
    help="module@object@function,...: host functions the tracer records")
HOOK_DISABLE = Option(None, envnames.HOOK_DISABLE, None, yes_no, dest="hook_disable",
                      format=one_zero, help="1: the preloaded hook stays inert")
HOOK_POLL_US = Option(
    None, envnames.HOOK_POLL_US, None, integer(1, "1000", 1_000_000, "1 s"), dest="hook_poll_us",
    help="the hook drainer's poll period in microseconds (1000)")
HOOK_COUNT_MS = Option(
    None, envnames.HOOK_COUNT_MS, None, integer(1, "500", 60_000, "a minute"), dest="hook_count_ms",
    help="how often the hook writes launch counts, in milliseconds (500)")
DUMP_TOOL_NAMES = ("py-spy", "gdb", "eu-stack")   # diag.agent.dumps.ALL_TOOLS
DUMP_TOOLS = Option(None, envnames.DUMP_TOOLS, None, names(*DUMP_TOOL_NAMES), dest="dump_tools",
                    format=comma_list, help="the stack dumpers run on a hang (docs/agent.md)")
JOB_TOKEN = Option(None, envnames.JOB_TOKEN, None, job_token, dest="job_token",
                   help="the job token on every collector RPC; unset: the launcher makes one")

# Who takes what. A Config of each program has one field per option, named dest.
LAUNCHER: tuple[Option, ...] = (
    HANG_TIMEOUT, IDLE_TIMEOUT, VERDICTS, BLOCKED_AFTER, TIMELINE_PATH, COLLECTOR_ADDRESS, HANG_ACTION, NO_HOOK, LINK_PLUGIN, NO_LINK_PLUGIN,
    FAULT_LIST, FAULT_LIST_MAX_AGE, RANK_ORDER, HOOK_TIME_EVERY, HOOK_COMPLETION, REPORT_INTERVAL, TIMELINE_WINDOW,
    PERF_WINDOW, PERF_STEP, METRICS_PORT, METRICS_ADDR, COLLECTOR_METRICS_PORT, SLOW_THRESHOLD, SLOW_ACTION,
    GPU_SAMPLE_INTERVAL, NVML_REPLAY,
    RING_CAPACITY, TRACER_DISABLE, TRACER_CPP_COLLECTIVES, HOST_TRACING_FUNC, HOOK_DISABLE,
    HOOK_POLL_US, HOOK_COUNT_MS, DUMP_TOOLS, JOB_TOKEN, CKPT_PERSIST_EVERY, CKPT_DIR, INGEST_PROCS,
    NODES_PER_RELAY)
COLLECTOR: tuple[Option, ...] = (
    LISTEN, TIMELINE_PATH, HANG_TIMEOUT, IDLE_TIMEOUT, VERDICTS, BLOCKED_AFTER, JOB_ID, HANG_ACTION, ADDRESS_FILE, SILENT_AFTER,
    DUMP_TIMEOUT, LAST_WORDS_TIMEOUT, MAX_DUMP_SIZE, MAX_AGENTS, INGEST_PROCS, NODES_PER_RELAY, STATS_INTERVAL,
    PERF_WINDOW, SLOW_THRESHOLD, SLOW_ACTION, COLLECTOR_METRICS_PORT, METRICS_ADDR)
# What the launcher forwards from its Config to the collector it starts.
TO_COLLECTOR: tuple[Option, ...] = (TIMELINE_PATH, HANG_TIMEOUT, IDLE_TIMEOUT, VERDICTS, BLOCKED_AFTER, HANG_ACTION, PERF_WINDOW, INGEST_PROCS,
                                    NODES_PER_RELAY, SLOW_THRESHOLD, SLOW_ACTION, COLLECTOR_METRICS_PORT,
                                    METRICS_ADDR)
# What the launcher hands to the agent's AgentConfig (same field names).
AGENT: tuple[Option, ...] = (REPORT_INTERVAL, TIMELINE_WINDOW, PERF_WINDOW, PERF_STEP, METRICS_PORT,
                             METRICS_ADDR, CKPT_PERSIST_EVERY, CKPT_DIR, GPU_SAMPLE_INTERVAL, NVML_REPLAY)
# What the launcher exports to the workers (the tracer and the hook read these).
TO_WORKERS: tuple[Option, ...] = (HOOK_TIME_EVERY, HOOK_COMPLETION, RING_CAPACITY, TRACER_DISABLE,
                                  TRACER_CPP_COLLECTIVES, HOST_TRACING_FUNC, HOOK_DISABLE,
                                  HOOK_POLL_US, HOOK_COUNT_MS)


def env_for(options: Sequence[Option], values) -> dict[str, str]:
    """The environment variables that give ``values`` to a child (unset and
    off switches left out; a yes/no value that is not a switch is written as its
    ``format`` says, so a set "no" reaches the child as such)."""
    get = values.get if isinstance(values, Mapping) else (lambda key: getattr(values, key))
    out = {}
    for opt in options:
        value = get(opt.dest)
        if not opt.env or value is None or (opt.switch and value is False):
            continue
        out[opt.env] = "1" if opt.switch else opt.format(value)
    return out
