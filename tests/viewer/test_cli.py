"""parse_args is pure and validated; event selection; partial formats; dot missing."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from viewer.cli import parse_args

CASES = Path(__file__).parent / "data" / "cases"


def test_parse_args_defaults():
    cfg = parse_args(["--path", "/t"])
    assert cfg.path == Path("/t") and cfg.event == "latest" and cfg.out is None
    assert cfg.formats == {"svg", "html", "folded", "dot", "text"}


def test_parse_args_formats_and_event():
    cfg = parse_args(["--path", "/t", "--format", "svg, folded", "--event", "job/20261122T120000Z"])
    assert cfg.formats == {"svg", "folded"} and cfg.event == "job/20261122T120000Z"


@pytest.mark.parametrize("argv, needle", [
    (["--path", "/t", "--format", "svg,png"], "--format png"),
    (["--path", "/t", "--format", ""], "--format (empty)"),
    (["--path", "/t", "--event", "../etc"], "--event '../etc'"),
    ([], "--path"),
])
def test_parse_args_rejects(argv, needle, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err
    assert err.count("\n") == 1 and err.startswith("stack-viewer: ") and "usage:" not in err


def viewer(*args, env=None):
    return subprocess.run([sys.executable, "-m", "viewer", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def make_timeline(root: Path) -> None:
    """Two jobs; the newest event (by hang.json's declared time) is plain/..."""
    for job, event, case, when in (("a", "20261122T100000Z", "gloo4", 100.0),
                                   ("b", "20261122T090000Z", "plain", 200.0)):
        dest = root / job / event
        shutil.copytree(CASES / case, dest)
        hang = json.loads((dest / "hang.json").read_text()) if (dest / "hang.json").exists() else {}
        hang["declared_unix"] = when
        (dest / "hang.json").write_text(json.dumps(hang))


def test_timeline_root_uses_latest_and_lists_others(tmp_path):
    make_timeline(tmp_path / "tl")
    proc = viewer("--path", tmp_path / "tl", "--out", tmp_path / "out", "--format", "text")
    assert proc.returncode == 0, proc.stderr
    assert "load_batch@data.py:12" in (tmp_path / "out" / "summary.txt").read_text()
    assert "other events: 20261122T100000Z" in proc.stderr


def test_event_by_name(tmp_path):
    make_timeline(tmp_path / "tl")
    proc = viewer("--path", tmp_path / "tl", "--event", "20261122T100000Z", "--out", tmp_path / "out",
                  "--format", "text")
    assert proc.returncode == 0, proc.stderr
    assert "stall_before_all_reduce" in (tmp_path / "out" / "summary.txt").read_text()
    proc = viewer("--path", tmp_path / "tl", "--event", "nope")
    assert proc.returncode == 1 and "--event nope: no such event" in proc.stderr


def test_event_dir_as_path_with_its_own_name_as_event(tmp_path):
    """--path is the event directory and --event names it: that event, not 'no stack dumps'."""
    make_timeline(tmp_path / "tl")
    event_dir = tmp_path / "tl" / "a" / "20261122T100000Z"
    for name in ("20261122T100000Z", "a/20261122T100000Z"):
        proc = viewer("--path", event_dir, "--event", name, "--out", tmp_path / "out", "--format", "text")
        assert proc.returncode == 0, proc.stderr
        assert "stall_before_all_reduce" in (tmp_path / "out" / "summary.txt").read_text()
    proc = viewer("--path", event_dir, "--event", "20261122T090000Z", "--out", tmp_path / "other")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"stack-viewer: --event 20261122T090000Z: --path {event_dir} is itself the event directory "
        "20261122T100000Z; drop --event, or give the timeline root as --path"]
    assert not (tmp_path / "other").exists()   # no error pictures for a wrong --event


def test_only_requested_formats_are_written(tmp_path):
    proc = viewer("--path", CASES / "plain", "--out", tmp_path, "--format", "folded")
    assert proc.returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["py_stack.folded"]


