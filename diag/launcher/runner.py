"""What ``xpu_timer_launch`` does once its options are valid.

Order matters: the collector starts before the environment is changed (it
must not trace itself), the agent before torchrun (no worker record is
missed), and everything is torn down in ``finally`` blocks, so the launcher
exits with torchrun's status whatever the diagnostics did, except when
xpu-diag itself ended the job because of a hang (3, closing.py), which ends
with a summary of the run's events after torchrun's block.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import sys
import threading

import diag
from diag.agent import dumps
from diag.agent.agent import Agent
from diag.agent.config import AgentConfig
from diag.common import envnames, options, owned_dirs
from diag.common.atomic import probe_writable_dir
from diag.launcher import collector_proc, exits, torchrun, watched
from diag.launcher.closing import Closing
from diag.launcher.collector_keeper import CollectorKeeper
from diag.launcher.config import Config
from diag.launcher.recovery import NodeRecovery

EXIT_USAGE = 2  # as for a bad option (main.py)
ENV_TOKEN = envnames.JOB_TOKEN
ENV_SHM_DIR = envnames.SHM_DIR
BOOTSTRAP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bootstrap")
HOOK_LIB = os.path.join(os.path.dirname(os.path.abspath(diag.__file__)), "lib",
                        "libxpu_timer_hook.so")
# The NCCL profiler plugin (docs/link.md): NCCL loads it from NCCL_PROFILER_PLUGIN.
PROFILER_LIB = os.path.join(os.path.dirname(HOOK_LIB), "libxpu_nccl_profiler.so")


def say(message: str) -> None:
    sys.stderr.write(f"xpu_timer_launch: {message}\n")
    sys.stderr.flush()


# torchrun turns these into SignalException once its workers start; before
# that (and after) they would kill us without running the clean-up below.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(Exception):
    """A stop signal arrived while torchrun was not handling signals."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum, _frame):
    raise Stopped(signum)


def run(config: Config) -> int:
    problem = script_problem(config)
    if problem is not None:
        say(problem)
        return EXIT_USAGE
    if config.rank_order_note:
        say(config.rank_order_note)
    if config.fault_list is not None:
        code = check_fault_list(config)
        if code is not None:
            return code
    problem = timeline_problem(config) or (
        collector_proc.argv_problem(config) if config.starts_collector else None)
    if problem is not None:
        say(problem)
        return EXIT_USAGE
    closing = Closing(config)
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        status = _run(config, closing)
    except Stopped as exc:
        say(f"stopped by signal {exc.signum}")
        status = 128 + exc.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    # After the collector stopped (its last lines) and torchrun's block: the last word.
    return closing.finish(status)


FULL_BELOW = 4096      # bytes free under which /dev/shm is full (one page: an address file)


def _run(config: Config, closing: Closing) -> int:
    tool_env = dict(os.environ)
    token = config.job_token or secrets.token_urlsafe(32)
    shm_dir = make_shm_dir(config)
    addr_dir = address_dir(config, shm_dir, closing)
    recovery = NodeRecovery(config, say)   # the snapshot store, outliving every restart
    keeper = None
    try:
        address = config.collector
        if config.starts_collector:
            keeper = CollectorKeeper(config, token, addr_dir, tool_env, say)   # restarts it if it dies
            try:
                address = keeper.start()
            except collector_proc.CollectorError as exc:
                keeper = None
                if exc.status == EXIT_USAGE and shm_full(addr_dir):   # TMPDIR full too: no room, no usage error
                    say(f"{exc} (its line above): {addr_dir} is full too; training goes on without hang "
                        f"detection")
                    closing.detection_off = "no room for the collector's address file"
                elif exc.status == EXIT_USAGE:  # it said why; here, not bound (e.g. port in use)
                    say(f"{exc} (its line above); no worker was started")
                    return EXIT_USAGE
                say(f"{exc}; training goes on without hang detection")
                closing.detection_off = "the collector did not start"
        elif address is None:
            address = config.collector_listen()
        os.environ.update(worker_env(config, token, shm_dir))
        os.environ.update(recovery.worker_env())
        os.environ.update(recovery.restart_env())
        # Inherited from a traced process (a launch from inside a worker, an
        # exported shell): it would tell every worker's tracer that the region
        # is some other process's, and the job would run untraced, in silence.
        os.environ.pop(envnames.TRACER_PID, None)
        agent = Agent(agent_config(config, address, token, shm_dir, tool_env, recovery))
        agent.recovery.leave = recovery.leave
        untrusted = NodeStop(f"node {config.node_rank} stopped: the collector address {address} is held by a "
                             f"server that is not this job's (the agent's line above); free that port or pass "
                             f"--collector HOST:PORT of this job's collector",
                             lambda: (owned_dirs.remove(shm_dir), recovery.close()))
        agent.on_untrusted = untrusted
        agent.submit = closing.noting(agent.submit)   # every command the collector sends, seen first
        agent.start()
        closing.start()
        expected, free = watched.local_world_size(config.torchrun_argv), watched.free_bytes(shm_dir)
        outcome: dict = {}   # torchrun's own result: how each worker ended (exits.py)
        oom_before, stopped_by = exits.oom_kills(), None
        try:
            status = torchrun.run(config.torchrun_argv, os.path.join(shm_dir, "torchelastic"), closing.failures,
                                  outcome)
        except Stopped as exc:
            stopped_by = exc.signum
            if recovery.leaving is None and untrusted.reason is None:
                raise
            status = 128 + exc.signum
        finally:
            untrusted.handled.set()
            for sig in STOP_SIGNALS:  # torchrun left its handlers installed
                signal.signal(sig, _raise_stopped)
            note_exits(agent, outcome, oom_before, stopped_by)   # before the agent's last report
            closing.unwatched = _unwatched(agent, config, expected, shm_dir, free)
            agent.stop()
        if untrusted.reason is not None:
            say(untrusted.message)
            closing.started_unix = None   # the line above is the whole story
            return EXIT_USAGE
        return recovery.outcome(status)
    finally:
        if keeper is not None:
            keeper.stop()
            if keeper.off and not closing.detection_off:
                closing.detection_off = "the collector died and did not start again"
        owned_dirs.remove(shm_dir)
        if addr_dir != shm_dir:
            owned_dirs.remove(addr_dir)
        recovery.close()


