"""The framework jobs, run for real on 2 gloo ranks: without xpu-diag (the
reference: forkrun.py, or plain torchrun on CUDA), under xpu_timer_launch
healthy with /metrics scraped, and under xpu_timer_launch with a stall
planted in the user's code.

The scripts (``scripts/``, argv ``OUT_DIR [--stall] [--steps N] [--untimed]``) write per
rank the hash of their final parameters and the truth they timed themselves
(``scripts/fwlib.py``)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from diag.common.net import free_port
from tests.functional.launch import ROOT, Launch, children_matching
from tests.functional.test_launch import event_dirs
from tests.waiting import wait_for

SCRIPTS = Path(__file__).parent / "scripts"
WORLD = 2
# Healthy runs: short enough that an op that never ends is flagged while the
# job still runs (its steps take 3-6 s), long for anything these jobs do.
HEALTHY_HANG_TIMEOUT_S = 3.0
STALL_HANG_TIMEOUT_S = 8.0
PERF_WINDOW_S = 1.0
FAST_DUMPS = {"XPU_TIMER_DUMP_TOOLS": "py-spy"}   # gdb takes seconds per rank
QUIET = {"TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


def script(name: str) -> str:
    return str(SCRIPTS / f"{name}.py")


def results(out: Path, world: int = WORLD) -> list[dict]:
    """What each rank wrote (scripts/fwlib.py), by rank."""
    found = []
    for rank in range(world):
        with open(out / f"rank{rank}.json") as f:
            found.append(json.load(f))
    return found


def torchrun(name: str, out: Path, world: int = WORLD, args=()) -> subprocess.Popen:
    """The job under plain torchrun, as its user runs it without us (started, not waited for)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", **QUIET)
    for key in [k for k in env if k.startswith("XPU_TIMER_")]:
        del env[key]
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(world),
                             "--master-port", str(free_port()), script(name), str(out), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


# What each script imports at its top, imported once before the ranks fork
# (forkrun.py), and ("") torch._dynamo, which DDP's and fully_shard's
# constructors import. DeepSpeed's accelerator is chosen as it is imported,
# and the script asks for the CPU one before it imports it.
PRELOAD = {
    "": ("torch._dynamo",),
    "lightning_ddp": ("lightning", "lightning.pytorch.strategies",
                      "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"),
    "hf_trainer": ("transformers", "transformers.trainer", "transformers.models.gpt2.modeling_gpt2",
                   "torch.distributed.algorithms.ddp_comm_hooks.default_hooks"),
    "fsdp2": ("torch.distributed", "torch.distributed.device_mesh", "torch.distributed.fsdp"),
    "pipeline": ("torch.distributed", "torch.distributed.pipelining"),
    "megatron_tp": ("megatron.core.parallel_state", "megatron.core.tensor_parallel",
                    "megatron.core.model_parallel_config"),
    "deepspeed_zero3": ("deepspeed", "deepspeed.comm.torch", "torch.distributed"),
}
PRELOAD_ENV = {"deepspeed_zero3": {"DS_ACCELERATOR": "cpu"}}


class Scraper:
    """Reads /metrics every ``interval`` s on a thread; keeps (monotonic time, text)."""

    def __init__(self, url: str, interval: float = 0.2):
        self.url, self.interval = url, interval
        self.scrapes: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    text = resp.read().decode()
            except OSError:
                continue
            self.scrapes.append((time.monotonic(), text))

    def stop(self) -> list[tuple[float, str]]:
        self._stop.set()
        self._thread.join(5)
        return self.scrapes


@dataclasses.dataclass
class Healthy:
    code: int
    output: str
    hang_lines: list[str]
    events: list[str]
    results: list[dict]
    reference: list[dict]
    scrapes: list[tuple[float, str]]


EXIT_RACE = "terminate called without an active exception"   # gloo's abort at interpreter exit


def healthy(name: str, tmp: Path, world: int = WORLD, args=()) -> Healthy:
    """The job under the launcher (``launched``) and, beside it, its
    bitwise reference (``reference``). ``args``: the script's own extra
    arguments (``--cuda``)."""
    with ThreadPoolExecutor(1) as pool:
        without_us = pool.submit(reference, name, tmp, world, args)
        run = launched(name, tmp, world, args)
        return dataclasses.replace(run, reference=without_us.result())


