"""The rank's process-tree counters read from /proc (diag/agent/activity.py),
on real processes: a blocked tree shows no change, work in a descendant
shows as the rank's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from diag.agent import activity

# A parent that starts one child and then blocks; the child does what argv[1] says.
TREE = r"""
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
child.wait()
"""


def _tree(child_code: str):
    p = subprocess.Popen([sys.executable, "-c", TREE, child_code], stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    return p, child


def _until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pred()
        if found:
            return found
        time.sleep(0.05)
    return pred()


def test_a_blocked_tree_stands_still_and_a_gone_one_is_none():
    p, child = _tree("import time; print('ready', flush=True); time.sleep(60)")
    try:
        assert p.stdout.readline().strip() == "ready"    # both interpreters are up and blocked
        first = activity.of_tree(p.pid)
        assert first.procs == 2
        time.sleep(0.5)
        again = activity.of_tree(p.pid)
        assert (again.cpu_ns, again.io_bytes) == (first.cpu_ns, first.io_bytes)
        assert not again.runnable and not again.disk_wait       # both sleep: state S
    finally:
        p.kill(), p.wait()
        os.kill(child, 9)
    assert activity.of_tree(p.pid) is None


def test_cpu_and_bytes_of_a_descendant_count_for_the_rank(tmp_path):
    # the child spins for 0.4 s of its own CPU (not of the clock: on a loaded
    # machine a wall-clock spin got 0.09 s), then writes 4 MiB and reads it
    # back: the parent itself stays blocked
    code = (f"import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"
            f"open({str(tmp_path / 'ckpt')!r}, 'wb').write(b'x' * (4 << 20))\n"
            f"open({str(tmp_path / 'ckpt')!r}, 'rb').read()\ntime.sleep(60)")
    p, child = _tree(code)
    try:
        before = _until(lambda: (a := activity.of_tree(p.pid)) and a.procs == 2 and a)
        after = _until(lambda: (a := activity.of_tree(p.pid)) and a.io_bytes - before.io_bytes >= 8 << 20 and a)
        assert after, activity.of_tree(p.pid)
        assert after.cpu_ns - before.cpu_ns >= 200_000_000      # the child's 0.4 s spin
        own = activity.of_tree(child)
        assert own.procs == 1 and own.io_bytes >= 8 << 20       # it is the child's, summed into the rank
    finally:
        p.kill(), p.wait()
        os.kill(child, 9)


def test_the_quiet_clock_runs_for_a_blocked_tree_and_stays_at_zero_for_a_busy_one():
    blocked, b_child = _tree("import time; print('ready', flush=True); time.sleep(60)")
    busy, s_child = _tree("print('ready', flush=True)\nwhile True: pass")
    clock = activity.QuietClock()
    try:
        assert blocked.stdout.readline().strip() == "ready" and busy.stdout.readline().strip() == "ready"
        quiet, t0 = {}, None
        for _ in range(4):
            now = time.monotonic_ns()
            t0 = t0 or now
            for p in (blocked, busy):
                quiet[p.pid] = clock.observe(0 if p is blocked else 1, p.pid, activity.of_tree(p.pid), 0, now)
            time.sleep(0.25)
        assert quiet[busy.pid] == 0                        # a spinning descendant: busy at every read
        assert activity.of_tree(busy.pid).runnable         # it is in state R whether it has the CPU or not
        assert quiet[blocked.pid] == now - t0 >= 700_000_000   # quiet since its first read
        # a kernel launch is activity, as is a new read after a restart (another pid)
        assert clock.observe(0, blocked.pid, activity.of_tree(blocked.pid), 5, now + 1) == 0
        assert clock.observe(0, 12345, activity.of_tree(blocked.pid), 5, now + 2) == 0
    finally:
        for p, c in ((blocked, b_child), (busy, s_child)):
            p.kill(), p.wait()
            os.kill(c, 9)


@pytest.mark.skipif(not os.path.exists("/proc/self/schedstat"), reason="this kernel keeps no schedstat")
def test_a_rank_that_computes_starved_of_cpu_is_busy_not_quiet():
    """A rank that computes on a host so loaded that it gets under
    BUSY_CPU_SHARE of a core still waits for the CPU on a run queue, which a
    blocked rank never does: busy all the same (a starved healthy rank was
    once taken as blocked, and its crossed waits as a deadlock). Here it runs
    at nice 19 on one CPU beside two spinners at nice 0: about 1 % of it, and
    on CI's loaded VM none at all in a whole second, so that the kernel had
    added no wait either (it does so only when the thread runs): its state R
    at the read says it all the same."""
    cpu = min(os.sched_getaffinity(0))
    pin = f"import os; os.sched_setaffinity(0, {{{cpu}}})\n"
    starved, child = _tree(pin + "os.nice(19); print('ready', flush=True)\nwhile True: pass")
    hogs = [subprocess.Popen([sys.executable, "-c", pin + "while True: pass"]) for _ in range(2)]
    clock = activity.QuietClock()
    try:
        assert starved.stdout.readline().strip() == "ready"
        time.sleep(0.3)                      # the hogs are spinning too
        t0, first = time.monotonic_ns(), activity.of_tree(starved.pid)
        clock.observe(0, starved.pid, first, 0, t0)
        time.sleep(1.0)
        t1, then = time.monotonic_ns(), activity.of_tree(starved.pid)
        share = activity.BUSY_CPU_SHARE * (t1 - t0)
        assert then.cpu_ns - first.cpu_ns < share, (then, first)    # the premise: it gets too little to count
        # but wants more: it waited for it, or it is still waiting at the read
        assert then.wait_ns - first.wait_ns > share or then.runnable, (then, first)
        assert clock.observe(0, starved.pid, then, 0, t1) == 0
    finally:
        for h in hogs:
            h.kill(), h.wait()
        starved.kill(), starved.wait()
        os.kill(child, 9)


def test_a_main_thread_in_state_r_is_activity_even_when_no_counter_moved():
    """The kernel adds a thread's run-queue wait only when it gets the CPU, so
    a rank starved through a whole interval moves no counter at all: its state
    R at the read keeps it from being quiet; the same counters in state S do not."""
    clock = activity.QuietClock()
    still = activity.Activity(cpu_ns=40_000_000, wait_ns=300_000_000, io_bytes=7, procs=2, disk_wait=False)
    second = 1_000_000_000
    assert clock.observe(0, 10, still, 0, 0) == 0
    assert clock.observe(0, 10, still, 0, second) == second             # no change, asleep: quiet
    starved = activity.Activity(**{**still.__dict__, "runnable": True})
    assert clock.observe(0, 10, starved, 0, 2 * second) == 0            # no change, but it wants a CPU
    assert clock.observe(0, 10, still, 0, 3 * second) == second         # asleep again: quiet since then