def _unwatched(agent: Agent, config: Config, expected: int | None, shm_dir: str, free: int | None) -> str:
    """The closing summary's line on this node's ranks never watched; never raises."""
    try:
        with agent.lock:
            seen = {s.local_rank for s in agent.state.ranks.values()}
        later = watched.free_bytes(shm_dir)
        least = min((f for f in (free, later) if f is not None), default=None)
        return watched.unwatched_line(expected, seen, shm_dir, least, config.nnodes_max <= 1, config.node_rank)
    except Exception:
        return ""


def note_exits(agent: Agent, outcome: dict, oom_before: int | None, stopped_by: int | None) -> None:
    """Hand the agent how this node's workers ended (torchrun's result): its
    last report carries them to the collector, which judges a failure. Never
    raises: the launcher ends the same way without it."""
    try:
        agent.sample_once()   # the workers torchrun reaped are marked gone, with their last records
        with agent.lock:
            local = {r: s.pid for r, s in agent.state.ranks.items()}
        agent.note_exits(exits.rank_exits(outcome, local, oom_before, exits.oom_kills(), stopped_by))
    except Exception as exc:
        say(f"could not tell the collector how the workers ended ({exc!r}); a failure is judged without it")


class NodeStop:
    """Called by the agent (its connection thread) when the collector's
    address is held by a server that failed the handshake: stop
    torchrun as recovery.leave does (SIGTERM). Its rendezvous may be inside
    a C++ wait (the static rendezvous's TCPStore connect, minutes long) where
    no signal handler runs: then, GRACE_S later, this says the line, removes
    the node's directories and exits; no worker has started then."""

    GRACE_S = 3.0

    def __init__(self, message: str, cleanup) -> None:
        self.message = message
        self.reason: str | None = None
        self.handled = threading.Event()   # set once the main thread has left torchrun
        self._cleanup = cleanup

    def __call__(self, reason: str) -> None:
        self.reason = reason
        os.kill(os.getpid(), signal.SIGTERM)
        if self.handled.wait(self.GRACE_S):
            return
        say(self.message)
        try:
            self._cleanup()
        finally:
            os._exit(EXIT_USAGE)


def script_problem(config: Config, cwd: str | None = None) -> str | None:
    """Why the workers could not start the training script, or None; said
    before the collector starts. A module (-m) is left to Python: finding one
    means importing its parent packages."""
    script, cwd = config.script, cwd or os.getcwd()
    if config.script_kind == "module" or not script:
        return None
    if config.script_kind == "command":   # --no-python: run as is, like a shell would
        if os.sep not in script:
            found = shutil.which(script)
            return None if found else f"--no-python: {script!r} is not a command on PATH"
        path = os.path.join(cwd, script)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return None
        return f"--no-python: {script!r} is not an executable file (in {cwd})"
    if os.path.exists(os.path.join(cwd, script)):
        return None
    return f"training script {script!r} does not exist (in {cwd}); check the path"


def timeline_problem(config: Config) -> str | None:
    """Why this node cannot write hang events under --timeline-path, or None.

    Tried by writing, not by os.access (which says yes to root on /proc), and
    only where the collector starts: other nodes write nothing there. A bad
    path must stop the launch: the collector would refuse it, and the job
    would run without hang detection."""
    if not config.starts_collector:
        return None
    path = config.timeline_path
    try:
        probe_writable_dir(path)
        return None
    except OSError as exc:
        why = exc.strerror or str(exc)
    if path == options.TIMELINE_PATH.default:
        home = os.path.expanduser("~")
        suggestion = (os.path.join(home, "xpu-timeline") if os.access(home, os.W_OK)
                      else f"/tmp/xpu-timeline-{_user()}")
        return (f"--timeline-path: the default {path!r} is not writable by user "
                f"{_user()} ({why}); pass --timeline-path DIR or set {envnames.TIMELINE_PATH}, "
                f"e.g. --timeline-path {suggestion}")
    return (f"--timeline-path: cannot write in {path!r} ({why}); pass a writable "
            f"directory, e.g. --timeline-path /tmp/xpu-timeline")