def launched(name: str, tmp: Path, world: int = WORLD, args=(), stepped: threading.Event | None = None) -> Healthy:
    """The job under the launcher, with a short hang timeout and /metrics
    scraped while it runs; its ``reference`` left empty. ``stepped``: set
    once every rank has taken its last step (written its file), or the job
    has ended; what is left then is its exit."""
    port = free_port()
    launch = Launch(["--nproc-per-node", str(world), "--master-port", str(free_port()), "--rdzv-id", name,
                     "--timeline-path", str(tmp / "timeline"), "--hang-timeout", f"{HEALTHY_HANG_TIMEOUT_S}s",
                     "--metrics-port", str(port), "--metrics-addr", "127.0.0.1",
                     "--perf-window", f"{PERF_WINDOW_S}s", script(name), str(tmp / "launcher"), *args],
                    env=dict(FAST_DUMPS, **QUIET))
    scraper = Scraper(f"http://127.0.0.1:{port}/metrics")
    try:
        deadline = time.monotonic() + 240
        while stepped is not None and not stepped.is_set() and launch.proc.poll() is None:
            if all((tmp / "launcher" / f"rank{rank}.json").exists() for rank in range(world)):
                stepped.set()
            elif time.monotonic() > deadline:
                break
            time.sleep(0.1)
        code = launch.wait(max(1.0, deadline - time.monotonic()))
    finally:
        if stepped is not None:
            stepped.set()
        scrapes = scraper.stop()
        launch.kill()
    return Healthy(code=code, output=launch.output(), hang_lines=launch.matching(r"\b(HANG|SLOW|SILENT)\b"),
                   events=event_dirs(tmp / "timeline"),
                   results=results(tmp / "launcher", world) if code == 0 else [], reference=[], scrapes=scrapes)


REFERENCES_AT_ONCE = 2   # each mostly computes: CPU


