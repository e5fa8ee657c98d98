"""``xpu_timer_launch`` command line: ``parse_args(argv, env) -> Config``.

Our own options sit among torchrun's, before the training script; everything
else goes to torch.distributed.run verbatim. torchrun's own parser (with our
options added to it) finds where its options end, so nothing is guessed.
Pure: reads no files, creates nothing and starts nothing; errors are one-line ``ConfigError``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import uuid
from typing import Mapping, Sequence

from diag.common.units import UnitError, parse_duration

HANG_ACTIONS = ("report", "kill")
PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
_JOB_ID_DROP = re.compile(r"[^A-Za-z0-9._-]")
# option -> (dest, env var, takes a value)
OWN_OPTIONS = {
    "--hang-timeout": ("hang_timeout", "XPU_TIMER_HANG_TIMEOUT", True),
    "--timeline-path": ("timeline_path", "XPU_TIMER_TIMELINE_PATH", True),
    "--collector": ("collector", "XPU_TIMER_COLLECTOR", True),
    "--hang-action": ("hang_action", "XPU_TIMER_HANG_ACTION", True),
    "--no-hook": ("no_hook", "XPU_TIMER_NO_HOOK", False),
    "--fault-list": ("fault_list", "XPU_TIMER_FAULT_LIST", True),
    "--fault-list-max-age": ("fault_list_max_age", "XPU_TIMER_FAULT_LIST_MAX_AGE", True),
    "--hook-time-every": ("hook_time_every", "XPU_TIMER_HOOK_TIME_EVERY", True),
    "--hook-completion": ("hook_completion", "XPU_TIMER_HOOK_COMPLETION", True),
}
HOOK_COMPLETIONS = ("fence", "event")
DEFAULTS = {"hang_timeout": "300s", "timeline_path": "/root/timeline", "collector": None,
            "hang_action": "report", "no_hook": False, "fault_list": None,
            "fault_list_max_age": "24h", "hook_time_every": None, "hook_completion": None}
TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


class ConfigError(ValueError):
    """A bad option; the message is one user-facing line naming it."""


@dataclasses.dataclass(frozen=True)
class Config:
    torchrun_argv: list[str]          # what torch.distributed.run gets, verbatim
    job_id: str
    node_rank: int
    nnodes_max: int
    rdzv_host: str                    # where node 0's collector listens when nnodes > 1
    rdzv_port: int
    hang_timeout: float = 300.0
    timeline_path: str = "/root/timeline"
    collector: str | None = None      # HOST:PORT of an existing collector
    hang_action: str = "report"
    no_hook: bool = False
    fault_list: str | None = None
    fault_list_max_age: float = 24 * 3600.0
    unbuffered: bool = False          # `python -u train.py`
    hook_time_every: int | None = None  # the hook device-times 1 call in N (its default: 8)
    hook_completion: str | None = None  # how the hook sees unsampled collectives complete

    @property
    def starts_collector(self) -> bool:
        return self.collector is None and self.node_rank == 0

    def collector_listen(self) -> str:
        """Where this node's collector binds: loopback for one node, else the
        rendezvous host on the rendezvous port + 1 (what the other nodes dial)."""
        if self.nnodes_max <= 1:
            return "127.0.0.1:0"
        return f"{self.rdzv_host}:{self.rdzv_port + 1}"


def torchrun_parser() -> argparse.ArgumentParser:
    from torch.distributed.run import get_args_parser
    parser = get_args_parser()
    parser.prog = "xpu_timer_launch"
    parser.allow_abbrev = False  # an abbreviated own option would leak to torchrun
    group = parser.add_argument_group("xpu-diag options (env equivalents in brackets)")
    helps = {
        "--hang-timeout": "a rank in one op longer than this is hung (300s) [%s]",
        "--timeline-path": "where hang events are written (/root/timeline) [%s]",
        "--collector": "HOST:PORT of a running collector; default: node-rank 0 starts one [%s]",
        "--hang-action": "report, or kill the workers so --max-restarts takes over [%s]",
        "--no-hook": "do not LD_PRELOAD the C++ hook [%s]",
        "--fault-list": "netcheck fault list; exit 75 if this node is in it [%s]",
        "--fault-list-max-age": "warn when the fault list is older (24h) [%s]",
        "--hook-time-every": "the hook device-times 1 GEMM/collective in N (8; 1 = all) [%s]",
        "--hook-completion": "how the hook sees untimed collectives complete: fence (drainer, "
                             "no launch cost, per poll) or event (exact per op) [%s]",
    }
    metavars = {"--hang-timeout": "D", "--timeline-path": "DIR", "--collector": "HOST:PORT",
                "--hang-action": "{report,kill}", "--fault-list": "PATH",
                "--fault-list-max-age": "D", "--hook-time-every": "N",
                "--hook-completion": "{fence,event}"}
    for option, (dest, env, takes_value) in OWN_OPTIONS.items():
        kwargs = {"dest": "xpu_" + dest, "default": None, "help": helps[option] % env}
        if takes_value:
            group.add_argument(option, metavar=metavars[option], **kwargs)
        else:
            group.add_argument(option, action="store_true", **kwargs)
    parser.error = _raise  # one line, no usage dump, no exit from inside parsing
    return parser


def _raise(message: str):
    if "training_script" in message:
        message = "no training script given; usage: xpu_timer_launch [options] train.py [args]"
    raise ConfigError(message)


def parse_args(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Config:
    env = os.environ if env is None else env
    argv = list(argv)
    ns = torchrun_parser().parse_args(argv)
    # Everything after the script is REMAINDER, verbatim: that fixes the split.
    script_at = len(argv) - len(ns.training_script_args) - 1
    prefix = _strip_own_options(argv[:script_at])
    own, names = _own_values(ns, env)
    script, rest, unbuffered, module = _script(ns.training_script, list(ns.training_script_args))
    if module and "-m" not in prefix and "--module" not in prefix:
        prefix.append("--module")
    return _build(ns, prefix + [script] + rest, own, names, env, unbuffered)


def _strip_own_options(prefix: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(prefix):
        token = prefix[i]
        name = token.split("=", 1)[0]
        if name in OWN_OPTIONS:
            i += 1 if ("=" in token or not OWN_OPTIONS[name][2]) else 2
            continue
        out.append(token)
        i += 1
    return out


def _own_values(ns, env) -> tuple[dict, dict]:
    """(values, names): each value, and how errors name it: the flag, or the
    environment variable it came from, so the user is told what they set."""
    values, names = {}, {}
    for option, (dest, var, takes_value) in OWN_OPTIONS.items():
        value, names[dest] = getattr(ns, "xpu_" + dest), option
        if value is None or value is False:
            raw = env.get(var)
            if raw is not None and raw != "":
                names[dest] = f"{var} ({option})"
                value = raw if takes_value else _yes_no(raw, names[dest])
            else:
                value = DEFAULTS[dest]
        values[dest] = value
    return values, names


def _yes_no(raw: str, name: str) -> bool:
    word = raw.strip().lower()
    if word not in TRUE + FALSE:
        raise ConfigError(f"{name}: {raw!r} is not a yes/no value; use 1 or 0")
    return word in TRUE


def _script(script: str, rest: list[str]):
    """Strip a leading ``python``; ``python -m mod`` -> module mode. Returns
    (script, args, unbuffered, module)."""
    if not PYTHON_NAME.match(os.path.basename(script)) or not rest:
        return script, rest, False, False
    unbuffered = False
    while rest and rest[0] in ("-u", "-B"):
        unbuffered |= rest.pop(0) == "-u"
    if rest and rest[0] == "-m":
        if len(rest) < 2:
            raise ConfigError("python -m: no module name given")
        return rest[1], rest[2:], unbuffered, True
    if not rest or rest[0].startswith("-"):
        bad = rest[0] if rest else "(nothing)"
        raise ConfigError(f"python option {bad!r} is not supported here; put the script "
                          f"first, or set the matching PYTHON* environment variable")
    return rest[0], rest[1:], unbuffered, False


def _build(ns, torchrun_argv, own, names, env, unbuffered) -> Config:
    try:
        hang_timeout = parse_duration(own["hang_timeout"], names["hang_timeout"])
        max_age = parse_duration(own["fault_list_max_age"], names["fault_list_max_age"])
    except UnitError as exc:
        raise ConfigError(str(exc)) from None
    if own["hang_action"] not in HANG_ACTIONS:
        raise ConfigError(f"{names['hang_action']}: {own['hang_action']!r} is not one of "
                          f"{', '.join(HANG_ACTIONS)}")
    if own["collector"] is not None:
        check_host_port(own["collector"], names["collector"])
    if not own["timeline_path"]:
        # Whether it can be written is tried by the runner, on the node that
        # writes it (the one that starts the collector), before anything starts.
        raise ConfigError(f"{names['timeline_path']}: empty path; use e.g. /root/timeline")
    if own["fault_list"] is not None and not own["fault_list"]:
        raise ConfigError("--fault-list: empty path; give the faults.json netcheck wrote")
    time_every = _positive_int(own["hook_time_every"], names["hook_time_every"])
    completion = own["hook_completion"]
    if completion is not None and completion not in HOOK_COMPLETIONS:
        raise ConfigError(f"{names['hook_completion']}: {completion!r} is not one of "
                          f"{', '.join(HOOK_COMPLETIONS)}")
    nnodes_max = _nnodes_max(ns.nnodes)
    rdzv_host, rdzv_port = _rendezvous(ns)
    return Config(
        torchrun_argv=torchrun_argv, job_id=_job_id(ns, env, rdzv_host, rdzv_port, nnodes_max),
        node_rank=int(ns.node_rank), nnodes_max=nnodes_max, rdzv_host=rdzv_host,
        rdzv_port=rdzv_port, hang_timeout=hang_timeout, timeline_path=own["timeline_path"],
        collector=own["collector"], hang_action=own["hang_action"], no_hook=bool(own["no_hook"]),
        fault_list=own["fault_list"], fault_list_max_age=max_age, unbuffered=unbuffered,
        hook_time_every=time_every, hook_completion=completion)


def _positive_int(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{option}: {text!r} is not a whole number >= 1; use e.g. 8 (1 times every call)")
    return value


def check_host_port(text: str, option: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{option}: {text!r} is not HOST:PORT; use e.g. 10.0.0.1:29501")
    return host, int(port)


def _nnodes_max(nnodes: str) -> int:
    try:
        return int(str(nnodes).split(":")[-1])
    except ValueError:
        raise ConfigError(f"--nnodes: {nnodes!r} is not N or MIN:MAX") from None


def _rendezvous(ns) -> tuple[str, int]:
    if ns.rdzv_endpoint:
        host, _, port = ns.rdzv_endpoint.rpartition(":")
        if host and port.isdigit():
            return host, int(port)
        return ns.rdzv_endpoint, 29400
    return ns.master_addr or "127.0.0.1", int(ns.master_port or 29500)


def _job_id(ns, env, rdzv_host, rdzv_port, nnodes_max) -> str:
    """torchrun's --rdzv-id, else TORCHELASTIC_RUN_ID, else one we make (the same
    on every node of a multi-node job: derived from the rendezvous address)."""
    raw = ns.rdzv_id if ns.rdzv_id and ns.rdzv_id != "none" else env.get("TORCHELASTIC_RUN_ID")
    if not raw:
        raw = (f"job-{rdzv_host}-{rdzv_port}" if nnodes_max > 1
               else f"job-{uuid.uuid4().hex[:8]}")
    clean = _JOB_ID_DROP.sub("", raw).strip(".")
    return clean or f"job-{uuid.uuid4().hex[:8]}"