def test_without_graphviz_it_writes_dot_and_says_how(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    proc = viewer("--path", CASES / "gloo4", "--out", tmp_path / "out", "--format", "dot",
                  env={"PATH": str(empty_bin)})
    assert proc.returncode == 0, proc.stderr
    assert "graphviz not installed: render with `dot -Tsvg" in proc.stderr
    assert (tmp_path / "out" / "stacks.dot").exists() and not (tmp_path / "out" / "stacks.svg").exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="graphviz not installed (make system-deps)")
def test_dot_is_rendered_and_shows_the_fork(tmp_path):
    proc = viewer("--path", CASES / "gloo4", "--out", tmp_path, "--format", "dot")
    assert proc.returncode == 0, proc.stderr
    dot = (tmp_path / "stacks.dot").read_text()
    assert "ranks 0-1,3 (3)" in dot and "ranks 2 (1)" in dot and '"#f4a6a0"' in dot
    assert (tmp_path / "stacks.svg").read_text().lstrip().startswith("<?xml")


def test_rerun_on_the_event_dir_ignores_its_own_summary(tmp_path):
    """The default --out is the event dir; a second run must not read summary.txt as a dump."""
    event = tmp_path / "event"
    shutil.copytree(CASES / "gloo4", event)
    first = viewer("--path", event, "--format", "text,folded")
    assert first.returncode == 0, first.stderr
    assert (event / "summary.txt").exists()
    summary = (event / "summary.txt").read_text()
    again = viewer("--path", event, "--format", "text,folded")
    assert again.returncode == 0, again.stderr
    assert "summary.txt" not in again.stderr and "no rank numbers" not in again.stderr, again.stderr
    assert (event / "summary.txt").read_text() == summary


def test_no_temp_files_left_behind(tmp_path):
    proc = viewer("--path", CASES / "gloo4", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_ranks_from_dump_pids_when_names_carry_none(tmp_path):
    """Names without numbers: each dump's pid is looked up in hang.json's ranks."""
    pids, names = {}, ["alpha", "bravo", "charlie", "delta"]
    for rank, name in zip(range(4), names[::-1]):  # names in reverse rank order
        text = (CASES / "gloo4" / f"rank{rank:05d}-of-00004.py.json").read_text()
        pid = json.loads(text)[0]["pid"]
        pids[rank] = pid
        (tmp_path / f"{name}.json").write_text(text)
    if len(set(pids.values())) < 4:
        pytest.skip("the recorded dumps share a pid")
    hang = {"version": 1, "world_size": 4, "ranks": [{"rank": r, "pid": p} for r, p in pids.items()]}
    (tmp_path / "hang.json").write_text(json.dumps(hang))
    proc = viewer("--path", tmp_path, "--out", tmp_path / "out", "--format", "text")
    assert proc.returncode == 0, proc.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert "rank 2: stall_before_all_reduce@stalled_gloo.py:9" in summary
    assert "sorted file names" not in summary


def test_viewer_imports_neither_torch_nor_grpc(tmp_path):
    """It runs on a laptop: a full run must not pull torch or grpc in."""
    code = ("import sys; from viewer.cli import main; rc = main(['--path', sys.argv[1], '--out', sys.argv[2]]); "
            "bad = [m for m in ('torch', 'grpc') if m in sys.modules]; print('LOADED', bad); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, str(CASES / "gloo4"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout


def test_version_needs_no_path(capsys):
    from diag import __version__
    with pytest.raises(SystemExit) as info:
        parse_args(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"stack-viewer (xpu-diag) {__version__}\n"


def test_stacks_svg_comes_from_the_graphviz_package_not_a_hand_run_dot(tmp_path):
    # With the package hidden (and `dot` still on PATH) there is no stacks.svg: the
    # viewer renders through the package, and says how to render by hand.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\nclass NoGraphviz:\n    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'graphviz':\n"
        "            raise ModuleNotFoundError('No module named graphviz', name=name)\n"
        "sys.meta_path.insert(0, NoGraphviz())\n")
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{Path(__file__).parents[2]}"}
    proc = viewer("--path", CASES / "gloo4", "--out", tmp_path / "out", "--format", "dot", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "the graphviz Python package is missing: render with `dot -Tsvg" in proc.stderr
    assert not (tmp_path / "out" / "stacks.svg").exists()
