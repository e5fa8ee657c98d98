"""summary.txt: the user's own frame beside the raw one; hang.json read, not recomputed."""

import json

from viewer.api import PYTHON, Frame
from viewer.kinds import is_ours, user_frame
from viewer.outputs.summary import Context, Summary
from viewer.parsers import pyspy_json

from tests.viewer.goldens import CASES, outputs

LIB = "/usr/lib/python3.11"
SITE = "/venv/lib/python3.11/site-packages"


def py(func, path, short, line):
    return {"name": func, "filename": path, "short_filename": short, "line": line}


# py-spy JSON frames are innermost first.
DUMP = [{"pid": 7, "thread_id": 1, "thread_name": "MainThread", "os_thread_id": 7, "active": True,
         "owns_gil": False, "frames": [
             py("wait", f"{LIB}/threading.py", "threading.py", 327),
             py("synchronize", f"{SITE}/torch/cuda/__init__.py", "torch/cuda/__init__.py", 985),
             py("forward", f"{SITE}/transformers/model.py", "transformers/model.py", 40),
             py("all_reduce", f"{SITE}/torch/distributed/c10d_logger.py", "torch/distributed/c10d_logger.py", 81),
             py("xpu_diag_traced", "/opt/diag/tracer/collectives.py", "diag/tracer/collectives.py", 196),
             py("train_step", "/home/me/proj/train.py", "train.py", 31),
             py("<module>", "/home/me/proj/train.py", "train.py", 50)]}]


def test_the_tracer_frame_is_hidden_and_the_user_frame_is_the_innermost_outside_libraries():
    res = pyspy_json.parse(json.dumps(DUMP))
    frames = res.threads[0].frames
    assert "xpu_diag_traced" not in [f.func for f in frames]
    assert [f.lib for f in frames] == [False, False, True, True, True, True]   # root first
    assert user_frame(frames).label == "train_step@train.py:31"


def test_summary_shows_raw_and_user_frames_and_takes_the_verdict_from_hang_json():
    frames = pyspy_json.parse(json.dumps(DUMP)).threads[0].frames
    other = (Frame("<module>", "train.py", 50, PYTHON), Frame("load", "train.py", 9, PYTHON))
    hang = {"world_size": 4, "verdict": "HANG: ...", "culprits": [], "never_entered": [],
            "ranks": [{"rank": r, "op": "all_reduce", "comm_id": 0, "seq": 5 if r else 3}
                      for r in range(4)]}
    summary = Summary(Context("ev", 4, "Python", hang))
    summary.add_stack("MainThread", frames, 0b0111)
    summary.add_stack("MainThread", other, 0b1000)
    rows = summary.rows()
    assert rows[0][3:5] == ("wait@threading.py:327", "train_step@train.py:31")
    assert rows[1][3:5] == ("load@train.py:9", "load@train.py:9")
    text = summary.render()
    assert "       in  train_step@train.py:31   (your code)" in text
    # Rank 0 is at an older seq, but the collector named no one: neither does the viewer.
    assert "  culprits: none named" in text
    assert "NEVER ENTERED" not in text and "BEHIND" not in text
    assert "mismatch" not in text


def test_the_first_frame_outside_torch_and_xpu_diag_is_the_users():
    # Real dumps of `make demo`'s traced job: between train() and torch's
    # all_reduce sit the tracer's frames (xpu_diag_traced, and _call_traced in
    # the tracer of before issue 43), which summary.txt called "your code".
    summary = outputs(CASES / "traced4")["summary.txt"]
    assert "       in  train@train_stall.py:48   (your code)\n" in summary
    assert "diag/tracer" not in summary


def test_xpu_diag_files_are_ours_wherever_they_were_installed():
    assert is_ours("/work/main/diag/tracer/collectives.py", "diag/tracer/collectives.py")
    assert is_ours("/venv/lib/python3.11/site-packages/diag/tracer/core.py", "diag/tracer/core.py")
    assert not is_ours("/home/me/diag/train.py", "diag/train.py")     # a user's own "diag" folder
    assert not is_ours("/home/me/mydiag/tracer/core.py", "mydiag/tracer/core.py")
