"""Lightning Trainer(strategy="ddp") on 2 gloo ranks under the real launcher (issue 18)."""

import pytest

from tests.frameworks import jobs

NAME = "lightning_ddp"
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return jobs.healthy(NAME, tmp_path_factory.mktemp(NAME))


@pytest.mark.alone
def test_final_parameters_are_bitwise_those_of_plain_torchrun(healthy):
    jobs.assert_bitwise(healthy)


@pytest.mark.alone
def test_healthy_job_raises_no_alarm(healthy):
    jobs.assert_no_alarm(healthy)


@pytest.mark.alone
def test_metrics_match_what_the_script_timed(healthy):
    jobs.assert_metrics(healthy)


def test_stall_in_a_callback_names_the_rank_and_the_callback(tmp_path):
    jobs.assert_stall_named(jobs.stalled(NAME, tmp_path), "on_train_batch_start@lightning_ddp.py")