def _user() -> str:
    try:
        import pwd
        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"


def make_shm_dir(config: Config) -> str:
    """A private (0700) directory, in /dev/shm where there is one. Those a
    killed launcher of this user left there go first (diag/common/owned_dirs.py)."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    owned_dirs.sweep(base)
    return owned_dirs.make(f"{owned_dirs.PREFIX}{config.job_id}-n{config.node_rank}-", base)


def address_dir(config: Config, shm_dir: str, closing: Closing) -> str:
    """Where the collector writes its address file: ``shm_dir``, or when that
    is full, a private directory under TMPDIR (the caller removes it). A full
    /dev/shm is said once, loudly: training never waits for the tool. The
    rings cannot be made there (each tracer says so), and node 0's collector
    still serves the other nodes."""
    if not shm_full(shm_dir):
        return shm_dir
    say(full_shm_line(config, shm_dir))
    closing.detection_off = f"{os.path.dirname(shm_dir)} is full"
    return owned_dirs.make(f"{owned_dirs.PREFIX}{config.job_id}-n{config.node_rank}-addr-", None)


def shm_full(path: str) -> bool:
    """No room for one more page there: not even the collector's address file fits."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < FULL_BELOW


def full_shm_line(config: Config, shm_dir: str) -> str:
    base = os.path.dirname(shm_dir)
    try:
        st = os.statvfs(shm_dir)
        free = st.f_bavail * st.f_frsize
    except OSError:
        free = 0
    return (f"HANG DETECTION IS OFF on node {config.node_rank}: {base} is full ({free:,} bytes free): no room for the "
            f"ranks' progress rings (about 516 KiB each); training goes on, unwatched on this node; free "
            f"space in {base} (files of ended jobs, or a larger --shm-size for a container) for the next run")


def worker_env(config: Config, token: str, shm_dir: str, env=os.environ) -> dict:
    """Environment the workers inherit (docs/launcher.md lists each variable)."""
    out = {ENV_TOKEN: token, ENV_SHM_DIR: shm_dir,
           "PYTHONPATH": os.pathsep.join(filter(None, [BOOTSTRAP_DIR, env.get("PYTHONPATH")]))}
    if not config.no_hook and os.path.exists(HOOK_LIB):
        out["LD_PRELOAD"] = " ".join(filter(None, [HOOK_LIB, env.get("LD_PRELOAD")]))
    if not config.no_hook and not config.no_link_plugin:
        out.update(profiler_env(env))
    out.update(options.env_for(options.TO_WORKERS, config))
    if config.unbuffered:
        out["PYTHONUNBUFFERED"] = "1"
    return out


_said_profiler = False


def profiler_env(env) -> dict:
    """NCCL_PROFILER_PLUGIN -> our plugin, unless the user set one: theirs is
    kept (NCCL loads one plugin) and that is said once."""
    global _said_profiler
    own = env.get(envnames.NCCL_PROFILER_PLUGIN)
    if own:
        if not _said_profiler and own != PROFILER_LIB:
            _said_profiler = True
            say(f"NCCL_PROFILER_PLUGIN={own} is set: keeping it, so NCCL loads that plugin and not "
                "xpu-diag's; a hang where every rank waits will not name the link (docs/link.md)")
        return {}
    return {envnames.NCCL_PROFILER_PLUGIN: PROFILER_LIB} if os.path.exists(PROFILER_LIB) else {}


def agent_config(config: Config, address, token, shm_dir, tool_env, recovery=None) -> AgentConfig:
    own = {opt.dest: getattr(config, opt.dest) for opt in options.AGENT}
    own["ckpt_dir"] = recovery.persist_dir if recovery is not None else own["ckpt_dir"]
    return AgentConfig(shm_dir=shm_dir, collector=address, token=token, job_id=config.job_id,
                       store_dir=recovery.store_dir if recovery is not None else None,
                       nnodes_min=config.nnodes_min,
                       node_rank=config.node_rank, root_pid=os.getpid(), tool_env=tool_env,
                       dump_tools=config.dump_tools or dumps.default_tools(), **own)


def check_fault_list(config: Config) -> int | None:
    """Exit status if this node must not run (faulty: 75; unreadable list: 2)."""
    from diag import faultlist  # only jobs that pass --fault-list pay for the import
    try:
        faults = faultlist.load(config.fault_list)
    except faultlist.FaultListError as exc:
        say(str(exc))
        return 2
    from diag.common.net import local_addrs
    hit = faults.match(os.environ.get(envnames.NODE_NAME, ""), socket.gethostname(), local_addrs())
    if hit is not None:
        entry, how = hit
        say(f"node {entry.node} is marked faulty in {config.fault_list} (matched by {how}): {entry.reason}")
        return faultlist.EXIT_FAULTY_NODE
    stale = faults.stale(config.fault_list_max_age)
    if stale:
        say(f"warning: fault list {config.fault_list} {stale} "
            f"(--fault-list-max-age {config.fault_list_max_age / 3600:.1f} h); rerun netcheck")
    return None
