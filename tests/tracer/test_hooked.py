"""Device collectives left to the C++ hook (diag/tracer/hooked.py): the
tracer records each (group, lane, peers) key's first TIE_OPS ops, then only
while the hook says it records. On a real GPU: tests/gpu/test_tracer_gpu.py."""

import os
import subprocess
import sys

from diag.tracer import hooked
from tests.kernel_hook.conftest import HOOK, built  # noqa: F401  (the fixture builds the hook)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_key_is_recorded_for_its_first_ops_then_left_while_the_hook_records(monkeypatch):
    monkeypatch.setattr(hooked, "ASK_EVERY_NS", 0)   # ask on every call: each answer is seen at once
    answers = []
    share = hooked.HookShare(lambda: answers[-1])
    answers.append(1)
    key, other = (7, 1, -1), (7, 2, 3)
    assert [share.leaves(key) for _ in range(hooked.TIE_OPS)] == [False] * hooked.TIE_OPS
    assert share.leaves(key) and share.leaves(key)
    assert not share.leaves(other)            # each key counts its own first ops
    answers.append(0)                         # the hook stopped recording (bypassed, switched off)
    assert not share.leaves(key)
    answers.append(1)
    assert share.leaves(key)


def test_the_hooks_answer_is_kept_a_while():
    calls = []
    share = hooked.HookShare(lambda: calls.append(1) or 1)
    key = (7, 1, -1)
    for _ in range(hooked.TIE_OPS + 100):
        share.leaves(key)
    assert len(calls) == 1     # 100 ops within ASK_EVERY_NS: one call into the hook


def test_without_a_hook_every_op_is_recorded():
    share = hooked.HookShare(None)
    assert not share.present
    assert not any(share.leaves((0, 1, -1)) for _ in range(hooked.TIE_OPS + 10))


def _find_in_child(env) -> str:
    code = ("from diag.tracer import hooked; s = hooked.find(); "
            "print(s.present, s._recording() if s.present else None)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_real_hook_is_found_and_says_it_records_nothing_before_its_first_call(built):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XPU_TIMER_", "LD_PRELOAD"))}
    env["PYTHONPATH"] = ROOT
    assert _find_in_child(env) == "False None"
    # Preloaded, as the launcher does: found; its core starts on the first
    # CUDA call, which a CPU process never makes, so the tracer records all.
    assert _find_in_child(dict(env, LD_PRELOAD=HOOK)) == "True 0"


def test_work_wait_stays_unwrapped_until_the_first_cpu_op():
    """Only a CPU op's wait() says it is done; an NCCL job's every wait() stays
    torch's own (the wrapper cost 5 us a call on an H100 host)."""
    code = """
import types
from torch.distributed.distributed_c10d import Work
from diag.tracer import completion
from diag.tracer.marks import MARK
ended = []
tracer = types.SimpleNamespace(enabled=True, finish=lambda rec, failed=False, t=None: ended.append(rec))
watch = completion.watcher(tracer)
rec = lambda seq: types.SimpleNamespace(seq=seq, comm_id=5, kind=1, t0=0)
watch.add(rec(1), [], on_cpu=False)
print(hasattr(Work.wait, MARK))
watch.add(rec(2), [], on_cpu=True)
print(hasattr(Work.wait, MARK))
watch.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"], out.stdout
