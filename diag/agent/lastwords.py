"""The agent's side of recovery (docs/recovery.md): persist and last words.

The workers commit snapshots into the node's store (diag/recover, tmpfs,
created by the launcher, outliving every worker). This module, on one thread
of the agent (``xpu-diag-agent-persist``), never a training thread:

* persists the newest complete snapshot to ``--ckpt-dir`` every
  ``--ckpt-persist-every`` steps or seconds;
* persists as **last words** when the collector asks (PersistLastWords, on a
  HANG) and answers it (LastWordsDone), and when one of its workers exits
  (a crash: torchrun is about to restart the rest);
* under ``--hang-action recover``, times the restart: from the HANG line (or
  the worker's exit) to the first step after the restart, said in one
  ``RECOVERED:`` line; and leaves the job when the collector blames this
  node's hardware and ``--nnodes MIN:MAX`` leaves enough nodes without it.

One persist at a time, in this thread: a last words request waits at most
for the persist in progress (the same step, most often, which is then
"present" and costs nothing). Everything is caught and logged: recovery
never stops the agent or the job.
"""

from __future__ import annotations

import queue
import threading
import time

from diag.pb import collector_pb2 as pb

TICK_S = 0.2
# Copies kept per rank on disk (besides the newest step every rank has, which
# prune keeps on a shared --ckpt-dir). More than two: nodes persist on their
# own ticks, so after a node loss the survivors' newest copies may be a step
# or two ahead of the lost node's, and restore needs a step that every rank has.
PERSIST_KEEP = 3


