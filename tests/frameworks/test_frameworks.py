"""Lightning DDP, HF Trainer, FSDP2 and pipelining on 2 gloo ranks under the
real launcher (issue 18; docs/frameworks.md). Each framework's healthy run is
made once and judged three ways; its stall is planted in the user's own code."""

import pytest

from tests.frameworks import jobs

# script -> where its rank 1 stalls (function@file), with --stall
STALLS = {
    "lightning_ddp": "on_train_batch_start@lightning_ddp.py",   # a Lightning Callback
    "hf_trainer": "collate@hf_trainer.py",                      # the Trainer's data collator
    "fsdp2": "load_batch@fsdp2.py",                             # the batch loader
    "pipeline": "forward@pipeline.py",                          # stage 1's forward
}
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", params=list(STALLS))
def healthy(request, tmp_path_factory):
    return jobs.healthy(request.param, tmp_path_factory.mktemp(request.param))


@pytest.mark.alone
def test_final_parameters_are_bitwise_those_of_plain_torchrun(healthy):
    jobs.assert_bitwise(healthy)


@pytest.mark.alone
def test_healthy_job_raises_no_alarm(healthy):
    jobs.assert_no_alarm(healthy)


@pytest.mark.alone
def test_metrics_match_what_the_script_timed(healthy):
    jobs.assert_metrics(healthy)


@pytest.mark.parametrize("name", list(STALLS))
def test_stall_in_user_code_names_the_rank_and_the_function(name, tmp_path):
    jobs.assert_stall_named(jobs.stalled(name, tmp_path), STALLS[name])
