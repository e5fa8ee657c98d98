"""tests/preloaded.py's forked processes as the launcher's tests use them
(tests/functional/launch.py): output read as it comes from FIFOs that end
as a pipe does, a session of its own, the exit status."""

import os
import signal
import time

from tests import preloaded

CHILD = r"""
import os, subprocess, sys, time
print("parent", os.getpgid(0) == os.getpid(), flush=True)
print("to stderr", file=sys.stderr, flush=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0); print('grandchild', flush=True)"])
sys.exit(3)
"""


def test_streams_end_when_every_descendant_has_closed_them_and_the_status_is_the_scripts(tmp_path):
    proc = preloaded.Forked(["-c", CHILD], dict(os.environ), str(tmp_path), streams=True, session=True)
    assert proc.stdout.readline() == b"parent True\n"          # a session of its own: it leads its group
    assert proc.stderr.readline() == b"to stderr\n"
    assert proc.wait(30) == 3
    started = time.monotonic()
    # the grandchild holds stdout still: EOF only once it is gone, as on a pipe
    assert proc.stdout.read() == b"grandchild\n"
    assert time.monotonic() - started > 0.3
    assert proc.stderr.read() == b""
    assert not os.path.exists(proc._out) and not os.path.exists(proc._err)   # the FIFOs go once opened


def test_a_signal_reads_as_subprocess_reads_it(tmp_path):
    proc = preloaded.Forked(["-c", "import time; print('up', flush=True); time.sleep(60)"], dict(os.environ),
                            str(tmp_path), streams=True, session=True)
    assert proc.stdout.readline() == b"up\n"
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(30) == -signal.SIGTERM


def test_a_spawn_the_server_cannot_make_is_an_error_and_the_server_lives_on(tmp_path):
    server = preloaded._get()
    said = server.ask(op="spawn", argv=["-c", "pass"], env={}, cwd=str(tmp_path),
                      out=str(tmp_path / "missing" / "out"), err=str(tmp_path / "err"), fsize=None)
    assert "No such file or directory" in said["error"]
    assert preloaded.Forked(["-c", "pass"], dict(os.environ), str(tmp_path)).wait(30) == 0


def test_a_module_runs_as_python_m_would_and_a_namespace_it_cannot_join_is_exit_126(tmp_path):
    (tmp_path / "here.py").write_text("import os, sys\nprint(sys.argv[1:], __name__, os.getpriority(os.PRIO_PROCESS, 0))\n"
                                      "sys.exit(4)\n")
    proc = preloaded.Forked(["-m", "here", "a"], dict(os.environ), str(tmp_path), nice=3)
    server = preloaded._get().proc.pid
    assert proc.wait(30) == 4
    assert proc.output() == (f"['a'] __main__ {os.getpriority(os.PRIO_PROCESS, server) + 3}\n", "")
    proc = preloaded.Forked(["-c", "print('ran')"], dict(os.environ), str(tmp_path), netns="xpu-diag-no-such-ns")
    assert proc.wait(30) == 126
    assert proc.output() == ("", "preloaded: [Errno 2] No such file or directory: '/run/netns/xpu-diag-no-such-ns'\n")
