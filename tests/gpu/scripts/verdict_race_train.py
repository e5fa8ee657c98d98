"""The job bench/verdict_race.py plants faults in, the same under torchrun,
ft_launcher and xpu_timer_launch.

    verdict_race_train.py --fault stall|skip|spin|link|killed|none [--rank 1] [--at 20]
                          [--step-s 0.2] [--pg-timeout 0] [--nvrx] [--hb-calc-at 10] [--cpu]

Each step: a small MLP's forward/backward, one all-reduce of its gradients
(4 MiB), one of the loss (4 B), then .item() (the host waits for the GPU,
as a loss print does), padded to --step-s so every tool sees the same
cadence. At step --at, rank --rank prints `PLANTED <fault> <rank> <unix
time>` and then:
- stall:  sleeps in user code for good (a lost lock, a stuck read);
- skip:   skips that step's loss all-reduce (the others wait in it, it runs on);
- spin:   launches a GPU kernel that never ends (torch.cuda._sleep), then goes on;
- link:   drops every TCP segment its own sockets send on lo (iptables, as
          tests/gpu/test_link_gpu.py does; the PLANTED line ends with
          ports=...: the bench removes the rules);
- killed: SIGKILLs itself.
--pg-timeout S: init_process_group(timeout=S s) (0: torch's default).
--nvrx: heartbeats to NVRx's rank monitor every step, and the timeouts
calculated from the intervals seen at step --hb-calc-at, as NVRx's heartbeat
guide and its DDP example do (the config passes null timeouts).
"""
import argparse
import datetime
import os
import signal
import subprocess
import time

import torch
import torch.distributed as dist

from sockets import established_ports   # beside this script (sys.path[0])

ap = argparse.ArgumentParser()
ap.add_argument("--fault", default="none", choices=["stall", "skip", "spin", "link", "killed", "none"])
ap.add_argument("--rank", type=int, default=1)
ap.add_argument("--at", type=int, default=20)
ap.add_argument("--steps", type=int, default=100000)
ap.add_argument("--step-s", type=float, default=0.2)
ap.add_argument("--pg-timeout", type=float, default=0)
ap.add_argument("--nvrx", action="store_true")
ap.add_argument("--hb-calc-at", type=int, default=10)
ap.add_argument("--cpu", action="store_true")
args = ap.parse_args()

rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
dev = torch.device("cpu") if args.cpu else torch.device("cuda", local)
if not args.cpu:
    torch.cuda.set_device(dev)
kw = {"timeout": datetime.timedelta(seconds=args.pg_timeout)} if args.pg_timeout else {}
dist.init_process_group("gloo" if args.cpu else "nccl", **kw)
ft = None
if args.nvrx:
    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient
    ft = RankMonitorClient()
    ft.init_workload_monitoring()


def plant(fault: str) -> None:
    note = ""
    if fault == "link":
        ports = sorted(established_ports())
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}   # no hook in iptables
        for p in ports:
            subprocess.run(["iptables", "-I", "OUTPUT", "-o", "lo", "-p", "tcp", "--sport", str(p), "-j", "DROP"],
                           check=True, env=env)
        note = " ports=" + ",".join(map(str, ports))
    print(f"PLANTED {fault} {rank} {time.time():.3f}{note}", flush=True)
    if fault == "stall":
        while True:
            time.sleep(3600)
    if fault == "spin":
        torch.cuda._sleep(1 << 62)   # about 70 years of clock cycles
    if fault == "killed":
        os.kill(os.getpid(), signal.SIGKILL)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1)).to(dev)
x = torch.randn(64, 1024, device=dev)
for step in range(args.steps):
    t0 = time.monotonic()
    planted = rank == args.rank and step == args.at
    if planted:
        plant(args.fault)
    model.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(flat)
    if not (planted and args.fault == "skip"):
        dist.all_reduce(loss.detach())
    loss.item()
    if ft is not None:
        ft.send_heartbeat()
        if step == args.hb_calc_at:
            ft.calculate_and_set_hb_timeouts()
            print(f"NVRX rank {rank} hb_timeouts {ft.hb_timeouts}", flush=True)
    if step % 10 == 0:
        print(f"rank {rank} step {step}", flush=True)
    time.sleep(max(0.0, args.step_s - (time.monotonic() - t0)))
