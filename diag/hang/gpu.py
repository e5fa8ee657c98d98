"""The gpu_fault verdict rule: the GPU of a stuck rank, or of a rank the
others wait for, reported a fatal XID or ECC error (NVML, docs/gpu.md): its
kernels will not end."""

from __future__ import annotations

from diag.hang.api import Case, Findings, Rule


class GpuFaultRule(Rule):
    name = "gpu_fault"
    evidence = "a fatal XID or ECC error on the GPU of a stuck rank or of one the others wait for (NVML)"
    wait = "proof_s"
    decides = True

    def judge(self, case: Case) -> Findings:
        found = case.findings
        for rank in sorted(set(found.hung_ranks) | set(found.culprits)):
            entry = case.view.ranks.get(rank)
            if entry is None or not entry.progress.HasField("gpu"):
                continue
            gpu = entry.progress.gpu
            for event in gpu.events:
                if event.fatal:
                    where = gpu.identity.pci_bus_id or "its GPU"
                    return self.decided(found, f"rank {rank}'s GPU {where} reported {event.kind.upper()} "
                                               f"{event.code}{': ' + event.text if event.text else ''}")
        return found
