"""Lightning DDP, HF Trainer, FSDP2, pipelining, Megatron-Core's tensor
parallelism and DeepSpeed ZeRO-3 on 2 gloo ranks under the real launcher (issues 18 and 32;
docs/frameworks.md): a stall planted in the user's own code, and a
collective skipped, are named. Their healthy runs: test_frameworks_healthy.py."""

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.frameworks import jobs

# script -> where its rank 1 stalls (function@file), with --stall
STALLS = {
    "lightning_ddp": "on_train_batch_start@lightning_ddp.py",   # a Lightning Callback
    "hf_trainer": "collate@hf_trainer.py",                      # the Trainer's data collator
    "fsdp2": "load_batch@fsdp2.py",                             # the batch loader
    "pipeline": "forward@pipeline.py",                          # stage 1's forward
    "megatron_tp": "load_batch@megatron_tp.py",                 # tp rank 1's batch loader
    "deepspeed_zero3": "load_batch@deepspeed_zero3.py",         # the batch loader
}
# script -> (what rank 1 skips with --skip, running on into the next step;
# where the HANG line places it: only Megatron names its groups)
SKIPS = {
    "megatron_tp": ("all_gather_into_tensor 4 B (float32)", "rank 1 is tp 1"),   # the loss gather
    "deepspeed_zero3": ("all_reduce 4 B (float32, sum)", None),                 # the logged loss
}
pytestmark = pytest.mark.timeout(300)


# Stalled jobs run this many at a time: each mostly waits (the stall for the
# 8 s hang timeout, then the dumps); three keep 2 loaded cores busy.
AT_ONCE = 3


def _plant(plant: str, name: str, tmp, named):
    """One planted job (jobs.stalled), or the exception it raised;
    ``named()`` is called once, when its HANG line has come or it is over."""
    told = []

    def tell() -> None:
        if not told:
            told.append(True)
            named()
    try:
        if plant == "--stall":
            return jobs.stalled(name, tmp, named=tell)
        # the launcher's defaults (--hang-timeout 300 s): the divergence (or,
        # across groups, the deadlock) proves the hang, and it is named within
        # 10 s of the skip (issues 36 and 41)
        return jobs.stalled(name, tmp, plant=plant, hang_timeout_s=None, within_s=10.0, named=tell)
    except BaseException as e:   # handed to the test that judges this job
        return e
    finally:
        tell()


@pytest.fixture(scope="module")
def planted(request, tmp_path_factory):
    """``planted(plant, name)`` -> the Stalled run of framework ``name`` with
    ``plant`` (--stall or --skip). Every job the selected tests of this module
    judge is run here, several at a time, rather than one after another
    inside each test; each test still judges its own job, and a job's
    failure fails only its test."""
    plants = {test_stall_in_user_code_names_the_rank_and_the_function.__name__: "--stall",
              test_a_collective_skipped_on_one_rank_names_the_rank_that_skipped.__name__: "--skip",
              test_a_collective_skipped_on_a_logging_group_is_a_deadlock_named_with_its_rank.__name__: "--skip-cross"}
    wanted = sorted({(plants[item.originalname], item.callspec.params["name"]) for item in request.session.items
                     if item.module is request.module and item.originalname in plants})
    tmps = {key: tmp_path_factory.mktemp(key[1] + key[0].replace("-", "_")) for key in wanted}
    # The skips first, side by side and with nothing else starting: their
    # HANG must come within 10 s of the skip, which another job's start-up
    # (its imports are seconds of CPU) could crowd out on a loaded machine.
    # A job's slot is free once its HANG has come: its stacks' dumps and
    # stack-viewer overlap the next start-up, which takes longer.
    futures = {}
    with ThreadPoolExecutor(max(1, len(wanted))) as pool:
        for plant, width in (("--skip", len(SKIPS)), ("--skip-cross", len(SKIPS)), ("--stall", AT_ONCE)):
            slots = threading.Semaphore(width)
            for key in [key for key in wanted if key[0] == plant]:
                slots.acquire()
                futures[key] = pool.submit(_plant, *key, tmps[key], slots.release)
            for _ in range(width):   # every job of this plant has named its hang (or ended)
                slots.acquire()
    runs = {key: future.result() for key, future in futures.items()}

    def get(plant: str, name: str):
        run = runs[(plant, name)]
        if isinstance(run, BaseException):
            raise run
        return run
    return get


# The first of these tests to run waits for every planted job (the fixture).
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(STALLS))
def test_stall_in_user_code_names_the_rank_and_the_function(name, planted):
    jobs.assert_stall_named(planted("--stall", name), STALLS[name])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(SKIPS))
def test_a_collective_skipped_on_one_rank_names_the_rank_that_skipped(name, planted):
    skipped, place = SKIPS[name]
    run = planted("--skip", name)
    assert f"rank 1 skipped {skipped}" in run.hang, run.output[-4000:]
    assert "; rule diverged: " in run.hang, run.hang
    assert "ahead" not in run.hang and "cannot tell" not in run.hang, run.hang
    with open(os.path.join(run.event, "hang.json")) as f:
        doc = json.load(f)
    assert doc["culprits"] == [1], doc["verdict"]
    assert place is None or place in doc["verdict"], doc["verdict"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(SKIPS))
def test_a_collective_skipped_on_a_logging_group_is_a_deadlock_named_with_its_rank(name, planted):
    # rank 1 skips the loss all-reduce on "stats" and runs on into the framework's
    # own collectives (Megatron's row-parallel all-reduce, ZeRO-3's all-gathers)
    run = planted("--skip-cross", name)
    assert "; rule deadlock: " in run.hang, run.output[-4000:]
    assert "rank 1 broke the order of its earlier steps (ran " in run.hang, run.hang
    assert 'rank 1 never entered all_reduce (group "stats"' in run.hang, run.hang
    with open(os.path.join(run.event, "hang.json")) as f:
        doc = json.load(f)
    assert doc["culprits"] == [1], doc["verdict"]
