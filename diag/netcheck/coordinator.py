"""The coordinator (node rank 0): gathers joins, plans rounds, judges pairs, ends the run.

It talks to nodes only through the store: ``plan/<round>`` out, ``result/<round>/<rank>``
in, and watches every node's heartbeat, so a node that dies or hangs is
counted failed after --timeout instead of stalling the run.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from diag import faultlist
from diag.netcheck import rules
from diag.netcheck.api import FAIL, INFO, PASS, UNKNOWN, RULE_PAIRING, RULE_TIMEOUT, Measurement
from diag.netcheck.config import Config
from diag.netcheck.pairing import FAULTY, HEALTHY, PairOutcome, Pinpointer
from diag.netcheck.pairjob import pair_job_budget
from diag.netcheck.report import Reporter
from diag.netcheck.session import POLL_S, Session


class Coordinator:
    def __init__(self, cfg: Config, session: Session, reporter: Reporter,
                 own_node_alive: Callable[[], bool] = lambda: True):
        self.cfg, self.session, self.reporter = cfg, session, reporter
        self.own_node_alive = own_node_alive       # rank 0's own node runs in a thread of this process
        self.infos: dict[int, dict[str, Any]] = {}
        self.records: list[Measurement] = []
        self.fleet: dict[str, list[float]] = {}
        self.node_faults: dict[int, tuple[str, str]] = {}     # unit -> (rule, reason), outside pairing
        self.pair_rule: dict[frozenset, str] = {}
        self.timing: dict[str, Any] = {"rounds_s": []}
        self.display: dict[int, str] = {}                     # unit -> unique name, where hostnames repeat
        self.unmeasured: dict[int, str] = {}                  # unit -> why it stays unknown
        self.pair_busbw: dict[frozenset, float] = {}          # all_reduce busbw of every measured good pair
        self.posted = 0                                        # the last plan/<round> posted

    # -- names -------------------------------------------------------------
    def host(self, unit: int) -> str:
        if unit in self.display:
            return self.display[unit]
        if unit in self.infos:
            return self.infos[unit]["name"]
        slurm = self.slurm_name(unit)
        return slurm or f"rank{unit}"

    def slurm_name(self, unit: int) -> str | None:
        """The Slurm node of a node rank, where SLURM_JOB_NODELIST lists one per rank
        (Slurm numbers SLURM_NODEID in the order of that list)."""
        names = self.cfg.rdzv.slurm_nodes
        return names[unit] if len(names) == self.cfg.rdzv.nnodes and 0 <= unit < len(names) else None

    def label(self, unit: int) -> str:
        info = self.infos.get(unit)
        if info and info.get("local_world_size", 1) > 1:
            kind = "gpu" if info.get("device") == "cuda" else "proc"
            return f"{self.host(unit)}:{kind}{info['local_rank']}"
        return self.host(unit)

    def gpu(self, unit: int) -> int | None:
        info = self.infos.get(unit, {})
        return info.get("local_rank") if info.get("device", "cpu") != "cpu" else None

    # -- phases ------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.deadline = started + self.cfg.measure.deadline
        self._gather_joins()
        self.timing["join_s"] = time.monotonic() - started
        self._name_nodes()
        checking = time.monotonic()
        units = sorted(self.infos, key=lambda u: (self.infos[u].get("local_rank", 0), u))
        pp = Pinpointer(units, hosts={u: self.host(u) for u in units},
                        names={u: self.label(u) for u in units}, max_rounds=self.cfg.measure.max_rounds)
        self._gather_compute(units)
        while not self._past_deadline() and (pairs := pp.plan()) is not None:
            rnd = self.posted = pp.rounds
            self.session.set_json(f"plan/{rnd}", {"done": False, "round": rnd, "pairs": pairs,
                                                  "warmup": self._warmup(rnd)})
            self.reporter.start(f"round {rnd}: {len(pairs)} pair(s)", len(pairs))
            round_start = time.monotonic()
            results = self._collect(rnd, pairs)
            self._add_to_fleet(pairs, results)
            pp.record([o for a, b in pairs if (o := self._judge(rnd, a, b, results, pp)) is not None])
            self.timing["rounds_s"].append(time.monotonic() - round_start)
        if self.cfg.out.rank_order:
            self._probe_topology(pp)
        self.timing["check_s"] = time.monotonic() - checking
        if self._past_deadline():
            for u in pp.units:
                if pp.status[u] not in (HEALTHY, FAULTY):
                    self.unmeasured.setdefault(u, f"not measured before --deadline {self.cfg.measure.deadline:g}s")
        doc = self._finish(pp)
        # Nodes read plan/1, plan/2, ... in turn: the final document goes
        # right after the last plan posted (plan/1 when no pair could be formed).
        self.session.set_json(f"plan/{self.posted + 1}", {"done": True, "doc": doc})
        self._await_acks()
        return doc

    def _probe_topology(self, pp: Pinpointer) -> None:
        """--rank-order: measure the pairs the rounds left out (every pair of the
        nodes not found faulty, in disjoint rounds), for rankorder.group_measured.
        These rounds judge nothing; --deadline still ends them."""
        from diag.netcheck.rankorder import round_robin
        units = [u for u in pp.units if u not in pp.faulty and u not in self.node_faults]
        for pairs in round_robin(units):
            pairs = [p for p in pairs if frozenset(p) not in self.pair_busbw]
            if not pairs or self._past_deadline():
                continue
            self.posted += 1
            rnd = self.posted
            self.session.set_json(f"plan/{rnd}", {"done": False, "round": rnd, "pairs": pairs, "warmup": self._warmup(rnd)})
            self.reporter.start(f"round {rnd} (topology): {len(pairs)} pair(s)", len(pairs))
            results = self._collect(rnd, pairs)
            for a, b in pairs:
                ra, rb = results.get(a), results.get(b)
                if ra and rb and ra.get("ok") and rb.get("ok"):
                    self.pair_busbw[frozenset((a, b))] = self._pair_busbw(a, b, results, "all_reduce")

    def rank_order(self, pp: Pinpointer) -> dict[str, Any]:
        """The --rank-order document (see rankorder.py): --topology's switches, else the measured groups."""
        from diag.netcheck import rankorder
        nodes = [rankorder.NodeId(self.infos[u].get("host_rank", u), self.host(u), self.infos[u].get("hostname", ""),
                                  self.infos[u].get("addr", "")) for u in sorted(self.infos)]
        busbw = {frozenset(self.infos[u].get("host_rank", u) for u in p): bw for p, bw in self.pair_busbw.items()}
        if self.cfg.out.topology:
            groups = rankorder.group_by_switch(nodes, rankorder.load_topology(self.cfg.out.topology), self.cfg.out.topology)
            return rankorder.document(groups, busbw, "topology")
        return rankorder.document(rankorder.group_measured(nodes, busbw), busbw, "measured")

    def _past_deadline(self) -> bool:
        return time.monotonic() >= self.deadline

    def _await_acks(self) -> None:
        # The store lives in this process: keep it up until every live node
        # has read the final plan (or its heartbeat stopped), at most --timeout.
        pending = set(self.infos)
        cap = time.monotonic() + self.cfg.measure.timeout
        while pending and time.monotonic() < cap:
            for u in sorted(pending):
                if self.session.has(f"done/{u}") or self._gone(u):
                    pending.discard(u)
            time.sleep(POLL_S)

    def _gone(self, unit: int) -> bool:
        """A node is gone when its heartbeat stopped for --timeout. This process's
        own node is judged by its thread instead: a starved heartbeat thread on a
        loaded host must not make the coordinator drop itself."""
        if unit == self.cfg.rdzv.node_rank:
            return not self.own_node_alive()
        return self.session.heartbeat_age(unit) > self.cfg.measure.timeout

    def _warmup(self, rnd: int) -> int:
        """Later rounds confirm a verdict: with >= 3 timed iterations the median
        already drops the first one's set-up cost, so they skip the warm-up."""
        return self.cfg.measure.warmup if rnd == 1 or self.cfg.measure.iters < 3 else 0

    def _gather_joins(self) -> None:
        deadline = min(time.monotonic() + self.cfg.rdzv.join_timeout, self.deadline)
        missing = set(range(self.cfg.rdzv.nnodes))
        while missing and time.monotonic() < deadline:
            for r in sorted(missing):
                if self.session.has(f"join/{r}"):
                    self.infos[r] = self.session.get_json(f"join/{r}")
                    missing.discard(r)
            time.sleep(POLL_S)
        for r in sorted(missing):
            slurm = self.slurm_name(r)
            who = f"node rank {r}" + (f" (Slurm node {slurm})" if slurm else "")
            waited = min(self.cfg.rdzv.join_timeout, self.cfg.measure.deadline)
            self.node_faults[r] = (RULE_TIMEOUT, f"{who} did not join within {waited:g}s")
        self.reporter.log(f"{len(self.infos)} of {self.cfg.rdzv.nnodes} node(s) joined"
                          + (f"; missing: {', '.join(self.node_faults[r][1].split(' did not')[0] for r in sorted(missing))}"
                             if missing else ""))

    def _name_nodes(self) -> None:
        """Where several hosts (told apart by address and node rank) share a name,
        show each as ``name#<node rank>``, and say so once."""
        hosts: dict[str, dict[tuple, list[int]]] = {}
        for u, info in self.infos.items():
            key = (info.get("addr"), info.get("host_rank", u))
            hosts.setdefault(info["name"], {}).setdefault(key, []).append(u)
        shared = sorted(n for n, by_host in hosts.items() if len(by_host) > 1)
        for name in shared:
            for (_, host_rank), units in hosts[name].items():
                for u in units:
                    self.display[u] = f"{name}#{host_rank}"
        if shared:
            count = sum(len(hosts[n]) for n in shared)
            self.reporter.log(f"warning: {count} nodes share the name(s) {', '.join(shared)}; shown as "
                              f"{shared[0]}#<node rank>; give each --node-name (or XPU_TIMER_NODE_NAME)")

    def _gather_compute(self, units: list[int]) -> None:
        wanted = [u for u in units if self.infos[u].get("compute")]
        results = {}
        deadline = time.monotonic() + self.cfg.measure.timeout
        while len(results) < len(wanted) and time.monotonic() < deadline:
            for u in wanted:
                if u not in results and self.session.has(f"gemm/{u}"):
                    results[u] = self.session.get_json(f"gemm/{u}")
            time.sleep(POLL_S)
        fleet = [r["tflops"] for r in results.values() if "tflops" in r]
        for u in wanted:
            self._judge_compute(u, results.get(u), fleet)

    def _judge_compute(self, unit: int, res: dict | None, fleet: list[float]) -> None:
        name, gpu = self.host(unit), self.gpu(unit)
        if res is None or "tflops" not in res:
            why = res.get("error") if res else f"no GEMM result within {self.cfg.measure.timeout:g}s"
            self.records.append(Measurement(name, "gemm", None, "TFLOP/s", gpu=gpu, verdict=FAIL,
                                            reason=why, rule="error" if res else RULE_TIMEOUT))
            self.node_faults[unit] = ("error" if res else RULE_TIMEOUT, f"compute check: {why}")
            return
        profile = rules.select_profile(self.cfg.thresholds.profile, self.infos[unit].get("device_name"))
        th = rules.Thresholds(profile.get("min_gemm_tflops") if profile else None, self.cfg.thresholds.rel_ratio,
                              self.cfg.thresholds.mad_z, profile.get("typical_gemm_tflops") if profile else None)
        v = rules.judge(res["tflops"], fleet, th, "gemm", "TFLOP/s")
        self.records.append(Measurement(name, "gemm", res["tflops"], "TFLOP/s", gpu=gpu, expected=v.expected,
                                        threshold=v.threshold, verdict=v.verdict, reason=v.reason, rule=v.rule,
                                        extra={"shape": res.get("shape"), "dtype": res.get("dtype")}))
        if v.verdict == FAIL:
            self.node_faults[unit] = (v.rule, f"compute check: {v.reason}")

    def _collect(self, rnd: int, pairs: list[tuple[int, int]]) -> dict[int, dict | None]:
        """Every paired node's result, or None for a node that is gone.

        Gone: its heartbeat stopped for --timeout, it is this process's own
        node and that thread died, or the round outlived every deadline a pair
        job can have (a live node whose loop is stuck).
        """
        pending = {u for p in pairs for u in p}
        results: dict[int, dict | None] = {}
        cap = time.monotonic() + pair_job_budget(self.cfg.measure.timeout, self.cfg.measure.warmup, self.cfg.measure.iters) + 30.0
        while pending:
            for u in sorted(pending):
                if self.session.has(f"result/{rnd}/{u}"):
                    results[u] = self.session.get_json(f"result/{rnd}/{u}")
                    if (results[u].get("nccl") or {}).get("net") and u in self.infos:
                        self.infos[u]["nccl"] = results[u]["nccl"]["net"]
                elif self._past_deadline():      # never measured: unknown, not faulty
                    results[u] = {"ok": False, "deadline": True}
                elif self._gone(u) or time.monotonic() > cap:
                    results[u] = None
                else:
                    continue
                pending.discard(u)
                self.reporter.advance(0.5)
            time.sleep(POLL_S)
        return results

    def _thresholds(self, a: int, b: int) -> rules.Thresholds:
        profile = rules.select_profile(self.cfg.thresholds.profile, self.infos[a].get("device_name"))
        scope = "same_host" if self.host(a) == self.host(b) else "cross_host"
        floor = self.cfg.thresholds.min_busbw
        if floor is None and profile:
            floor = profile["min_busbw_gbs"][scope]
        typical = profile["typical_busbw_gbs"][scope] if profile else None
        return rules.Thresholds(floor, self.cfg.thresholds.rel_ratio, self.cfg.thresholds.mad_z, typical)

    @staticmethod
    def _pair_busbw(a: int, b: int, results: dict, test: str) -> float:
        return sum(results[u]["tests"][test]["busbw"] for u in (a, b)) / 2  # nccl-tests averages ranks

    def _add_to_fleet(self, pairs: list[tuple[int, int]], results: dict) -> None:
        # The whole round joins the fleet before any pair is judged, so the
        # first pair judged is compared with its round, not with itself.
        for a, b in pairs:
            ra, rb = results.get(a), results.get(b)
            if ra and rb and ra["ok"] and rb["ok"]:
                self.pair_busbw[frozenset((a, b))] = self._pair_busbw(a, b, results, "all_reduce")
                for test in ra["tests"]:
                    self.fleet.setdefault(test, []).append(self._pair_busbw(a, b, results, test))

    def _judge(self, rnd: int, a: int, b: int, results: dict, pp: Pinpointer) -> PairOutcome | None:
        link = f"{self.label(a)}<->{self.label(b)}"
        if any((results.get(u) or {}).get("deadline") for u in (a, b)):
            why = f"pair {link} not finished by --deadline {self.cfg.measure.deadline:g}s"
            self.reporter.log(f"round {rnd}: {why}; both stay unknown")
            for u in (a, b):
                self.unmeasured.setdefault(u, f"not measured: {why}")
            return None
        failure = self._pair_failure(a, b, results, pp)
        if failure:
            rule, reason = failure
            self.reporter.log(f"round {rnd}: pair {link} abandoned ({rule}): {reason}")
            for u in (a, b):
                self.records.append(Measurement(self.host(u), "pair", None, "", gpu=self.gpu(u), link=link,
                                                verdict=FAIL, reason=reason, rule=rule, round=rnd))
            self.pair_rule[frozenset((a, b))] = rule
            return PairOutcome(a, b, False, reason)
        ok, reasons = True, []
        th = self._thresholds(a, b)
        for test in results[a]["tests"]:
            figs = [results[u]["tests"][test] for u in (a, b)]
            busbw = self._pair_busbw(a, b, results, test)
            v = rules.judge(busbw, self.fleet[test], th, f"{test} busbw", "GB/s")
            if v.verdict == FAIL:
                ok = False
                reasons.append(f"[{v.rule}] {v.reason}")
                self.pair_rule[frozenset((a, b))] = v.rule
            for u, f in zip((a, b), figs):
                self.records.append(Measurement(
                    self.host(u), f"{test}.busbw", f["busbw"], "GB/s", gpu=self.gpu(u), link=link,
                    expected=v.expected, threshold=v.threshold, verdict=v.verdict, reason=v.reason, rule=v.rule,
                    round=rnd, extra={"algbw": f["algbw"], "seconds": f["seconds"],
                                      "mean_seconds": f.get("mean_seconds", f["seconds"]), "bytes": f["bytes"],
                                      "pair_busbw": busbw, **self._transport(results[u])}))
        return PairOutcome(a, b, ok, "; ".join(reasons))

    @staticmethod
    def _transport(result: dict) -> dict[str, Any]:
        """NCCL's channels for this pair (``P2P/CUMEM/read``, ``NET/IB/0``), where NCCL said."""
        via = (result.get("nccl") or {}).get("transports")
        return {"nccl_transports": via} if via else {}

    def _pair_failure(self, a: int, b: int, results: dict, pp: Pinpointer) -> tuple[str, str] | None:
        for u in (a, b):
            res = results.get(u)
            if res is None:
                why = f"{self.label(u)} gave no result and its heartbeat stopped for > {self.cfg.measure.timeout:g}s"
                pp.mark_faulty(u, f"dropped out or hung: {why}")
                self.node_faults.setdefault(u, (RULE_TIMEOUT, f"dropped out or hung: {why}"))
                return RULE_TIMEOUT, why
            if res.get("abandoned"):
                pp.mark_faulty(u, f"stuck and abandoned: {res['error']}")
                self.node_faults.setdefault(u, (RULE_TIMEOUT, f"stuck: {res['error']}"))
        for u in (a, b):
            if not results[u]["ok"]:
                return results[u]["rule"], f"{self.label(u)}: {results[u]['error']}"
        return None

    def _entry(self, unit: int, reason: str) -> faultlist.FaultEntry:
        info = self.infos.get(unit, {})
        return faultlist.FaultEntry(self.host(unit), reason, info.get("hostname") or self.slurm_name(unit) or "",
                                    info.get("host_rank", unit), info.get("addr") or "")

    def _node_record(self, unit: int, verdict: str, reason: str, rule: str = "") -> Measurement:
        info = self.infos.get(unit, {})
        return Measurement(self.host(unit), "node", None, "", gpu=self.gpu(unit), verdict=verdict, reason=reason,
                           rule=rule, extra={"node_rank": info.get("host_rank", unit), "hostname": info.get("hostname"),
                                             "addr": info.get("addr"), "iface": info.get("iface"),
                                             **({"nccl": info["nccl"]} if info.get("nccl") else {})})

    def _finish(self, pp: Pinpointer) -> dict[str, Any]:
        entries: list[faultlist.FaultEntry] = []
        extra_records: list[dict[str, Any]] = []
        switchbox: dict[str, Any] = {}
        for unit, reason in sorted(pp.faulty.items()):
            rule = self.node_faults.get(unit, (None,))[0] or self._pinned_rule(unit, pp)
            entries.append(self._entry(unit, f"{self.label(unit)}: {reason}"))
            self.records.append(self._node_record(unit, FAIL, reason, rule))
        for unit, (rule, reason) in sorted(self.node_faults.items()):
            if unit in pp.faulty:
                continue
            entries.append(self._entry(unit, f"{self.label(unit)}: {reason}"))
            self.records.append(self._node_record(unit, FAIL, reason, rule))
        for unit in pp.units:
            if unit in self.node_faults or unit in pp.faulty:
                continue
            if pp.status[unit] == HEALTHY:
                self.records.append(self._node_record(unit, PASS, "passed with a healthy partner"))
            else:       # never measured: not healthy, not faulty
                self.records.append(self._node_record(unit, UNKNOWN, self.unmeasured.get(
                    unit, "not measured: no partner to pair with")))
        for unit in sorted(self.infos):        # each host's switchbox result, sent with its join
            local = self.infos[unit].get("local") or {}
            entries.extend(self._entry(unit, f["reason"]) for f in local.get("faulty", []))
            extra_records.extend(local.get("records", []))
            if local.get("switchbox"):
                switchbox[self.host(unit)] = local["switchbox"]
        summary = {"rounds": pp.rounds, "nodes": self.cfg.rdzv.nnodes, "joined": len(self.infos),
                   "size": self.infos.get(0, {}).get("size"), "backend": self.infos.get(0, {}).get("backend"),
                   "timing": self.timing, "switchbox": switchbox, "unknown": sorted(self.host(u) for u in pp.units
                   if u not in pp.faulty and u not in self.node_faults and pp.status[u] != HEALTHY)}
        self.records.append(Measurement("*", "rounds", float(pp.rounds), "", verdict=INFO,
                                        reason=f"{pp.rounds} round(s) for {self.cfg.rdzv.nnodes} node(s)"))
        extra = {"rank_order": self.rank_order(pp)} if self.cfg.out.rank_order else {}
        return faultlist.to_document(entries, [m.to_dict() for m in self.records] + extra_records, summary=summary,
                                     **extra)

    def _pinned_rule(self, unit: int, pp: Pinpointer) -> str:
        rules_seen = [self.pair_rule[frozenset((o.a, o.b))] for o in pp.bad_pairs
                      if unit in (o.a, o.b) and frozenset((o.a, o.b)) in self.pair_rule]
        return f"{RULE_PAIRING}+{rules_seen[-1]}" if rules_seen else RULE_PAIRING
