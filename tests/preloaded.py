"""Worker processes forked from one server that has imported torch already.

Each Python process that imports torch spends about 1.5 CPU-seconds on it
before it does anything, and the suite starts hundreds of short ones: the
launcher of every job (tests/functional/launch.py: it is torchrun), and in
the recover tests the ranks of each job, each snapshot writer and restorer. The server
imports torch once; every process asked of it is a fork of it that then
runs its script as ``python SCRIPT ARGS`` would: its own environment,
working directory, argv and files for stdout and stderr, and the exit
status, threads joined and atexit handlers run as on a normal interpreter
exit (see ``_child`` for the one step left out), so a crash, a SIGKILL or an
``exit(2)`` reads as it does from a process started by ``subprocess``.
Only torch's modules are loaded before the fork; the project's
code is imported fresh in every child, so no state of ours crosses a fork.

The server is started on first use, one per test process, and stopped (and
waited for, so its children's CPU time is counted) at that process's exit.
Protocol: one JSON request a line on its stdin, one JSON reply a line.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings

_STARTUP_FILTERS = list(warnings.filters)   # the server runs without PYTHONWARNINGS (_Server)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


CLONE_NEWNET = 0x40000000   # <sched.h>


def _enter_netns(name: str) -> None:
    """Join network namespace ``name`` (``ip netns add``'s /run/netns/NAME),
    as ``ip netns exec NAME`` does for the sockets of a fresh process: this
    process has one thread, and its later threads inherit the namespace."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(os.path.join("/run/netns", name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _child(req: dict, out: int, err: int) -> None:
    """In the forked child: become ``python argv...`` and exit as it would,
    its stdout and stderr on the descriptors ``out`` and ``err``; never returns."""
    if req.get("session"):
        os.setsid()          # as subprocess's start_new_session: its own process group to signal
    try:
        if req.get("netns"):
            _enter_netns(req["netns"])
        if req.get("nice"):
            os.nice(req["nice"])   # as nice -n N: added to the server's
    except OSError as e:
        os.write(err, f"preloaded: {e}\n".encode())
        os._exit(126)      # the shell's "found but could not be run"
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    # The warning filters a fresh interpreter would start with under this environment.
    warnings.filters[:] = _STARTUP_FILTERS
    sys.warnoptions[:] = [opt for opt in req["env"].get("PYTHONWARNINGS", "").split(",") if opt]
    warnings._processoptions(sys.warnoptions)
    if req["env"].get("OMP_NUM_THREADS", "").isdigit():
        import torch
        torch.set_num_threads(max(1, int(req["env"]["OMP_NUM_THREADS"])))
    if req.get("fsize") is not None:
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (req["fsize"], req["fsize"]))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, f in ((1, out), (2, err)):
        os.dup2(f, fd)
        os.close(f)
    run_and_exit(req["argv"])


def _open_output(path: str) -> int:
    """``path`` opened for the child's output before the fork: a file, or a
    FIFO whose reader is open already (the client's, ``Forked``'s
    ``streams``), so that once the spawn's reply is out the child holds its
    writing end and the reader's EOF means what a pipe's would: every
    process that inherited it has closed it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o600)
    os.set_blocking(fd, True)   # non-blocking only to open a FIFO: the child's writes wait, as on a pipe
    return fd


def run_and_exit(argv: list[str]) -> None:
    """``python argv...`` in this forked process, and its exit as the
    interpreter's would be; never returns."""
    try:
        _run(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    # What the interpreter does on its way out before it tears its modules
    # down: join the threads, run the atexit handlers, flush. The teardown
    # itself is skipped: in a fork of a process holding torch it costs about
    # 0.8 CPU-seconds (copy-on-write faults over every module), and a process
    # these tests kill with SIGKILL never runs it either.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run(argv: list[str]) -> None:
    """``python argv...``: ``-c CODE ARGS``, ``-m MODULE ARGS`` or ``SCRIPT
    ARGS``, as __main__."""
    import runpy
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    elif argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]       # runpy sets argv[0] to the module's file
        sys.path[0] = os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")


def status(raw: int) -> int:
    """A waitpid status as subprocess's returncode (-N for signal N)."""
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def serve(files: str) -> None:
    """The server loop: spawn, poll and wait requests until stdin ends;
    then removes ``files``, its children's output folder (a client that
    ends with ``os._exit``, as a pytest-xdist worker may, never does)."""
    # The point of the server: torch's modules the children use, imported once, before every fork.
    # torch._dynamo: DDP's and fully_shard's constructors import it (about 0.5 CPU-s in every rank
    # that wraps a model); it starts no thread, so it forks as safely as the rest.
    import torch._dynamo  # noqa: F401
    import torch.distributed.checkpoint  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.run  # noqa: F401   the launcher's torchrun (tests/functional/launch.py)
    import torch.nn.parallel  # noqa: F401
    reply = sys.stdout
    children = set()
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        req = json.loads(line)
        if req["op"] == "spawn":
            reply.flush()
            fds = []
            try:
                for path in (req["out"], req["err"]):
                    fds.append(_open_output(path))
            except OSError as e:
                for fd in fds:
                    os.close(fd)
                reply.write(json.dumps({"error": f"{e.strerror}: {e.filename}"}) + "\n")
                reply.flush()
                continue
            out, err = fds
            pid = os.fork()
            if pid == 0:
                _child(req, out, err)
            os.close(out), os.close(err)
            children.add(pid)
            out = {"pid": pid}
        else:
            pid, raw = os.waitpid(req["pid"], os.WNOHANG if req["op"] == "poll" else 0)
            out = {"status": status(raw) if pid else None}
            if pid:
                children.discard(pid)
        reply.write(json.dumps(out) + "\n")
        reply.flush()
    for pid in children:            # the client is gone: reap what it left
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    shutil.rmtree(files, ignore_errors=True)


