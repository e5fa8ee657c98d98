"""What every node does (the coordinator's node too): join, compute check, rounds.

A node runs its pair's tests when the plan names it, posts the result, and
waits for the next plan. If the coordinator's heartbeat stops, it gives up
with one line naming the coordinator. If its own pair job is stuck past
every deadline it posts "abandoned" and the caller exits the process, since
the device may be wedged.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import torch

from diag.netcheck.api import NetcheckError
from diag.netcheck.config import CPU_DEFAULT_SIZE, GPU_DEFAULT_SIZE, Config
from diag.netcheck.measure.gemm import run_gemm
from diag.netcheck.ncclnet import DebugLog, first_warning, transports
from diag.netcheck.pairjob import guarded, make_group, pair_job_budget, run_pair_tests
from diag.netcheck.session import Session


DEADLINE_GRACE_S = 2.0     # past --deadline, so the coordinator has stopped waiting first


def pick_backend(cfg: Config) -> str:
    if cfg.rdzv.backend != "auto":
        return cfg.rdzv.backend
    return "nccl" if torch.cuda.is_available() else "gloo"


def pick_device(backend: str, cfg: Config) -> torch.device:
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise NetcheckError("--backend nccl: no CUDA device is visible; use --backend gloo")
        torch.cuda.set_device(cfg.rdzv.local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Node:
    def __init__(self, cfg: Config, session: Session, local_doc: dict[str, Any] | None = None):
        self.cfg, self.session, self.local_doc = cfg, session, local_doc
        self.backend = pick_backend(cfg)
        self.device = pick_device(self.backend, cfg)
        from diag.netcheck.iface import choose
        self.endpoint = choose(cfg, self.backend)
        # Before any NCCL call: NCCL reads its debug variables once.
        self.nccl_log = DebugLog() if self.backend == "nccl" else None
        self.size = cfg.measure.size or (GPU_DEFAULT_SIZE if self.device.type == "cuda" else CPU_DEFAULT_SIZE)
        self.abandoned = False
        self.deadline = time.monotonic() + cfg.measure.deadline

    def info(self) -> dict[str, Any]:
        gpu = self.device.type == "cuda"
        return {"name": self.cfg.rdzv.node_name or socket.gethostname(), "hostname": socket.gethostname(),
                "addr": self.endpoint.addr, "iface": self.endpoint.iface, "iface_how": self.endpoint.how,
                "host_rank": self.cfg.rdzv.host_rank,
                "local_rank": self.cfg.rdzv.local_rank, "local_world_size": self.cfg.rdzv.local_world_size,
                "device": self.device.type, "backend": self.backend, "size": self.size,
                "device_name": torch.cuda.get_device_name(self.device) if gpu else "cpu",
                "compute": self.cfg.measure.compute == "on" or (self.cfg.measure.compute == "auto" and gpu),
                "local": self.local_doc}

    def run(self) -> dict[str, Any]:
        """Take part until the coordinator posts the final document; return it."""
        try:
            return self._take_part()
        finally:
            if self.nccl_log:
                self.nccl_log.close()

    def _take_part(self) -> dict[str, Any]:
        rank = self.cfg.rdzv.node_rank
        info = self.info()
        self.session.set_json(f"join/{rank}", info)
        if info["compute"]:
            self.session.set_json(f"gemm/{rank}", self._gemm())
        rnd = 1
        while True:
            plan = self.session.wait_for(f"plan/{rnd}", None, self._coordinator_alive)
            if plan["done"]:
                self.session.set_json(f"done/{rank}", True)
                return plan["doc"]
            for index, (a, b) in enumerate(plan["pairs"]):
                if rank in (a, b):
                    self._run_pair(rnd, index, 0 if rank == a else 1, b if rank == a else a,
                                   plan.get("warmup", self.cfg.measure.warmup))
            if self.abandoned:
                raise NetcheckError(f"node rank {rank}: pair job stuck past every deadline; "
                                    "exiting so the device is not reused")
            rnd += 1

    def _gemm(self) -> dict[str, Any]:
        try:
            g = run_gemm(self.device)
            return {"tflops": g.tflops, "shape": g.shape, "dtype": g.dtype, "seconds": g.seconds}
        except Exception as exc:  # noqa: BLE001 - a failing GPU is a verdict
            return {"error": f"GEMM failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"}

    def _run_pair(self, rnd: int, index: int, pos: int, peer: int, warmup: int) -> None:
        cfg = self.cfg

        def job() -> dict[str, Any]:
            group = make_group(cfg.rdzv.master_addr, cfg.rdzv.master_port, f"netcheck/pg/{rnd}/{index}/", pos,
                               cfg.measure.timeout, self.backend, cfg.rdzv.iface, self.endpoint.addr)
            return run_pair_tests(group, pos, self.device, self.size, warmup, cfg.measure.iters, cfg.measure.timeout)

        what = f"round {rnd} with node rank {peer}"
        # --deadline cuts the job short: the coordinator then posts the final
        # document (this pair unknown), which this node must still read.
        budget = pair_job_budget(cfg.measure.timeout, cfg.measure.warmup, cfg.measure.iters)
        left = self.deadline - time.monotonic() + DEADLINE_GRACE_S
        result, abandoned = guarded(job, max(min(budget, left), 0.1), what)
        if abandoned and left < budget:
            result, abandoned = {"ok": False, "deadline": True, "error": f"{what}: cut by --deadline"}, False
        result["abandoned"] = abandoned
        if self.nccl_log:
            self._add_nccl_report(result)
        self.abandoned = self.abandoned or abandoned
        self.session.set_json(f"result/{rnd}/{cfg.rdzv.node_rank}", result)

    def _add_nccl_report(self, result: dict[str, Any]) -> None:
        """Which network NCCL says it used (the node's) and how this pair's channels ran."""
        text = self.nccl_log.since_last()
        result["nccl"] = {"net": self.nccl_log.net().to_dict(), "transports": transports(text)}
        warning = first_warning(text)
        if warning and not result.get("ok") and "error" in result:
            result["error"] += f" (NCCL: {warning})"

    def _coordinator_alive(self) -> None:
        if self.cfg.rdzv.node_rank == 0:
            return
        try:
            age = self.session.heartbeat_age(0)
        except Exception as exc:  # noqa: BLE001 - the store lives with the coordinator
            raise NetcheckError(f"node rank {self.cfg.rdzv.node_rank}: lost the coordinator (node rank 0 at "
                                f"{self.cfg.rdzv.master_addr}:{self.cfg.rdzv.master_port}): {str(exc).splitlines()[0]}") from None
        if age > self.cfg.measure.timeout:
            raise NetcheckError(f"node rank {self.cfg.rdzv.node_rank}: the coordinator (node rank 0 at "
                                f"{self.cfg.rdzv.master_addr}:{self.cfg.rdzv.master_port}) stopped its heartbeat "
                                f"{age:.0f}s ago; presume it faulty")
