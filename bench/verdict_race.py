"""Issue 36 item 3: the same planted faults, three tools, how fast each one
says so and whether it names the right rank.

    python bench/verdict_race.py [--faults stall,skip,spin,link,killed] [--tools torchrun,nvrx,xpu]
                                 [--nproc 2] [--budget S] [--keep DIR] [--out FILE] [--cpu]

What it measures. One job (tests/gpu/scripts/verdict_race_train.py: a small
MLP, per step an all-reduce of its gradients and one of its loss, then
.item(), a step every 0.2 s) is started once per fault and tool, one after the
other. At step 20 rank 1 plants the fault and prints `PLANTED <fault> <rank>
<unix time>`:
- stall:  it sleeps in user code for good, the others wait in the all-reduce;
- skip:   it skips the loss all-reduce and runs on (the ranks diverge);
- spin:   it launches a GPU kernel that never ends (torch.cuda._sleep), no XID;
- link:   every TCP segment its sockets send on lo is dropped (iptables, the
          set-up of tests/gpu/test_link_gpu.py: NCCL forced onto the socket
          transport over lo, for all three tools);
- killed: it SIGKILLs itself.
For each tool the bench waits for its verdicts and prints, per source, the
seconds from PLANTED to that source's first verdict and the ranks it named.

The three ways:
- torchrun: plain `torch.distributed.run --standalone`, Flight Recorder on
  (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1,
  TORCH_FR_DUMP_TEMP_FILE=<dir>/nccl_trace_rank_) and the process group's
  timeout at 60 s (init_process_group(timeout=60 s)); FR's default is the
  NCCL timeout, 10 minutes: every hang below would take 600 s more. After the
  job ends, FR's own analyzer reads the dumps (`python -m
  torch.distributed.flight_recorder.fr_trace <dir> -p nccl_trace_rank_`,
  with --allow-incomplete-ranks where a rank left no dump; also `-j`).
  On --cpu (gloo) its rows say n/a: torch 2.13 records gloo collectives in
  Flight Recorder, but nothing dumps them (the dump on timeout is the NCCL
  watchdog's); bench/deadlock_race.py dumps them by hand and runs fr_trace.
- nvrx: NVIDIA's nvidia-resiliency-ext (0.7.0) `ft_launcher` with a config of
  null heartbeat timeouts; the script sends a heartbeat every step and calls
  calculate_and_set_hb_timeouts() at step 10, as NVRx's heartbeat guide and
  its DDP example do (the timeouts it chose are in the job's `NVRX ...
  hb_timeouts` lines: 5x the longest interval seen). Its rank monitors
  check every 5 s (workload_check_interval) and SIGKILL a silent rank.
- xpu: `xpu_timer_launch` with default options (verdicts from evidence:
  diverged/exited/frozen_link/gpu_fault at 5 s, blocked at 30 s,
  --hang-timeout 300 s; docs/collector.md, "Verdicts").

Columns of the table:
- fault, tool;
- by: the source of that verdict: `HANG <rule>` (the collector's line),
  `watchdog` (the NCCL watchdog's timeout), `root cause` (torchrun's
  "Root Cause (first observed failure)" block), `FAILED` (the launcher's
  closing verdict on a crash, culprits from failure.json), `FR dump` (the first Flight
  Recorder file written), `FR analyzer` (fr_trace's finding on the dumps; its
  time is the dump's), `heartbeat` (an NVRx rank monitor's "Did not get ...
  heartbeat"), `launcher` (torchrun's or ft_launcher's `failed (exitcode: N)
  local_rank: R`: the first rank whose process ended), `error` (the first
  exception a worker printed; it names the rank that printed it, a waiter
  more often than the culprit);
- after_s: seconds from PLANTED to that verdict (lines: when the bench read
  them; FR dump: the file's mtime); a `*` marks each run's first verdict;
- names: the ranks (or the link) the verdict names; right: `yes` when it names
  the planted rank alone (for link: a link of the planted rank), `partly` when
  the planted rank is among others, `no` when it names only others, `-` when
  it names no rank.
A run with no verdict within its limit says `none within N s`; one the
budget left out says `skipped (budget)`.

Reproduce (2 GPUs, through the device tool, carrying .whl and .carry):
`bash tests/gpu/session.sh x2race`, three calls (one of under 560 s does not
hold all 15 runs; the label's comment says which RACE_TOOLS / RACE_FAULTS).
.whl/nvrx holds nvidia_resiliency_ext-0.7.0-cp312-cp312-manylinux_2_39_x86_64
(0.7.0 has no manylinux2014 wheel) and defusedxml 0.7.1, the one dependency
of its fault-tolerance part the image lacks (`pip download --no-deps
--only-binary=:all: --python-version 3.12 --platform manylinux_2_39_x86_64
nvidia-resiliency-ext==0.7.0`); .carry/ipt-debs the iptables debs that
tests/gpu/scripts/carried_iptables.sh names. On a CPU machine: `python
bench/verdict_race.py --cpu` (gloo; stall, skip and killed rank; nvrx rows
where nvidia-resiliency-ext imports: docs/gpu-runs/cpu-dryrun-verdict-race.txt).
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench.launch_job import Launch, launcher  # noqa: E402
from diag.common.atomic import write_atomic  # noqa: E402

TRAIN = os.path.join(ROOT, "tests", "gpu", "scripts", "verdict_race_train.py")
FAULTS = ("stall", "skip", "spin", "link", "killed")
CPU_FAULTS = ("stall", "skip", "killed")
TOOLS = ("torchrun", "nvrx", "xpu")
PG_TIMEOUT_S = 60
FR_ENV = {"TORCH_NCCL_TRACE_BUFFER_SIZE": "2000", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
SOCKET_NCCL = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_IB_DISABLE": "1",
               "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "lo"}
NVRX_CFG = "fault_tolerance:\n  initial_rank_heartbeat_timeout: null\n  rank_heartbeat_timeout: null\n"
PLANTED = re.compile(r"PLANTED (\w+) (\d+) ([\d.]+)(?: ports=([\d,]+))?")
ROOT_CAUSE = "Root Cause (first observed failure):"


@dataclasses.dataclass(frozen=True)
class Config:
    faults: tuple[str, ...]
    tools: tuple[str, ...]
    nproc: int = 2
    rank: int = 1
    at: int = 20
    budget_s: float = 0.0          # 0: no budget
    keep: str = ""
    out: str = ""
    cpu: bool = False

    def __post_init__(self):
        allowed = CPU_FAULTS if self.cpu else FAULTS
        for f in self.faults:
            if f not in allowed:
                raise ValueError(f"--faults: {f!r} is not one of {','.join(allowed)}"
                                 + (" (--cpu: no GPU kernel or NCCL link)" if self.cpu else ""))
        for t in self.tools:
            if t not in TOOLS:
                raise ValueError(f"--tools: {t!r} is not one of {','.join(TOOLS)}")
        if self.nproc < 2 or not 0 <= self.rank < self.nproc:
            raise ValueError(f"--nproc {self.nproc} / --rank {self.rank}: need 2 or more ranks and 0 <= rank < nproc")


def parse_args(argv: list[str]) -> Config:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--faults", default="")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--rank", type=int, default=1, help="the rank the fault is planted on")
    ap.add_argument("--budget", type=float, default=0.0, help="seconds for all runs; runs that would not fit are skipped")
    ap.add_argument("--keep", default="", help="a folder for each run's output and FR's dumps and analysis")
    ap.add_argument("--out", default="", help="the rows as JSON")
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU: the orchestration's dry run")
    ns = ap.parse_args(argv)
    faults = ns.faults or ",".join(CPU_FAULTS if ns.cpu else FAULTS)
    return Config(faults=tuple(faults.split(",")), tools=tuple(ns.tools.split(",")), nproc=ns.nproc,
                  rank=ns.rank, budget_s=ns.budget, keep=ns.keep, out=ns.out, cpu=ns.cpu)


def limit_s(fault: str, tool: str) -> float:
    """How long after PLANTED a run may wait for its verdicts."""
    if fault == "killed":
        return 60
    if tool == "torchrun":
        return PG_TIMEOUT_S + 60
    if tool == "nvrx":
        return 90
    return 300 + 45 if fault == "spin" else 90   # spin: no evidence rule fits it, --hang-timeout does


def estimate_s(fault: str, tool: str) -> float:
    """What a run is expected to cost, start-up (torch, NCCL, 20 steps) and teardown included (--budget)."""
    start = 20
    if fault == "killed":
        return start + 15
    return start + {"torchrun": PG_TIMEOUT_S + 15, "nvrx": 20,
                    "xpu": 310 if fault == "spin" else (45 if fault == "stall" else 15)}[tool]


def command(cfg: Config, fault: str, tool: str, tmp: str) -> tuple[list[str], list[str], dict]:
    """(launcher, its args, env) for one run."""
    train = [TRAIN, "--fault", fault, "--rank", str(cfg.rank), "--at", str(cfg.at)] + (["--cpu"] if cfg.cpu else [])
    env = dict(SOCKET_NCCL) if fault == "link" else {}
    nproc = ["--nproc-per-node", str(cfg.nproc)]
    if tool == "torchrun":
        if not cfg.cpu:
            dumps = os.path.join(tmp, "fr", "nccl_trace_rank_")
            os.makedirs(os.path.dirname(dumps))
            env.update(FR_ENV, TORCH_FR_DUMP_TEMP_FILE=dumps, TORCH_NCCL_DEBUG_INFO_TEMP_FILE=dumps)
        return ([sys.executable, "-m", "torch.distributed.run"], ["--standalone", *nproc, *train,
                "--pg-timeout", str(PG_TIMEOUT_S)], env)
    if tool == "nvrx":
        cfg_path = os.path.join(tmp, "ft_cfg.yaml")
        with open(cfg_path, "w") as f:
            f.write(NVRX_CFG)
        exe = shutil.which("ft_launcher")
        cmd = [exe] if exe else [sys.executable, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher"]
        return cmd, [*nproc, "--ft-cfg-path", cfg_path, *train, "--nvrx"], env
    return launcher(), [*nproc, "--timeline-path", os.path.join(tmp, "tl"), *train], env


def _verdicts_in_lines(job: Launch, tool: str) -> list[dict]:
    """Each source's first verdict line: (when, by, names)."""
    found: dict[str, dict] = {}

    def note(by: str, when: float, names, line: str) -> None:
        if by not in found:
            found[by] = {"by": by, "when": when, "names": names, "line": line[:400]}
        elif by == "heartbeat" and when - found[by]["when"] < 6:   # the other monitors of the same check
            found[by]["names"] = sorted(set(found[by]["names"]) | set(names))
    lines = list(job.lines)
    for i, (when, _, line) in enumerate(lines):
        if ROOT_CAUSE in line:
            root = root_cause([text for _, _, text in lines[i:i + 12]])
            if root is not None:
                note("root cause", when, [root[0]], f"{ROOT_CAUSE} rank {root[0]}, {root[1]}")
        elif "xpu-diag: FAILED: " in line:
            note("FAILED", when, None, line[line.find("FAILED: "):])
        elif m := re.search(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)", line):
            note("launcher", when, [int(m.group(2))], line[m.start():])
        elif "Watchdog caught collective operation timeout" in line or "Watchdog timeout" in line:
            m = re.search(r"Rank (\d+)\]", line)
            note("watchdog", when, [int(m.group(1))] if m else [], line[line.find("Watchdog"):])
        elif "Did not get subsequent heartbeat" in line or "Did not get initial heartbeat" in line:
            m = re.search(r"workload:[^(]*\((\d+)\)", line)
            note("heartbeat", when, [int(m.group(1))] if m else [], line[line.find("Did not"):])
        elif line.startswith("HANG: ") or " HANG: " in line:
            rule = re.search(r"; rule (\w+): ", line)
            note("HANG " + (rule.group(1) if rule else "?"), when, None, line)
        elif m := re.search(r"^(?:\[rank(\d+)\]: )?[\w.]*(?:Error|Exception): |^terminate called after", line):
            note("error", when, [int(m.group(1))] if m.group(1) else [], line)   # the rank that raised it
    return list(found.values())


