"""The NCCL profiler plugin with real NCCL (docs/link.md).

One GPU (H100/H200 x1, NCCL 2.28):
    python3 -m pytest -q -s tests/gpu/test_link_gpu.py -k one_gpu
- real NCCL loads our plugin from the NCCL_PROFILER_PLUGIN the launcher sets (--link-plugin)
  (NCCL_DEBUG=INFO says so), calls its init for the communicator, and a GPT-2
  small DDP run with it completes with no HANG; what reached the table is
  printed (a 1-rank communicator has no proxy peers: few or no step events).
  The step-time cost is bench/link_step_pairs.py's figure, not asserted here.

Two GPUs (the issue's acceptance run; skipped with the reason on fewer):
    python3 -m pytest -q -s tests/gpu/test_link_gpu.py -k two_gpus
- NCCL forced onto sockets over loopback (NCCL_P2P_DISABLE=1
  NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo),
  GPT-2 small in DDP; after 20
  steps every TCP segment rank 1's NCCL sockets send is dropped (iptables on
  lo, by the sockets' local ports from /proc), as a NIC that stops sending:
  the HANG line names a link between ranks 0 and 1, in whichever direction
  the counters show stopping first (rank 0's data stalls too, for want of
  ACKs: on two H100s that one was named), hang.json carries it and
  faults.json lists the node. Needs iptables and CAP_NET_ADMIN
  (tests/gpu/scripts/carried_iptables.sh puts a carried iptables on PATH
  where the image has none); the rules are removed afterwards.
"""

import dataclasses
import glob
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

from tests.gpu.conftest import ROOT, SCRIPTS, launch
from tests.gpu.scripts.sockets import established_ports

SCRIPT = os.path.join(SCRIPTS, "link_ddp.py")
PLUGIN = os.path.join(ROOT, "diag", "lib", "libxpu_nccl_profiler.so")


def test_one_gpu_real_nccl_loads_the_plugin(hook_built, tmp_path):
    out = launch(["--link-plugin", "--nproc-per-node", "1", "--hang-timeout", "120s", "--timeline-path", str(tmp_path / "tl"),
                  SCRIPT, str(tmp_path), "20"], timeout=600,
                 env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"})
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-4000:]
    loaded = [l for l in text.splitlines() if "xpu_timer_link" in l or "NCCL_PROFILER_PLUGIN" in l]
    print("\n".join(loaded))
    assert any("Loaded xpu_timer_link" in l for l in loaded), text[-4000:]
    assert "HANG:" not in text and "NCCL profiler plugin: switched off" not in text
    with open(tmp_path / "link_rank0.json") as f:
        doc = json.load(f)
    print(json.dumps({k: doc[k] for k in ("model", "world_size", "nccl", "plugin")}))
    print("table:", json.dumps(doc["table"])[:3000])
    assert doc["plugin"] == PLUGIN
    assert doc["table"]["comms"], "the plugin's init was not called for the communicator"


def _rank_pids() -> dict[int, int]:
    """rank -> pid of the workers running link_ddp.py (the launcher and torchrun carry no RANK)."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"link_ddp.py" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if b"RANK" in env and b"LOCAL_RANK" in env:
            out[int(env[b"RANK"])] = int(pid)
    return out


def _tables(pid: int) -> dict:
    """Every link table of the job's node as the agent would read it (all
    entries, in flight or not): the evidence kept beside the verdict."""
    from diag.link import table
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    out = {}
    for path, (rank, _pid) in sorted(table.find(env[b"XPU_TIMER_SHM_DIR"].decode()).items()):
        tab = table.LinkTable(path)
        try:
            out[f"rank{rank}"] = [dataclasses.asdict(e) for e in tab.read()]
        finally:
            tab.close()
    return out


def _keep(name: str, doc) -> None:
    """Into $LINK_GPU_OUT (session.sh: the run's outputs) when set."""
    where = os.environ.get("LINK_GPU_OUT")
    if where:
        os.makedirs(where, exist_ok=True)
        with open(os.path.join(where, name), "w") as f:
            json.dump(doc, f, indent=1)


def _pump(stream, into: queue.Queue) -> None:
    """The launcher's lines into a queue, so the test's waits have deadlines."""
    for line in stream:
        into.put(line)


@pytest.mark.gpus(2)
def test_two_gpus_dropped_socket_traffic_names_the_link(hook_built, tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_IB_DISABLE="1", NCCL_NET="Socket",
               NCCL_SOCKET_IFNAME="lo", NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET")
    if not shutil.which("iptables") or subprocess.run(["iptables", "-L", "OUTPUT"], capture_output=True).returncode:
        pytest.skip("needs iptables with CAP_NET_ADMIN to drop what rank 1's NCCL sockets send")
    # The plugin by default (no --link-plugin).
    proc = subprocess.Popen([sys.executable, "-m", "diag.launcher.main", "--nproc-per-node", "2",
                             "--hang-timeout", "20s", "--timeline-path", str(tmp_path / "tl"), SCRIPT,
                             str(tmp_path), "100000"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    rules, lines = [], []
    arrived: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, arrived), daemon=True).start()
    try:
        deadline = time.time() + 300   # to step 20; then the hang timeout and a minute
        while time.time() < deadline:
            try:
                line = arrived.get(timeout=1).rstrip()
            except queue.Empty:
                continue
            lines.append(line)
            if " step " not in line or line.endswith("0"):   # the launcher's own lines, every 10th step
                print("  |", line[:400])
            if not rules and "rank 1 step 20" in line:
                deadline = time.time() + 20 + 60
                pids = _rank_pids()
                _keep("tables_before_drop.json", _tables(pids[1]))
                ports = established_ports(pids[1])
                print(f"dropping what rank 1 (pid {pids[1]}) sends from ports {sorted(ports)}")
                for port in sorted(ports):
                    rule = ["OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(port), "-j", "DROP"]
                    subprocess.run(["iptables", "-I", *rule], check=True)
                    rules.append(rule)
            if "HANG: " in line:
                break
        if rules:   # the tables at the end, and what the rules dropped (packets, bytes)
            _keep("tables_at_hang.json", _tables(pids[1]))
            print(subprocess.run(["iptables", "-L", "OUTPUT", "-v", "-n"], capture_output=True, text=True).stdout)
        verdict = next((l[l.index("HANG: "):] for l in lines if "HANG: " in l), None)
        print(verdict)
        assert rules, "never reached step 20:\n" + "\n".join(lines[-60:])
        assert verdict, "no HANG:\n" + "\n".join(lines[-60:])
        _keep("launcher_tail.json", lines[-300:])
        time.sleep(2)
        [hang] = glob.glob(str(tmp_path / "tl" / "*" / "*" / "hang.json"))
        with open(hang) as f:
            doc = json.load(f)
        _keep("hang.json", doc)
        print(json.dumps(doc.get("link"), indent=1))
        assert re.search(r"link rank (1 -> rank 0|0 -> rank 1) \(node [^)]+\), channels? [\d,-]+, stuck at step \d+",
                         verdict), verdict
        pairs = {(l["src_rank"], l["dst_rank"]) for l in doc["link"]["links"]}
        assert pairs & {(1, 0), (0, 1)}, pairs
        faults = os.path.join(os.path.dirname(hang), "faults.json")
        assert os.path.exists(faults)
        ras = os.path.join(os.path.dirname(hang), "nccl_ras.txt")
        print("nccl_ras.txt:", open(ras).read()[:2000] if os.path.exists(ras) else "(none)")
    finally:
        for rule in rules:
            subprocess.run(["iptables", "-D", *rule], capture_output=True)
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        proc.wait(30)
