"""The hook never hurts the process: inert without CUDA or when switched off,
safe across fork and many threads, and a missing symbol is said once."""

import os
import subprocess

import pytest

from diag.records import format as fmt
from tests.kernel_hook.conftest import BUILD, HOOK, HOOKPROG, read_regions, run_prog
from tests.tmpfs import small_tmpfs


def _unchanged_by_the_hook(mode, want, shm_dir, env):
    """Runs hookprog MODE without the hook, which must print want, then with
    it: the same output, exit 0 and nothing on stderr. Returns the hooked
    run's one region in shm_dir."""
    plain = run_prog(mode, shm_dir=None, preload=False, env=env)
    assert plain.stdout == want
    out = run_prog(mode, shm_dir=str(shm_dir), env=env)
    assert (out.returncode, out.stdout, out.stderr) == (0, plain.stdout, "")
    [region] = read_regions(str(shm_dir))
    return region


def test_inert_in_a_process_that_never_touches_cuda(built, tmp_path):
    out = run_prog("nocuda", shm_dir=str(tmp_path))
    assert (out.returncode, out.stdout, out.stderr) == (0, "threads 1\n", "")
    assert os.listdir(tmp_path) == []


def test_inert_without_shm_dir_or_when_disabled(built, tmp_path):
    plain = run_prog("missing", shm_dir=None, preload=False)
    for env in ({}, {"XPU_TIMER_SHM_DIR": str(tmp_path), "XPU_TIMER_HOOK_DISABLE": "1"}):
        out = run_prog("missing", shm_dir=None, env=env)
        assert (out.returncode, out.stdout, out.stderr) == (0, plain.stdout, "")
    assert os.listdir(tmp_path) == []


def test_forked_child_works_and_writes_nothing(built, tmp_path):
    out = run_prog("fork", shm_dir=str(tmp_path))
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert out.stdout.split("\n")[:2] == ["child ok 0", "child status 0"]
    [region] = read_regions(str(tmp_path))  # the parent's only
    assert len(region.of(fmt.EVENT_END, "cublasGemmEx")) == 2


def test_many_threads_lose_nothing_or_count_it(built, tmp_path):
    # No agent drains the region here: make room for every record.
    out = run_prog("threads", "64", "100", shm_dir=str(tmp_path),
                   env={"XPU_TIMER_RING_CAPACITY": "65536"})
    assert (out.returncode, out.stdout, out.stderr) == (0, "done 6400\n", "")
    [region] = read_regions(str(tmp_path))
    assert len(region.of(fmt.EVENT_END, "cublasGemmEx")) + region.dropped == 6400
    # Each iteration: one runtime launch, and the GEMM's kernel through the driver.
    assert sum(r.count for r in region.of(fmt.EVENT_COUNT)) == 2 * 6400
    assert len({r.op_id for r in region.of(fmt.EVENT_END)}) == len(region.of(fmt.EVENT_END))


def test_missing_timing_symbol_switches_off_with_one_line(built, tmp_path):
    plain = run_prog("missing", shm_dir=None, preload=False)
    out = run_prog("missing", shm_dir=str(tmp_path), lib_dir=os.path.join(BUILD, "fake_no_query"))
    assert (out.returncode, out.stdout) == (0, plain.stdout)
    [line] = out.stderr.splitlines()
    assert line.startswith("xpu-diag hook (pid ") and "cudaEventQuery not found" in line
    assert "switched off" in line
    assert os.listdir(tmp_path) == []


