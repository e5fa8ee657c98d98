"""The healthy runs of Lightning DDP, HF Trainer, FSDP2, pipelining,
Megatron-Core's tensor parallelism and DeepSpeed ZeRO-3 on 2 gloo ranks
under the real launcher (issues 18 and 32; docs/frameworks.md): each made
once and judged three ways.

Quiet (make test runs them last, with nothing beside them), in a file of
their own which that phase collects alone: beside other tests the /metrics
they judge drift past its tolerance (a wait ratio of 0.57 where the script
timed 0.45), and given the CPU first their two jobs at a time starve the
tests beside them (docs/bench-runs/s26-make-test.txt, s27-make-test.txt)."""

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.frameworks import jobs

pytestmark = pytest.mark.timeout(300)


# The healthy jobs, in the order they run.
HEALTHY_ORDER = ("deepspeed_zero3", "hf_trainer", "lightning_ddp", "megatron_tp", "fsdp2", "pipeline")


def _caught(job, *args, **kwargs):
    """``job(*args, **kwargs)``, or the exception it raised."""
    try:
        return job(*args, **kwargs)
    except BaseException as e:   # handed to the tests that judge this job
        return e


@pytest.fixture(scope="module")
def healthy(request, tmp_path_factory):
    """``healthy(name)`` -> the Healthy run of framework ``name``, with its
    reference if ``with_reference``. Every job the selected tests of this
    module judge is run here. Under the launcher, each starts once the one before has taken its
    last step: that one's exit (1-4 s: the ranks' teardown, the launcher's
    report) overlaps this one's start-up, and no job's steps, whose /metrics
    are judged, share the machine with another's start-up. The references
    (the same ranks without xpu-diag) run after the last one's steps, for the
    same reason. Each test judges its own job, and a job's failure fails
    only its tests."""
    judges = {test_final_parameters_are_bitwise_those_of_the_job_without_xpu_diag.__name__,
              test_healthy_job_raises_no_alarm.__name__, test_metrics_match_what_the_script_timed.__name__}
    wanted = {item.callspec.params["name"] for item in request.session.items
              if item.module is request.module and item.originalname in judges}
    names = [name for name in HEALTHY_ORDER if name in wanted]
    tmps = {name: tmp_path_factory.mktemp(name) for name in names}
    with ThreadPoolExecutor(2) as pool:
        launched = {}
        for name in names:
            stepped = threading.Event()
            launched[name] = pool.submit(_caught, jobs.launched, name, tmps[name], stepped=stepped)
            stepped.wait()
        references = _caught(jobs.references, names, tmps) if names else {}
        runs = {name: future.result() for name, future in launched.items()}

    def get(name: str, with_reference: bool = False):
        run = runs[name]
        reference = (references if isinstance(references, BaseException) else references[name]) \
            if with_reference else []
        for found in (run, reference):
            if isinstance(found, BaseException):
                raise found
        return dataclasses.replace(run, reference=reference) if with_reference else run
    return get


# The first of these tests to run waits for every healthy job (the fixture).
@pytest.mark.quiet
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", HEALTHY_ORDER)
def test_final_parameters_are_bitwise_those_of_the_job_without_xpu_diag(name, healthy):
    jobs.assert_bitwise(healthy(name, with_reference=True))


@pytest.mark.quiet
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", HEALTHY_ORDER)
def test_healthy_job_raises_no_alarm(name, healthy):
    jobs.assert_no_alarm(healthy(name))


@pytest.mark.quiet
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", HEALTHY_ORDER)
def test_metrics_match_what_the_script_timed(name, healthy):
    jobs.assert_metrics(healthy(name))