def root_cause(lines: list[str]) -> tuple[int, str] | None:
    """The global rank and the exit torchrun's "Root Cause (first observed
    failure)" block names (ChildFailedError.format_msg: `rank : 2 (local_rank:
    2)`, `exitcode : 1 (pid: ...)`, or `-6 (pid: ...)  (SIGABRT)`), from the
    block's lines; None where the block has no rank line."""
    rank, how = None, ""
    for line in lines[1:]:
        if line.lstrip().startswith("=") or ROOT_CAUSE in line:
            break
        if m := re.match(r"\s*rank\s*: (\d+) \(local_rank", line):
            rank = int(m.group(1))
        elif m := re.match(r"\s*exitcode\s*: (-?\d+) \(pid: \d+\)\s*(?:\((\w+)\))?", line):
            how = f"exitcode {m.group(1)}" + (f" ({m.group(2)})" if m.group(2) else "")
    return None if rank is None else (rank, how)


def _failure_names(tmp: str) -> list:
    """The culprits of the collector's failure.json (the FAILED verdict)."""
    docs = sorted(glob.glob(os.path.join(tmp, "tl", "*", "*", "failure.json")))
    if not docs:
        return []
    with open(docs[0]) as f:
        return list(json.load(f).get("culprits") or [])


def _hang_names(tmp: str) -> tuple[list, str]:
    """The culprits (and a named link) from the collector's hang.json."""
    docs = sorted(glob.glob(os.path.join(tmp, "tl", "*", "*", "hang.json")))
    if not docs:
        return [], "no hang.json"
    with open(docs[0]) as f:
        doc = json.load(f)
    links = [(l["src_rank"], l["dst_rank"]) for l in ((doc.get("link") or {}).get("links") or [])]
    if links:
        return sorted({r for l in links for r in l}), "link " + ", ".join(f"{a}->{b}" for a, b in links)
    return list(doc.get("culprits") or []), ""