class Recovery:
    """Owned by the Agent; ``agent`` gives log, lock, state, connection."""

    def __init__(self, agent, config):
        self.agent = agent
        self.config = config
        self.store_dir = config.store_dir
        self.persist_dir = config.ckpt_dir
        self.on = bool(self.store_dir and self.persist_dir)
        self.schedule = _schedule(config.ckpt_persist_every)
        self._requests: queue.Queue = queue.Queue()    # event ids of PersistLastWords
        self._wake = threading.Event()
        self.last_step: int | None = None              # newest step this node persisted
        self._last_time = time.monotonic()
        self._alive: dict[int, int] = {}               # rank -> pid of the live incarnation
        self._restart: dict | None = None              # what the RECOVERED line needs
        self.leave = None          # set by the launcher: callable(reason) that makes torchrun stop here
        self.recovered: list[str] = []                 # RECOVERED lines said (tests read them)

    # -- called from other agent threads -----------------------------------
    def request_last_words(self, event_id: str) -> None:
        self._requests.put(event_id)
        self._wake.set()

    def on_kill(self, kill: pb.KillWorkers) -> None:
        """Before the agent kills its workers: start the restart clock; leave
        the job if the collector blames this node and the job can do without it."""
        if not kill.recover:
            return
        self._restart = {"since": kill.declared_unix or time.time(), "what": "the HANG line",
                         "kill": time.time(), "old": dict(self._alive)}
        if self.config.node_rank in kill.leave_out_nodes:
            self._maybe_leave(kill)

    def _maybe_leave(self, kill: pb.KillWorkers) -> None:
        left = kill.nodes - len(kill.leave_out_nodes)
        if left < self.config.nnodes_min:
            self.agent.log(f"the hang is blamed on this node's hardware, but leaving would leave {left} "
                           f"node(s), fewer than --nnodes min {self.config.nnodes_min}: rejoining", every=0)
            return
        event = kill.reason.split(":", 1)[0]     # "hang <event id>"
        reason = f"{event} is blamed on this node's hardware"
        self._restart = None
        if self.leave is not None:
            self.leave(reason)

    # -- the thread ---------------------------------------------------------
    def run(self) -> None:
        stop = self.agent.stopping
        while not stop.is_set():
            self._wake.wait(TICK_S)
            self._wake.clear()
            try:
                self.tick(time.monotonic())
            except Exception as exc:   # never end the loop
                self.agent.log(f"recovery tick failed: {exc!r}")
        try:
            self.at_the_end()
        except Exception as exc:
            self.agent.log(f"recovery at the job's end failed: {exc!r}")

    def at_the_end(self) -> None:
        """The agent stops: the workers' last snapshot can be newer than the
        last tick saw (they commit it as they exit, and the tick that would
        notice the exit may never come), so persist it now."""
        if self.on and self.newest_step() not in (None, self.last_step):
            self.persist("at the job's end")

    def tick(self, now: float) -> None:
        while True:
            try:
                event_id = self._requests.get_nowait()
            except queue.Empty:
                break
            self._last_words(event_id)
        exited = self._watch_workers()
        if exited and self.on and self.newest_step() is not None:   # a job without snapshots: nothing to say
            self.persist(f"last words: rank(s) {', '.join(map(str, exited))} exited")
        elif self.on and self.schedule.due(self.newest_step(), self.last_step, now, self._last_time):
            self.persist("periodic")
        self._check_restart()

    def _watch_workers(self) -> list[int]:
        """Ranks whose worker exited since the last tick; starts the restart
        clock on a crash (a worker exit while no kill is in progress)."""
        with self.agent.lock:
            now = {r: s.pid for r, s in self.agent.state.ranks.items() if s.alive}
        gone = sorted(r for r, pid in self._alive.items() if now.get(r) != pid)
        if gone and self._restart is None:
            # A crash or the job's end: only new workers (a restart) make it a crash to time.
            self._restart = {"since": time.time(), "what": f"rank(s) {', '.join(map(str, gone))} exited",
                             "kill": None, "old": dict(self._alive)}
        self._alive = now
        return gone

    # -- persisting ----------------------------------------------------------
    def newest_step(self) -> int | None:
        """The newest step every local rank that keeps a snapshot has
        committed, or None. (A DDP rank that keeps nothing of its own commits
        nothing: it does not hold the others back.)"""
        from diag.recover import store
        steps = [ref.meta.step for ref in (store.newest_committed(self.store_dir, rank)
                                           for rank in store.ranks_in(self.store_dir)) if ref is not None]
        return min(steps) if steps else None

    def persist(self, why: str):
        """persist_newest, timed and logged; returns (PersistResult, seconds,
        the step every rank that keeps a snapshot now has on disk or None)."""
        from diag.recover import persist
        began = time.monotonic()
        result = persist.persist_newest(self.store_dir, self.persist_dir, keep=PERSIST_KEEP)
        took = time.monotonic() - began
        self._last_time = time.monotonic()
        on_disk = [r.step for r in result.ranks if r.outcome in ("written", "present")]
        step = min(on_disk) if on_disk else None
        if step is not None:
            self.last_step = step
        if not result.ok:   # the same failure said once a minute, not every tick
            self.agent.log(f"{why}: persisting to {self.persist_dir} failed: {result.summary()}")
        elif why != "periodic" and result.ranks:   # no rank keeps snapshots: a job without recovery, nothing to say
            self.agent.log(f"{why}: persisted to {self.persist_dir} in {took:.2f} s: {result.summary()}",
                           every=0)
        return result, took, step

    def _last_words(self, event_id: str) -> None:
        cfg = self.config
        done = pb.LastWordsDone(job_id=cfg.job_id, event_id=event_id, node_rank=cfg.node_rank,
                                hostname=cfg.hostname, ok=True, step=-1)
        if not self.on:
            done.message = "recovery is off on this node (no snapshot store or persist directory)"
        else:
            try:
                result, done.seconds, step = self.persist(f"last words for {event_id}")
                done.ok, done.step = result.ok, -1 if step is None else step
                done.message = "" if result.ok and step is not None else result.summary()
            except Exception as exc:
                done.ok, done.message = False, f"persist failed: {exc!r}"
        if self.agent.connection is not None:
            self.agent.connection.report_last_words(done)

    # -- timing the restart -------------------------------------------------
    def _check_restart(self) -> None:
        """Say RECOVERED once every rank of the node has a new worker that
        finished a step (the tracer's step function, --perf-step) or
        committed a snapshot newer than the restart."""
        info = self._restart
        if info is None or not self._alive:
            return
        old = info["old"]
        if any(old.get(r) == pid for r, pid in self._alive.items()):
            return    # an old worker still runs: not restarted yet
        first = [self._first_step(r, info["since"]) for r in self._alive]
        if any(t is None for t in first):
            return
        self._restart = None
        self._say_recovered(info, max(first))

    def _first_step(self, rank: int, since: float) -> float | None:
        """Wall time the rank's new worker finished its first step, if it has."""
        perf = self.agent.state.perf
        with self.agent.lock:
            state = self.agent.state.ranks.get(rank)
            counted = perf.ranks.get(rank) if perf is not None else None
            steps = counted.steps_total if counted is not None else 0
            started = state.started_ns if state is not None else 0
        if steps > 0:
            return time.time()   # seen now: within one TICK_S of the step's end
        if self.on:
            from diag.recover import store
            ref = store.newest_committed(self.store_dir, rank)
            if ref is not None and ref.meta.created > since and started:
                return ref.meta.created
        return None

    def _say_recovered(self, info: dict, first_step: float) -> None:
        with self.agent.lock:
            started = [s.started_ns for s in self.agent.state.ranks.values() if s.alive]
        # Region headers carry the monotonic start; the agent's clock is the same host's.
        spawn = time.time() - (time.monotonic_ns() - min(started)) / 1e9 if started else first_step
        parts = []
        if info["kill"] is not None:
            parts.append(f"stacks and last words {info['kill'] - info['since']:.1f} s")
        base = info["kill"] if info["kill"] is not None else info["since"]
        parts += [f"to new workers {max(0.0, spawn - base):.1f} s",
                  f"their start-up, restore and first step {max(0.0, first_step - spawn):.1f} s"]
        line = (f"RECOVERED: first step after the restart {first_step - info['since']:.1f} s after "
                f"{info['what']} ({', '.join(parts)})")
        self.recovered.append(line)
        self.agent.log(line, every=0)


def _schedule(every):
    from diag.recover.api import PersistSchedule
    if every is None:
        return PersistSchedule()
    return PersistSchedule(every_steps=every.steps, every_s=every.seconds)