def references(names: list[str], tmps: dict[str, Path], world: int = WORLD,
               args=()) -> dict[str, list[dict] | Exception]:
    """Per job, what the same ranks without xpu-diag write (``results``), or
    why they did not: each job's ranks as torchrun starts them for a user who
    runs it without us (same script, argv, world size and the environment
    torchrun gives its workers), forked from one process that has imported
    every framework once (forkrun.py), and unpaced (``--unpaced``: the pace's
    sleeps only shape the timing, which this run is not judged on).
    ``args``: the scripts' own extra arguments."""
    base = dict(os.environ, PYTHONWARNINGS="ignore", **QUIET)
    for key in [k for k in base if k.startswith("XPU_TIMER_")]:
        del base[key]
    base.setdefault("OMP_NUM_THREADS", "1")   # torchrun's, for more than one worker: read as torch loads
    todo = [dict(world=world, port=str(free_port()), env=dict(base, **PRELOAD_ENV.get(name, {})),
                 argv=[script(name), str(tmps[name] / "reference"), *args, "--unpaced"],
                 log=str(tmps[name] / "reference.log"))
            for name in names]
    jobs_file = tmps[names[0]] / "references.json"
    jobs_file.write_text(json.dumps(todo))
    preload = ",".join(dict.fromkeys(m for name in ("", *names) for m in PRELOAD.get(name, ())))
    env = dict(base, **{k: v for name in names for k, v in PRELOAD_ENV.get(name, {}).items()})
    proc = subprocess.Popen([sys.executable, "-m", "tests.frameworks.forkrun", str(REFERENCES_AT_ONCE),
                             preload, str(jobs_file)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        said, _ = proc.communicate(timeout=240)
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, f"forkrun.py: exit {proc.returncode}\n{said[-4000:]}"
    found = {}
    for name, code in zip(names, json.loads(said.strip().splitlines()[-1])):
        log = (tmps[name] / "reference.log").read_text(errors="replace")
        found[name] = (results(tmps[name] / "reference", world) if code == 0 else
                       AssertionError(f"the ranks without xpu-diag: exit {code}\n{log[-4000:]}"))
    return found


def reference(name: str, tmp: Path, world: int = WORLD, args=()) -> list[dict]:
    """What the same ranks without xpu-diag write (``references``); with
    ``--cuda``, under plain torchrun as it was paced (a fork of a process that
    has imported a framework may find CUDA initialised already)."""
    if "--cuda" not in args:
        found = references([name], {name: tmp}, world, args)[name]
        if isinstance(found, Exception):
            raise found
        return found
    for _ in range(2):
        proc = torchrun(name, tmp / "reference", world, args)
        try:
            said, _ = proc.communicate(timeout=240)
        finally:
            _kill_group(proc)
        # Plain torch, without us: gloo's thread and the interpreter's exit
        # raced after training finished (test_lightning_teardown.py). The
        # reference is only the baseline the launcher's run is compared to:
        # run it again.
        if not (proc.returncode != 0 and EXIT_RACE in said):
            break
    assert proc.returncode == 0, f"plain torchrun: exit {proc.returncode}\n{said[-4000:]}"
    return results(tmp / "reference", world)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc`` and, if it leads a session (forkrun.py), its ranks."""
    if proc.poll() is None:
        try:
            if os.getpgid(proc.pid) == proc.pid:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except OSError:
            pass
    proc.wait()


@dataclasses.dataclass
class Stalled:
    hang: str
    event: str
    viewer: subprocess.CompletedProcess
    summary: str              # stack-viewer's summary.txt
    output: str


def stalled(name: str, tmp: Path, plant: str = "--stall", hang_timeout_s: float | None = STALL_HANG_TIMEOUT_S,
            within_s: float | None = None, named=None) -> Stalled:
    """The job with --stall (or ``plant``: --skip, a collective skipped on
    rank 1, which says SKIP): the HANG line, the event directory once every
    rank's stacks are in, and stack-viewer's answer on it. ``hang_timeout_s``
    None: the launcher's default; ``within_s``: the HANG line must come this
    soon after the plant. ``named``: called once, when the HANG line has come
    (or the job is over without it); what is left then is the dumps."""
    told = []

    def tell() -> None:
        if named is not None and not told:
            told.append(True)
            named()

    timeout = ["--hang-timeout", f"{hang_timeout_s}s"] if hang_timeout_s is not None else []
    launch = Launch(["--nproc-per-node", str(WORLD), "--master-port", str(free_port()), "--rdzv-id", name,
                     "--timeline-path", str(tmp), *timeout, script(name), str(tmp / "out"), plant],
                    env=dict(FAST_DUMPS, **QUIET))
    try:
        stall = launch.wait_line(r"^STALL " if plant == "--stall" else r"^SKIP ", 180)
        assert stall is not None, launch.output()
        hang = launch.wait_line(r"HANG: ", (within_s or STALL_HANG_TIMEOUT_S) + 30)
        tell()
        assert hang is not None, launch.output()
        if within_s is not None:
            assert hang[0] - stall[0] <= within_s, (f"HANG {hang[0] - stall[0]:.1f} s after the plant, "
                                                    f"not within {within_s} s: {hang[1]}")
        said = launch.wait_line(r"^STACKS: ", 90)
        assert said is not None, launch.output()
        event = said[1].rsplit("stack-viewer --path ", 1)[1]
        assert [event] == wait_for(lambda: event_dirs(tmp), "hang.json"), launch.output()
        viewer = subprocess.run([os.path.join(os.path.dirname(sys.executable), "stack-viewer"), "--path", event,
                                 "--out", str(tmp / "viewer"), "--format", "text"],
                                capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="200"))
        summary = (tmp / "viewer" / "summary.txt").read_text() if viewer.returncode == 0 else ""
        return Stalled(hang=hang[1][hang[1].index("HANG: "):], event=event, viewer=viewer, summary=summary,
                       output=launch.output())
    finally:
        tell()
        _kill_workers(launch, name)
        launch.kill()


def _kill_workers(launch: Launch, name: str) -> None:
    """SIGKILL the workers: torchrun starts them in sessions of their own, and
    Lightning's SIGTERM handler lets a stalled rank sleep on."""
    for pid in children_matching(launch.proc.pid, script(name)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


# -- the metrics, against the truth the script timed -------------------------
@dataclasses.dataclass
class RankMetrics:
    at: float                 # monotonic time the scrape came back
    wait_ratio: float | None  # None: no collective in the window (the series is left out then)
    step_s: float
    steps_total: float
    calls_total: float        # collective and p2p calls since the rank started


def rank_metrics(scrape: tuple[float, str], rank: int, step_op: str = "optimizer.step") -> RankMetrics | None:
    at, text = scrape
    values: dict = {}
    calls = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("rank") != str(rank):
                continue
            if sample.name == "xpu_diag_op_calls_total":
                # The step and the garbage collector's time are host-function records, not calls.
                calls += sample.value if sample.labels["op"] not in (step_op, "gc") else 0.0
            else:
                values[sample.name] = sample.value
    # The window's gauges come once the rank has stepped twice; its wait ratio
    # only while the window holds a collective (one GPU's HF Trainer or FSDP2
    # at world size 1 makes one every few dozen steps).
    if any(name not in values for name in ("xpu_diag_steps_total", "xpu_diag_step_seconds")):
        return None
    return RankMetrics(at, values.get("xpu_diag_collective_wait_ratio"), values["xpu_diag_step_seconds"],
                       values["xpu_diag_steps_total"], calls)


@dataclasses.dataclass
class Truth:
    start: float
    end: float
    step_s: float
    calls_per_step: float
    wait_ratio: float


def truth(result: dict, warmup: int = 10) -> Truth:
    """What the script timed, over its steps after ``warmup``. The wait ratio is
    the share of wall time with a collective in flight: ops in flight at once
    (a pipeline stage's sends of two microbatches) count once."""
    steps = result["steps"]
    start, end = steps[warmup], steps[-1]
    comms = sorted((a, b) for a, b in result["comms"] if start <= a < end)
    assert all(b is not None for _, b in comms), "a collective the script could not time (no future)"
    busy, until = 0.0, start
    for a, b in comms:
        busy += max(0.0, min(b, end) - max(a, until))
        until = max(until, b)
    return Truth(start=start, end=end, step_s=(end - start) / (len(steps) - 1 - warmup),
                 calls_per_step=len(comms) / (len(steps) - 1 - warmup), wait_ratio=busy / (end - start))


# -- the checks every framework's tests make ---------------------------------
def assert_bitwise(run: Healthy) -> None:
    assert run.code == 0, run.output[-4000:]
    assert [r["sha256"] for r in run.results] == [r["sha256"] for r in run.reference], \
        "final parameters differ from those of the same ranks without xpu-diag"


def assert_no_alarm(run: Healthy) -> None:
    assert run.code == 0, run.output[-4000:]
    assert run.hang_lines == [] and run.events == [], run.output[-4000:]
    assert "terminate called" not in run.output and "switched off" not in run.output, run.output[-4000:]


# The agent publishes a snapshot about once a second: a scrape may be that old.
PUBLISH_LAG_S = 1.2


def assert_metrics(run: Healthy, tolerance: float = 0.25, wait: bool = True, calls: bool = True) -> None:
    """Per rank: collective calls per step (from the counters, between two
    scrapes inside the steady steps), step time and wait ratio (from the last
    scrape whose window lies inside them) against what the script timed.
    ``wait=False``, ``calls=False``: printed, not judged (on NCCL the script
    sees a collective's enqueue, the hook its device time, and DDP's C++
    reducer issues its all-reduces where the script cannot count them)."""
    assert run.code == 0, run.output[-4000:]
    for rank in range(len(run.results)):
        true = truth(run.results[rank])
        seen = [m for m in (rank_metrics(s, rank) for s in run.scrapes)
                if m is not None and (m.wait_ratio is not None or not wait)]
        counted = [m for m in seen if true.start + PUBLISH_LAG_S <= m.at <= true.end]
        windowed = [m for m in counted if true.start + PUBLISH_LAG_S + PERF_WINDOW_S <= m.at]
        assert len(counted) >= 2 and windowed, (rank, true, [m.at for m in seen])
        first, last = counted[0], counted[-1]
        assert last.steps_total - first.steps_total >= 10, (first, last)
        per_step = (last.calls_total - first.calls_total) / (last.steps_total - first.steps_total)
        got = windowed[-1]
        seen_wait = "-" if got.wait_ratio is None else f"{got.wait_ratio:.3f}"
        said = (f"rank {rank}: metrics {per_step:.2f} calls/step, step {got.step_s * 1e3:.1f} ms, wait "
                f"{seen_wait}; the script timed {true.calls_per_step:.2f}, "
                f"{true.step_s * 1e3:.1f} ms, {true.wait_ratio:.3f}")
        print(said)
        assert not calls or abs(per_step - true.calls_per_step) <= 0.1 * true.calls_per_step, said
        assert abs(got.step_s - true.step_s) <= tolerance * true.step_s, said
        assert not wait or abs(got.wait_ratio - true.wait_ratio) <= tolerance * true.wait_ratio, said


def assert_stall_named(run: Stalled, frame: str) -> None:
    """The HANG line blames rank 1, outside any collective; stack-viewer shows
    it stuck in ``frame`` (``function@file``, the user's own code) and names it
    the culprit."""
    assert "rank 1 not in any collective" in run.hang and run.hang.startswith("HANG: rank 0 in "), run.hang
    assert run.viewer.returncode == 0, run.viewer.stderr
    assert frame in run.viewer.stdout, run.viewer.stdout   # the table on the terminal
    assert re.search(rf"\brank 1\n\s+at  \S*{re.escape(frame)}:\d+ ", run.summary), run.summary
    assert "\n  culprits: rank 1\n" in run.summary, run.summary