def _fr_verdicts(tmp: str, keep: str, folder: str = "fr", prefix: str = "nccl_trace_rank_",
                 label: str = "", times: list[float] | None = None) -> list[dict]:
    """Flight Recorder: when its first dump was written, and what its own
    analyzer says of the dumps in tmp/folder (``label`` tells a second
    analysis apart; ``times``: the dumps' own mtimes, for copies of them)."""
    where = os.path.join(tmp, folder)
    dumps = sorted(glob.glob(os.path.join(where, prefix + "*")))
    if not dumps:
        return [{"by": "FR dump", "when": None, "names": None, "line": "no dump"}]
    times = times or [os.path.getmtime(d) for d in dumps]
    first, last = min(times), max(times)
    out = _fr_trace([where, "-p", prefix])
    if "Missing dump files" in out:
        out = _fr_trace([where, "-p", prefix, "--allow-incomplete-ranks"])
    if keep:
        tag = label.replace(" ", "_").replace(",", "")
        for name, text in ((f"fr_trace{tag}.txt", out), (f"fr_trace{tag}_j.txt",
                           _fr_trace([where, "-p", prefix, "-j", "--allow-incomplete-ranks"]))):
            with open(os.path.join(keep, name), "w") as f:
                f.write(text)
        if not label:
            for d in dumps:
                shutil.copy(d, keep)
    names = sorted({int(r) for s in re.findall(r"missing ranks: \{([\d, ]+)\}", out) for r in s.split(",")}
                   | {int(r) for r in re.findall(r"Culprit rank (\d+)", out)})
    finding = fr_unjoined(out) or next((l for l in out.splitlines() if re.search(
        r"missing ranks|Culprit rank|Not all ranks|mismatch|No errors found|cannot decide|^\w+Error: ", l)), out[-300:])
    analyzer = {"by": "FR analyzer" + label, "when": last, "names": names, "line": finding.strip()[:400]}
    if label:
        return [analyzer]
    return [{"by": "FR dump", "when": first, "names": None, "line": f"{len(dumps)} dump(s)"}, analyzer]