def test_missing_forwarded_symbol_fails_that_call_only(built, tmp_path):
    lib = os.path.join(BUILD, "fake_no_hgemm")
    # Without the hook the process dies at the call (lazy binding)...
    plain = subprocess.run([HOOKPROG, "missing"], env={"LD_LIBRARY_PATH": lib},
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 127 and "cublasHgemm" in plain.stderr
    # ...with it, that one call returns CUBLAS_STATUS_NOT_INITIALIZED and the rest work.
    out = run_prog("missing", shm_dir=str(tmp_path), lib_dir=lib)
    assert (out.returncode, out.stdout) == (0, "hgemm 1 gemm 0 allreduce 0 launch 0\n")
    [line] = out.stderr.splitlines()
    assert "cublasHgemm not found" in line


def test_bad_capacity_is_said_once_and_the_default_used(built, tmp_path):
    out = run_prog("missing", shm_dir=str(tmp_path), env={"XPU_TIMER_RING_CAPACITY": "1000"})
    assert out.returncode == 0
    [line] = out.stderr.splitlines()
    assert "XPU_TIMER_RING_CAPACITY=1000 is not a power of two; using 4096" in line
    [region] = read_regions(str(tmp_path))
    assert region.header.capacity == 4096


@pytest.mark.parametrize("name, value, default", [
    ("XPU_TIMER_RING_CAPACITY", "abc", 4096), ("XPU_TIMER_RING_CAPACITY", "99999999999", 4096),
    ("XPU_TIMER_HOOK_POLL_US", "1ms", 1000), ("XPU_TIMER_HOOK_TIME_EVERY", "8x", 8)])
def test_a_number_that_does_not_parse_is_said_once_and_the_default_used(built, tmp_path, name,
                                                                      value, default):
    # Before: strtol's garbage or an int overflow became the default, or a wrapped value, silently.
    out = run_prog("missing", shm_dir=str(tmp_path), env={name: value})
    assert out.returncode == 0
    [line] = out.stderr.splitlines()
    assert line.endswith(f"): {name}={value} is not a whole number; using {default}"), line
    [region] = read_regions(str(tmp_path))
    assert region.header.capacity == 4096


def test_unusable_shm_dir_is_said_once(built, tmp_path):
    missing_dir = tmp_path / "gone"
    out = run_prog("missing", shm_dir=str(missing_dir))
    assert (out.returncode, out.stdout) == (0, "hgemm 0 gemm 0 allreduce 0 launch 0\n")
    [line] = out.stderr.splitlines()
    assert f"cannot create {missing_dir}/.tmp-hook-r0-p" in line and "switched off" in line


def test_callers_errno_survives_the_hook(built, tmp_path):
    # The first hooked call starts the hook (files, mmap, dlopen, a thread);
    # an unusable directory, a missing symbol: none of it may leak into errno.
    want = "errno 4242 4243 4244 4245 4246\n"
    assert run_prog("errno", shm_dir=None, preload=False).stdout == want
    for shm_dir, lib_dir in ((tmp_path, None), (tmp_path / "gone", None),
                             (tmp_path, os.path.join(BUILD, "fake_no_hgemm")),
                             (tmp_path, os.path.join(BUILD, "fake_no_query"))):
        out = run_prog("errno", shm_dir=str(shm_dir), lib_dir=lib_dir)
        assert (out.returncode, out.stdout) == (0, want), (shm_dir, lib_dir, out.stderr)


def test_full_shm_dir_switches_off_instead_of_sigbus(built, tmp_path):
    # A region on a tmpfs without room for it: a sparse file would map fine and
    # then kill the process with SIGBUS at the first record past the free space.
    with small_tmpfs(tmp_path / "small", "64k") as small:
        out = run_prog("threads", "4", "100", shm_dir=str(small),
                       env={"XPU_TIMER_HOOK_TIME_EVERY": "1"})
        assert (out.returncode, out.stdout) == (0, "done 400\n"), out.stderr
        [line] = out.stderr.splitlines()
        assert "cannot reserve or map" in line and "switched off" in line
        assert os.listdir(small) == []


def test_drainer_never_invalidates_a_graph_capture(built, tmp_path):
    # The drainer polls a running all-reduce's event while another stream
    # captures in global mode: in that mode the fake (like the real runtime)
    # invalidates the capture on any thread's cudaEventQuery, unless that
    # thread is in thread-local capture mode.
    region = _unchanged_by_the_hook("capture_inflight", "capture 0 0\n", tmp_path,
                                    {"FAKE_DELAY_US": "ncclAllReduce=300000"})
    [end] = region.of(fmt.EVENT_END, "ncclAllReduce")  # tracked to completion
    assert not end.flags & fmt.FLAG_FAILED


def test_zero_poll_period_does_not_spin(built, tmp_path):
    # XPU_TIMER_HOOK_POLL_US=0 would make the drainer spin on a core of the
    # training process: it is said once and the default used.
    env = {"XPU_TIMER_HOOK_POLL_US": "0", "XPU_TIMER_HOOK_COUNT_MS": "-5"}
    e = {**{k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "FAKE_"))},
         **env, "LD_PRELOAD": HOOK, "XPU_TIMER_SHM_DIR": str(tmp_path)}
    proc = subprocess.Popen([HOOKPROG, "hang", "1"], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, err
    assert sorted(err.splitlines()) == sorted([
        f"xpu-diag hook (pid {proc.pid}, rank ?): XPU_TIMER_HOOK_POLL_US=0 is not a positive "
        "number; using 1000",
        f"xpu-diag hook (pid {proc.pid}, rank ?): XPU_TIMER_HOOK_COUNT_MS=-5 is not a positive "
        "number; using 500"])
    # One second asleep: a spinning drainer would burn most of it.
    assert usage.ru_utime + usage.ru_stime < 0.5
    [region] = read_regions(str(tmp_path))
    assert len(region.of(fmt.EVENT_END, "ncclAllReduce")) == 3


def test_drainer_makes_no_context_on_device_0(built, tmp_path):
    # A process on device 1 only: a runtime call from a thread with no current
    # device makes device 0's primary context (the fake, like the real runtime).
    env = {"XPU_TIMER_HOOK_COUNT_MS": "20", "XPU_TIMER_HOOK_TIME_EVERY": "2"}
    region = _unchanged_by_the_hook("device1", "contexts 2\n", tmp_path, env)  # device 1 only
    assert len(region.of(fmt.EVENT_END, "ncclAllReduce")) == 4
    assert any(r.flags & fmt.FLAG_DEVICE_TIMED for r in region.of(fmt.EVENT_END))
    # 4 rounds of a launch, a GEMM's kernel and an all-reduce's, named by the drainer.
    assert sum(r.count for r in region.of(fmt.EVENT_COUNT)) == 12


def test_fork_while_another_thread_starts_the_hook(built, tmp_path):
    # The starter is held inside the start (its one line blocks on a full
    # stderr pipe) when the main thread forks. Each hooked call of the child
    # would otherwise wait >= 100 ms for a start that never ends in it.
    out = run_prog("fork_during_start", shm_dir=str(tmp_path),
                   env={"XPU_TIMER_RING_CAPACITY": "1000"})
    assert out.returncode == 0, out.stderr
    child_ms, status = out.stdout.splitlines()
    assert status == "child status 0"
    assert int(child_ms.split()[-1]) < 250, child_ms  # 5 calls; >= 500 when waiting


def test_failed_event_record_leaves_no_last_error(built, tmp_path):
    # The ops' stream is on device 0, device 1 is current: the hook's event
    # records fail (as cudaEventRecord does across devices); the caller's
    # cudaGetLastError must not report the hook's error as its own.
    region = _unchanged_by_the_hook("two_devices", "allreduce 0 gemm 0 last 0\n", tmp_path,
                                    {"XPU_TIMER_HOOK_TIME_EVERY": "1"})
    ends = region.of(fmt.EVENT_END)
    assert sorted(r.name for r in ends) == ["cublasGemmEx", "ncclAllReduce"]
    assert not any(r.flags & fmt.FLAG_DEVICE_TIMED for r in ends)
