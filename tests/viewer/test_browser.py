"""The flame SVG in headless Debian chromium: hover, click-to-zoom, search, screenshot."""

import subprocess
import sys

import pytest

from tests.viewer.browser import chromium, drive

pytestmark = pytest.mark.skipif(chromium() is None, reason="chromium not installed (make system-deps)")


@pytest.fixture(scope="module")
def svgs(gloo_timeline, tmp_path_factory):
    out = tmp_path_factory.mktemp("svg")
    subprocess.run([sys.executable, "-m", "viewer", "--path", str(gloo_timeline), "--out", str(out),
                    "--format", "svg"], check=True, capture_output=True, timeout=120)
    return out


def test_click_zooms_and_search_highlights(svgs, tmp_path):
    seen, shot = drive(svgs / "py_stack.svg", "stall_before_all_reduce", "all_reduce", tmp_path)
    assert "error" not in seen, seen
    assert seen["hit"].startswith("stall_before_all_reduce@stalled_gloo.py:9@2|0-1,3")
    assert seen["details"].endswith("(1 of 4 ranks (25.0%), python)")
    assert seen["zoomed"] is True
    assert seen["width_before"] < 400 and seen["width_after"] == 1180  # one rank of four -> full width
    assert seen["visible_after"] < seen["visible_before"]  # the other ranks' frames are hidden
    assert seen["matches"] == seen["highlighted"] == 2  # all_reduce, stall_before_all_reduce
    assert seen["matched_text"] == "Matched: 2 frames, 100.0% of rank-threads"
    assert seen["odd_link"] == "▶ rank 2 (MainThread) stuck in stall_before_all_reduce@stalled_gloo.py:9"
    assert seen["unzoomed"] is True and seen["odd_zoomed"] is True  # the header link zooms to rank 2
    assert shot.stat().st_size > 10_000  # a real picture; reviewed by eye in docs/viewer.md


def test_native_view_zoom(svgs, tmp_path):
    seen, _ = drive(svgs / "cpp_stack.svg", "clock_nanosleep", "no-such-frame", tmp_path)
    assert "error" not in seen, seen
    assert seen["zoomed"] is True and seen["width_after"] == 1180
    assert "@2|0-1,3" in seen["hit"]  # only the stalled rank sleeps
    assert seen["matches"] == 0 and seen["matched_text"] == "no match"
