"""diag/launcher/watched.py: the closing summary's line on ranks never watched."""

from diag.launcher import watched

SHM = "/dev/shm/xpu_diag-job-n0-abc"


def test_every_rank_watched_or_an_unknown_count_says_nothing():
    assert watched.unwatched_line(4, {0, 1, 2, 3}, SHM, 0, True, 0, env={}) == ""
    assert watched.unwatched_line(None, set(), SHM, 0, True, 0, env={}) == ""


def test_each_reason_names_the_ranks():
    full = watched.unwatched_line(4, {1}, SHM, 64 << 10, True, 0, env={})
    assert full.startswith("ranks 0,2-3 were not watched, so no hang of theirs could be seen: no room for "
                           "their progress rings in /dev/shm (64 KiB free, 516 KiB each; "), full
    off = watched.unwatched_line(2, {0}, SHM, 1 << 30, False, 3, env={"XPU_TIMER_TRACER_DISABLE": "1"})
    assert off == ("local rank 1 of node 3 was not watched, so no hang of theirs could be seen: "
                   "XPU_TIMER_TRACER_DISABLE is set, so no tracer recorded their ops"), off
    other = watched.unwatched_line(1, set(), SHM, 1 << 30, True, 0, env={})
    assert other.endswith("no progress record of theirs reached xpu-diag (each worker's 'tracer ... switched off' "
                          "line says why)"), other


def test_torchruns_own_reading_of_nproc_per_node():
    assert watched.local_world_size(["--nproc-per-node", "3", "train.py"]) == 3
    assert watched.local_world_size(["--nproc-per-node", "many", "train.py"]) is None