def fr_unjoined(out: str) -> str:
    """fr_trace's "Not all ranks joining collective" findings in one line:
    `group 0:default_pg seq 10 gloo:all_reduce missing ranks {1}; ...`."""
    found = re.findall(r"Not all ranks joining collective, sequence number: (\d+)\n(?:.*\n)*?group info: (\S+)\n"
                       r"collective: (\S+)\nmissing ranks: (\{[\d, ]*\})", out)
    return "; ".join(f"group {g} seq {n} {op} missing ranks {m}" for n, g, op, m in found)


def _fr_trace(args: list[str]) -> str:
    """FR's analyzer as torch ships it (the module; else its `torchfrtrace` script)."""
    text = ""
    for cmd in ([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"], [shutil.which("torchfrtrace")]):
        if cmd[0] is None:
            continue
        try:
            out = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            text += f"fr_trace failed: {e}\n"
            continue
        text += out.stdout + out.stderr
        if "No module named" not in out.stderr:
            break
    return text


def _wait(job: Launch, tool: str, t0: float, limit: float) -> None:
    """Until the tool has said what it says: torchrun's job ended (FR dumps
    written before its abort), an NVRx monitor's kill plus the next 5 s check,
    the collector's HANG and its hang.json."""
    deadline, settle = time.time() + limit, None
    while time.time() < deadline and job.proc.poll() is None:
        if settle is None and tool != "torchrun":
            seen = [v for v in _verdicts_in_lines(job, tool) if v["when"] >= t0 - 1
                    and (v["by"].startswith("HANG") or v["by"] in ("heartbeat", "launcher"))]
            if seen:
                settle = time.time() + (6 if tool == "nvrx" else 3)
        if settle is not None and time.time() >= settle:
            return
        time.sleep(0.5)
    if job.proc.poll() is not None:
        try:
            job.wait(5)   # its last lines
        except subprocess.TimeoutExpired:
            pass


def _iptables_works() -> bool:
    try:
        return subprocess.run(["iptables", "-L", "OUTPUT"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _unplant(ports: list[int]) -> None:
    for p in ports:
        subprocess.run(["iptables", "-D", "OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(p), "-j", "DROP"],
                       capture_output=True)


def run_one(cfg: Config, fault: str, tool: str, limit: float, start_limit: float = 150) -> dict:
    """One job, one fault, one tool: its verdicts, each timed from PLANTED
    (which must come within start_limit seconds, NCCL's start included)."""
    row = {"fault": fault, "tool": tool, "planted": None, "verdicts": [], "note": ""}
    if tool == "nvrx" and importlib.util.find_spec("nvidia_resiliency_ext") is None:
        row["note"] = "nvidia-resiliency-ext is not importable (session.sh x2race installs .whl/nvrx)"
        return row
    if fault == "link" and not _iptables_works():
        row["note"] = ("needs iptables with CAP_NET_ADMIN (session.sh x2race: tests/gpu/scripts/carried_iptables.sh "
                       "with .carry/ipt-debs carried)")
        return row
    tmp = tempfile.mkdtemp(prefix="verdict-race-")
    keep = os.path.join(cfg.keep, f"{fault}-{tool}") if cfg.keep else ""
    if keep:
        os.makedirs(keep, exist_ok=True)
    cmd, args, env = command(cfg, fault, tool, tmp)
    job, ports = Launch(args, env=env, command=cmd), []
    try:
        got = job.wait_line(r"PLANTED ", start_limit)
        if not got:
            row["note"] = "never planted: " + " | ".join(job.output().splitlines()[-5:])[-600:]
            return row
        m = PLANTED.search(got[1])
        t0, ports = float(m.group(3)), [int(p) for p in (m.group(4) or "").split(",") if p]
        row["planted"] = {"rank": int(m.group(2)), "time": t0}
        _wait(job, tool, t0, limit)
        _unplant(ports)   # before FR's analyzer runs: the dropped sockets are the job's, not the analyzer's
        row["verdicts"] = _collect(cfg, job, tool, tmp, keep, row["planted"])
        if not any(v["after_s"] is not None for v in row["verdicts"]):
            row["note"] = f"none within {limit:.0f} s"
        return row
    finally:
        job.kill()
        _unplant(ports)
        if keep:
            with open(os.path.join(keep, "job.log"), "w") as f:
                f.write(job.output())
            for doc in glob.glob(os.path.join(tmp, "tl", "*", "*", "hang.json")):
                shutil.copy(doc, keep)
        shutil.rmtree(tmp, ignore_errors=True)


def _collect(cfg: Config, job: Launch, tool: str, tmp: str, keep: str, planted: dict) -> list[dict]:
    """Every source's first verdict after PLANTED, timed and judged, earliest first."""
    t0 = planted["time"]
    verdicts = [v for v in _verdicts_in_lines(job, tool) if v["when"] >= t0 - 1]
    collect_names(verdicts, tmp)
    if tool == "torchrun":
        verdicts += _fr_verdicts(tmp, keep) if not cfg.cpu else \
            [{"by": "FR", "when": None, "names": None,
              "line": "n/a: gloo records into FR but nothing dumps it (bench/deadlock_race.py dumps it)"}]
    for v in verdicts:
        v["after_s"] = None if v["when"] is None else round(v["when"] - t0, 1)
        v["right"] = judge(v.get("names"), planted["rank"])
    return sorted(verdicts, key=lambda v: (v["after_s"] is None, v["after_s"] or 0))


def collect_names(verdicts: list[dict], tmp: str) -> None:
    """The collector's culprits into its verdicts: HANG's from hang.json, FAILED's from failure.json."""
    for v in verdicts:
        if v["by"].startswith("HANG"):
            v["names"], v["link"] = _hang_names(tmp)
        elif v["by"] == "FAILED":
            v["names"] = _failure_names(tmp)


def judge(names, planted: int) -> str:
    if not names:
        return "-"
    if set(names) == {planted}:
        return "yes"
    return "partly" if planted in names else "no"


def table(rows: list[dict]) -> str:
    fw = max([7] + [len(r["fault"]) for r in rows])
    bw = max([18] + [len(v["by"]) for r in rows for v in r["verdicts"]])
    out = [f"{'fault':{fw}} {'tool':9} {'by':{bw}} {'after_s':>8}  {'names':14} {'right':6} what it said"]
    for r in rows:
        if not r["verdicts"]:
            out.append(f"{r['fault']:{fw}} {r['tool']:9} {'-':{bw}} {'-':>8}  {'-':14} {'-':6} {r['note'][:150]}")
        for i, v in enumerate(r["verdicts"]):
            after = "-" if v["after_s"] is None else f"{v['after_s']:.1f}" + ("*" if i == 0 else " ")
            names = v.get("link") or ("-" if not v.get("names") else ",".join(map(str, v["names"])))
            out.append(f"{r['fault']:{fw}} {r['tool']:9} {v['by']:{bw}} {after:>8}  {names[:14]:14} {v['right']:6} "
                       f"{v['line'][:150]}")
    return "\n".join(out)


def _versions(cfg: Config) -> str:
    import torch
    try:
        from importlib.metadata import version
        nvrx = version("nvidia-resiliency-ext")
    except Exception:   # not installed: its rows say why
        nvrx = "not installed"
    gpus = "cpu (gloo)" if cfg.cpu else f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return f"torch {torch.__version__}, nvidia-resiliency-ext {nvrx}, {gpus}, {cfg.nproc} ranks"


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as e:
        print(f"verdict_race: {e}", file=sys.stderr)
        return 2
    # `timeout` in session.sh sends SIGTERM: the finally blocks still remove the iptables rules.
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(f"verdict race: {_versions(cfg)}; fault planted on rank {cfg.rank} at step {cfg.at}")
    print(f"torchrun: process-group timeout {PG_TIMEOUT_S} s (init_process_group(timeout=...)); "
          "Flight Recorder's dump waits for that timeout, whose default is 10 minutes (600 s): "
          "with the default every torchrun hang row below would come 540 s later")
    start, rows = time.monotonic(), []
    for fault in cfg.faults:
        for tool in cfg.tools:
            left = cfg.budget_s - (time.monotonic() - start) if cfg.budget_s else None
            if left is not None and estimate_s(fault, tool) > left:
                rows.append({"fault": fault, "tool": tool, "planted": None, "verdicts": [],
                             "note": f"skipped (budget: {left:.0f} s left, needs about {estimate_s(fault, tool):.0f})"})
            else:
                limit = limit_s(fault, tool) if left is None else min(limit_s(fault, tool), left - 20)
                start_limit = 150 if left is None else max(30.0, min(150.0, left - limit - 20))
                t = time.monotonic()
                rows.append(run_one(cfg, fault, tool, limit, start_limit))
                rows[-1]["run_s"] = round(time.monotonic() - t, 1)
            print(json.dumps(rows[-1]), flush=True)
    print()
    print(table(rows))
    print(f"\n(* each run's first verdict; after_s from the PLANTED line; {time.monotonic() - start:.0f} s in all)")
    if cfg.out:
        write_atomic(cfg.out, json.dumps(rows, indent=1).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