def _server_env() -> dict:
    """The server's environment, the same whoever starts it: what is read once,
    as the interpreter and torch's libraries load, is decided here for every
    child (one OpenMP thread, as tests/recover/jobs.py asks; torch.set_num_threads
    follows a child's own OMP_NUM_THREADS). PYTHONWARNINGS: each child applies its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("XPU_TIMER_") and k != "PYTHONWARNINGS"}
    return dict(env, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")


class _Server:
    def __init__(self):
        env = _server_env()
        self.dir = tempfile.mkdtemp(prefix="preloaded-")    # the children's stdout and stderr files
        self.proc = subprocess.Popen([sys.executable, "-c", "import sys; from tests.preloaded import serve; "
                                      "serve(sys.argv[1])", self.dir],
                                     cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lock = threading.Lock()
        self.names = itertools.count()
        atexit.register(self.stop)

    def ask(self, **req) -> dict:
        with self.lock:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the preloaded-torch server exited ({self.proc.poll()})")
        return json.loads(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(60)
        shutil.rmtree(self.dir, ignore_errors=True)


_server: _Server | None = None
_starting = threading.Lock()   # jobs started from several threads (tests/frameworks) share one server


def _get() -> _Server:
    global _server
    with _starting:
        if _server is None or _server.proc.poll() is not None:
            _server = _Server()
        return _server


def cpu_s() -> float:
    """CPU-seconds of this process's server so far, with its children's that
    it has reaped (each forked process's, with the children that one reaped);
    0 where none runs."""
    server = _server
    if server is None:
        return 0.0
    try:
        with open(f"/proc/{server.proc.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")   # utime stime cutime cstime
    except (OSError, ValueError, IndexError):
        return 0.0   # gone: reaped by this process, and counted in its RUSAGE_CHILDREN from then on


class Forked:
    """A ``subprocess.Popen``'s few calls the tests use, for a child of the server."""

    def __init__(self, argv: list[str], env: dict, cwd: str, fsize: int | None = None, streams: bool = False,
                 session: bool = False, netns: str | None = None, nice: int = 0):
        """``python *argv`` in ``cwd`` with exactly ``env``; ``fsize``: its
        RLIMIT_FSIZE. ``streams``: its stdout and stderr are read as they come,
        from ``self.stdout`` and ``self.stderr`` (binary, EOF once it and every
        descendant that inherited them have closed them, as pipes), not from
        files by ``output()``. ``session``: it leads a session of its own
        (``start_new_session``). ``netns``, ``nice``: as under ``ip netns exec
        NETNS nice -n NICE`` (a failure to enter either: exit 126, why on its
        stderr)."""
        self._server = _get()
        name = os.path.join(self._server.dir, str(next(self._server.names)))
        self._out, self._err = name + ".out", name + ".err"
        self.args = argv
        self.stdout = self.stderr = None
        if streams:
            readers = []
            for path in (self._out, self._err):
                os.mkfifo(path, 0o600)
                readers.append(os.open(path, os.O_RDONLY | os.O_NONBLOCK))   # the server's open finds a reader
        try:
            said = self._server.ask(op="spawn", argv=argv, env=env, cwd=cwd, out=self._out, err=self._err,
                                    fsize=fsize, session=session, netns=netns, nice=nice)
        finally:
            if streams:
                os.unlink(self._out), os.unlink(self._err)
        if "error" in said:
            for fd in readers if streams else ():
                os.close(fd)
            raise OSError(f"the preloaded-torch server could not start {argv[0]}: {said['error']}")
        if streams:
            for fd in readers:
                os.set_blocking(fd, True)
            self.stdout, self.stderr = (os.fdopen(fd, "rb") for fd in readers)
        self.pid = said["pid"]
        self.returncode: int | None = None
        self._done: tuple[str, str] | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.ask(op="poll", pid=self.pid)["status"]
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Waits (a timeout kills it, as ``subprocess.run`` does) and returns its stdout and stderr."""
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        return self.output()

    def output(self) -> tuple[str, str]:
        """What it wrote to stdout and stderr so far; its files are removed once it has ended."""
        if self._done is None:
            with open(self._out, errors="replace") as o, open(self._err, errors="replace") as e:
                out, err = o.read(), e.read()
            if self.returncode is None:
                return out, err
            self._done = (out, err)
            os.unlink(self._out), os.unlink(self._err)
        return self._done


def run(argv: list[str], cwd: str, env: dict | None = None, timeout: float | None = None,
        netns: str | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run([python, *argv], capture_output=True, text=True)``,
    forked; ``argv`` may start with this python (bench/launch_job.py's
    ``launcher()`` where there is no console script)."""
    if argv[:1] == [sys.executable]:
        argv = argv[1:]
    proc = Forked(argv, dict(os.environ) if env is None else env, str(cwd), netns=netns)
    out, err = proc.communicate(timeout)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
