"""The collector's access file: what xpu-diag top/timeline read to reach a job."""

import os
import stat

import pytest

from diag.common import collector_access as access


def test_written_owner_only_and_read_back(tmp_path):
    path = access.write(str(tmp_path), "job.1", "127.0.0.1:4242", "s3cret")
    assert path == str(tmp_path / "job.1" / "collector.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert access.resolve(None, str(tmp_path / "job.1"), env={}) == ("127.0.0.1:4242", "s3cret")
    assert access.resolve(None, path, env={}) == ("127.0.0.1:4242", "s3cret")


def test_collector_flag_takes_the_token_from_the_environment():
    env = {"XPU_TIMER_JOB_TOKEN": "t"}
    assert access.resolve("10.0.0.1:5000", None, env=env) == ("10.0.0.1:5000", "t")
    with pytest.raises(access.AccessError, match="XPU_TIMER_JOB_TOKEN"):
        access.resolve("10.0.0.1:5000", None, env={})


@pytest.mark.parametrize("body, match", [(None, "no collector.json"), ("{nope", "not a collector access file")])
def test_bad_job_dir_is_one_line(tmp_path, body, match):
    if body is not None:
        (tmp_path / "collector.json").write_text(body)
    with pytest.raises(access.AccessError, match=match) as info:
        access.resolve(None, str(tmp_path), env={})
    assert "\n" not in str(info.value)


def test_nothing_given_names_both_ways():
    with pytest.raises(access.AccessError, match="--job .* --collector"):
        access.resolve(None, None, env={})


def test_a_finished_job_says_to_run_while_it_runs_and_where_its_saved_timeline_is(tmp_path):
    job = tmp_path / "job1"
    for event in ("20261127T100000Z", "20261127T110000Z"):
        (job / event).mkdir(parents=True)
        (job / event / "timeline.json").write_text("{}")
    with pytest.raises(access.AccessError) as info:
        access.resolve(None, str(job), env={})
    line = str(info.value)
    assert "\n" not in line and "run this while the job runs" in line
    assert f"the timeline saved at its last event is {job / '20261127T110000Z' / 'timeline.json'}" in line
    with pytest.raises(access.AccessError, match="no such directory; pass <timeline-path>/<job-id>"):
        access.resolve(None, str(tmp_path / "nope"), env={})
