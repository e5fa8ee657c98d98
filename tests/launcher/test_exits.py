"""diag/launcher/exits.py: torchrun's result turned into each rank's RankExit, and the cgroup's OOM count."""

from __future__ import annotations

import types

from diag.launcher import exits


def failure(pid, code, message="", error_file="<N/A>"):
    return types.SimpleNamespace(pid=pid, exitcode=code, message=message, error_file=error_file)


def test_rank_exits_from_torchruns_result():
    outcome = {"failures": {0: failure(10, 1, {"message": "ValueError: x", "extraInfo": {}}, "/e/0/error.json"),
                            2: failure(12, -9, "Signal 9 (SIGKILL) received by PID 12")}, "root": 0}
    got = exits.rank_exits(outcome, {0: 10, 1: 11, 2: 12}, oom_before=3, oom_after=4)
    assert got[0] == (10, exits.pb.RankExit(exit_code=1, error="ValueError: x", torchrun_root=True))
    assert got[1] == (11, exits.pb.RankExit(exit_code=0))   # not among torchrun's failures: exited 0
    assert got[2] == (12, exits.pb.RankExit(signal=9, oom_kill=True))   # made-up messages are not the worker's


def test_a_stopped_launcher_marks_every_rank_stopped():
    got = exits.rank_exits({"signal": 2}, {0: 10, 1: 11}, None, None)
    assert all(e.stopped and e.signal == 2 for _, e in got.values())


def test_oom_kills_reads_cgroup_v2_memory_events(tmp_path):
    (tmp_path / "cg").write_text("0::/job.slice/x\n")
    d = tmp_path / "root" / "job.slice" / "x"
    d.mkdir(parents=True)
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 2\noom_kill 1\n")
    assert exits.oom_kills(str(tmp_path / "cg"), str(tmp_path / "root")) == 1
    (tmp_path / "v1").write_text("12:memory:/x\n")
    assert exits.oom_kills(str(tmp_path / "v1"), str(tmp_path / "root")) is None
