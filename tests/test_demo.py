"""`make demo`: what it prints of the stacks and how it is set up (issue 43)."""

from __future__ import annotations

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACED = os.path.join(ROOT, "tests", "viewer", "data", "cases", "traced4")   # real dumps of the demo's job


def load_demo():
    spec = importlib.util.spec_from_file_location("demo", os.path.join(ROOT, "examples", "demo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_innermost_frames_skip_the_tracers_wrappers():
    # Two of the four slots went to xpu_diag_traced and _call_traced.
    demo = load_demo()
    line = demo.innermost_python(os.path.join(TRACED, "rank00000-of-00004.py.json"))
    assert line == "all_reduce <- _exception_logger.<locals>.wrapper <- train <- <module>", line
    assert demo.innermost_python(os.path.join(TRACED, "rank00002-of-00004.py.json")) == \
        "load_next_batch <- train <- <module>"
