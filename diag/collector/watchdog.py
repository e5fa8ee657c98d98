"""The collector's watchdog: the loop that runs its passes, and the actions.

One thread, one ``tick`` every --eval interval (0.5 s). Each tick is a
scheduler over registered passes (schedule.py, passes.py, hang_pass.py),
each due on its own cadence, owning its own state and isolated from the
others. The loop never dies: errors are logged and the next tick runs.
``tick`` takes the clock as arguments so tests can drive it directly. The
watchdog owns what the passes act through: the hang declaration (line,
commands, hang.json), ingest's hold, the perf path's thread, the kills.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import time

from diag import faultlist
from diag.collector import gpus, verdict
from diag.collector.config import Config
from diag.collector.events import MAX_EVENTS_KEPT, EventStore, HangEvent
from diag.collector.failures import FailureWatch
from diag.collector.pace import Pacer
from diag.collector.hang_pass import HangPass, IdlePass
from diag.collector.passes import all_passes
from diag.collector.schedule import Scheduler
from diag.collector.servicer import SessionRegistry
from diag.collector.slowness import SlowWatch
from diag.collector.state import JobState, Snapshot
from diag.common import dumpnames, safe_dirs
from diag.common.ranks import fold
from diag.pb import collector_pb2 as pb

log = logging.getLogger("diag.collector")
KILLING = ("kill", "recover")   # the --hang-action values that end the workers
SLOW_TICK_S = 1.0
FORGIVE_S = 2.0   # reports held while a hang was judged are late by our choice, not overload
# The watchdog waking later than asked by half the shorter of --silent-after
# and --hang-timeout (at least this): the collector itself was paused. A
# shorter pause cannot make a verdict on its own; a busy host's scheduling
# delay stays far below it.
PAUSED_MIN_S = 1.0
# The perf path's pass takes at most this share of the GIL: at 100,000 ranks
# reading every window costs ~4 s of Python, and taking the GIL half the time
# for that long put ingest 3 s behind (an OVERLOAD of our own making,
# docs/collector.md "Report relays"). It runs every ~50 s at that size.
PERF_PATH_SHARE = 0.25


class Watchdog:
    """The loop over the passes, and the actions they take: the hang
    declaration (line, commands, hang.json), ingest's hold, the kills."""

    def __init__(self, config: Config, state: JobState, registry: SessionRegistry, events: EventStore,
                 out=None, timelines=None) -> None:
        self.config = config
        self.timelines = timelines  # diag.collector.timelines.TimelineGatherer, or None
        self.state = state
        self._registry = registry
        self._events = events
        self._out = out  # where verdict lines go; None means sys.stderr at print time
        self.declared: list[HangEvent] = []
        self._marks: dict[int, str] = {}   # the last HANG's ranks: "hung" or "culprit" (hang_marks)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.slow = SlowWatch(config, events, registry, self.say, timelines)
        self.gpus = gpus.GpuWatch(self.say)   # start-up lines on where ranks run (docs/gpu.md)
        self.pacer = Pacer(config, state, registry, self.say)   # overload: say it, shed, back off
        self._side: threading.Thread | None = None   # the perf path's pass, when one runs
        self._holding = False   # a declaring tick judges: the perf path's pass waits
        self._line_at = float("-inf")   # when the last HANG line was said (the slow-tick warning)
        self._line_cpu = 0.0            # ... and the watchdog thread's CPU time then
        self.full_ticks = 0   # ticks that took a full snapshot (tests, bench)
        self._deferred: list = []   # a declaration's work the HANG line does not need: after the hold
        self._pauses = 0                      # the collector's own pauses not yet said (paused())
        self._pause_said_at = float("-inf")
        self.failures = FailureWatch(config, state, events, registry,
                                     lambda: any(e.killed for e in self.declared))   # FAILED (failures.py)
        self.hang = HangPass(config, state, self.pacer, self)   # HANG, SILENT (hang_pass.py)
        self.idle = IdlePass(config, state, self.pacer, self)
        self.scheduler = Scheduler(all_passes(self, self.hang, self.idle))

    @property
    def _full_at(self) -> float:
        """When the slow pass (and so a full snapshot) is next due; tests and
        the bench set it (0.0: at the next tick)."""
        return self.scheduler.next_at("slow")

    @_full_at.setter
    def _full_at(self, at: float) -> None:
        self.scheduler.set_next("slow", at)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="collector-watchdog", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._side is not None:
            self._side.join(timeout=10)
        self._no_throw(self.failures.final, "judging a failure", time.monotonic(), time.time())
        for event in self._events.events():
            self._no_throw(event.flush, "writing hang.json", None, True)
        if self.timelines is not None:
            self._no_throw(self.timelines.close, "writing open timelines")

    def _loop(self) -> None:
        said = float("-inf")
        interval = self.config.eval_interval_s
        paused_after = max(PAUSED_MIN_S, min(self.config.silent_after_s, self.config.hang_timeout_s) / 2)
        waited_from = time.monotonic()
        while not self._stop.wait(interval):
            began, cpu, ran = time.monotonic(), time.thread_time(), time.process_time()
            late = began - waited_from - interval
            if late > paused_after:
                self._no_throw(self.paused, "forgiving the collector's own pause", late, began)
            self._no_throw(self.tick, "evaluating the hang rules")
            took = time.monotonic() - began
            # A stop that lands inside a tick shows as a long tick in which no
            # thread of the process ran (one that waited for the GIL did not
            # wait on nothing): the same pause, after the tick.
            idle = took - (time.process_time() - ran)
            if idle > paused_after:
                self._no_throw(self.paused, "forgiving the collector's own pause", idle, time.monotonic())
            declared = self._line_at >= began
            # The HANG path itself is late: say so, at most once a minute, and
            # always for the tick that said a HANG line (its delay is the HANG's).
            if took > SLOW_TICK_S and (declared or began - said > 60):
                said = began
                # Its own CPU against the wall time tells a tick that waited
                # for the GIL from one that had too much to do.
                ahead = self.hang.declared_ahead
                line = (f"; its HANG line {self._line_at - began:.1f} s into it, {self._line_cpu - cpu:.1f} s of "
                        f"it on this thread's CPU" + (f", its verdict judged {ahead:.1f} s ahead" if ahead else "")
                        if declared else "")
                log.warning("a watchdog tick took %.1f s, %.1f s of it on its thread's CPU (%d agents, %d ranks; "
                            "%.1f s behind%s)", took, time.thread_time() - cpu, *self.state.size, self.pacer.lag_s,
                            line)
            waited_from = time.monotonic()

    def paused(self, paused_s: float, now: float) -> None:
        """The watchdog woke ``paused_s`` later than it asked to: the whole
        collector was stopped (SIGSTOP, a frozen VM) or got no CPU, so the
        reports sent meanwhile wait unread. That time is taken out of every
        agent's silence and every rank's age (JobState.forgive_pause), and
        the backlog it leaves is not overload: nobody is blamed for our own
        pause. Said at most once a minute (a starved host pauses it often)."""
        self.state.forgive_pause(paused_s, now)
        self.hang.detector.forgive(paused_s)
        self.pacer.forgive(now + FORGIVE_S + paused_s)
        self._pauses += 1
        if now - self._pause_said_at >= 60:
            more = f"; {self._pauses - 1} other pause(s) since the last such line" if self._pauses > 1 else ""
            log.warning("the collector itself did not run for %.1f s (stopped, or no CPU): that time is not counted "
                        "against any agent or rank%s", paused_s, more)
            self._pause_said_at, self._pauses = now, 0

    @staticmethod
    def _no_throw(fn, doing: str, *args) -> None:
        try:
            fn(*args)
        except Exception:  # the watchdog must outlive any one bad tick
            log.exception("collector watchdog: error while %s; continuing", doing)

    def tick(self, now: float | None = None, now_unix: float | None = None) -> None:
        """One tick at monotonic ``now`` (wall clock ``now_unix``): the due passes."""
        now = time.monotonic() if now is None else now
        unix = time.time() if now_unix is None else now_unix
        self.scheduler.run(now, unix, self._take_snapshot)

    def _take_snapshot(self, now: float) -> Snapshot:
        self.full_ticks += 1
        return self.state.snapshot(now)

    @contextlib.contextmanager
    def ingest_held(self, hold: bool):
        """The one place ingest is held: while ``hold``, the streams read no
        report (the registry's gate), the perf path's pass waits, GC pauses
        and this thread keeps the GIL, so the rules judge a stable view and
        the line and commands go out at once. After: the declarations' work
        the line does not need (hang.json), ingest going again, and the
        backlog the hold made is forgiven, not taken for overload."""
        if hold:
            self._registry.hold(True)
            self._holding = True   # the perf path waits too (GilShare)
            held_at = time.monotonic()
        try:
            with gc_paused(hold), gil_kept(hold):
                yield
        finally:
            if hold:
                self._registry.hold(False)
                self._holding = False
            self.run_deferred()   # hang.json, after the line and the commands, ingest going again
            if hold:
                # The reports held, and those slowed by hang.json's build
                # after the line, are late by our choice, not overload: the
                # backlog drains in about as long again at a busy collector.
                done = time.monotonic()
                self.pacer.forgive(done + FORGIVE_S + 2 * (done - held_at))

    def events_tick(self, now: float) -> None:
        """hang.json rewrites and the lines and kills that wait on an event's answers."""
        for event in self._events.events():
            self._no_throw(event.flush, "writing hang.json", now)
            if not event.stacks_said:
                self._no_throw(self._maybe_say_stacks, "saying the stacks are in", event, now)
        for event in self.declared[-MAX_EVENTS_KEPT:]:   # HANG events only: a SLOW one kills nothing
            if event.last_words_expected and not event.last_words_said:
                self._no_throw(self._maybe_say_last_words, "saying the last words are in", event, now)
            if self.config.hang_action in KILLING and not event.killed:
                self._no_throw(self._maybe_kill, "sending KillWorkers", event, now)

    def hang_active(self) -> bool:
        """A declared hang (or idle stall) lasts: the detector is disarmed until progress resumes."""
        return not self.hang.detector.armed or not self.idle.detector.armed

    def hang_marks(self) -> dict[int, str]:
        """While a declared hang lasts, rank -> "hung" (in the stuck op) or
        "culprit" (the ranks the others wait for), as its HANG line names
        them; else empty (``xpu-diag top`` marks its rows with it)."""
        return self._marks if self.hang_active() else {}

    def run_deferred(self) -> None:
        """The declarations' work the line does not need (hang.json), after ingest's hold."""
        work, self._deferred = self._deferred, []
        with gc_paused(bool(work)):
            for fn, doing in work:
                self._no_throw(fn, doing)

    def side_work(self, snap: Snapshot, unix: float) -> None:
        """SLOW judgements and GPU lines: reading every rank's perf window costs
        seconds at 100,000 ranks, so a running watchdog hands them to a thread
        of their own (skipped while the last pass still runs) and its tick goes
        on with the hang path. Inline when tick() is driven directly (tests)."""
        def work():
            self._no_throw(self.slow.tick, "judging slow ranks", snap, unix, self.pacer.overloaded,
                           GilShare(PERF_PATH_SHARE, lambda: self._holding))
            self._no_throw(self.gpus.tick, "looking at the ranks' GPUs", snap)

        if self._thread is None:
            work()
            return
        if self._side is not None and self._side.is_alive():
            return
        self._side = threading.Thread(target=work, name="collector-perf-path", daemon=True)
        self._side.start()

    def declare(self, findings, snap: Snapshot, now_unix: float, stall=None) -> None:
        """A hang event: hung ops in ``findings``, or the idle ``stall``."""
        event_id, path = self._events.reserve_dir(now_unix)
        # The line first, hang.json's per-rank rows after it (a second at
        # 100,000 ranks, docs/collector.md "Scale"): the line needs none of them.
        try:
            dropped = self.state.dropped()
        except Exception:   # the drops pass says why; the verdict goes out without its drops clause
            dropped = {}
        refused = self._events.refused.get(event_id, "")
        doc = verdict.declaration(findings, snap, job_id=self.config.job_id, event_id=event_id, event_dir=path,
                                  declared_unix=now_unix, hang_timeout_s=self.config.hang_timeout_s,
                                  dropped=dropped, refused=refused, stall=stall,
                                  idle_timeout_s=self.config.idle_timeout_s)
        silent = set(findings.silent_ranks)
        expected = {r for r in snap.ranks if r < findings.world_size and r not in silent}   # no entry made
        event = self._events.open_event(event_id, path, doc, expected, snap.now)
        event.refused = refused
        # Who is asked for last words, set before any command goes out: the
        # commands are pushed at once, and an answer may come back at once.
        event.last_words_expected = set(self._registry.node_ranks())
        self.declared.append(event)
        # Ask for stacks first: the stalled state is what we want on record,
        # and hang.json of a 16k-rank job takes a few hundred ms to write.
        sent = self._registry.broadcast(pb.Command(dump_stacks=pb.DumpStacks(event_id=event_id)))
        # Last words in parallel with the stacks (the agents persist on a
        # thread of their own): the kill waits for both, so the restart is
        # not delayed by their sum. Every HANG, whatever the action: under
        # "report" the user kills the job by hand, and the store dies with it.
        self._registry.broadcast(pb.Command(persist_last_words=pb.PersistLastWords(event_id=event_id)))
        if self.timelines is not None:   # the agents answer it on a thread of its own
            self._no_throw(self.timelines.for_event, "asking for timelines", event_id, path, snap.now)
        self.say(doc["verdict"])
        self._marks = {**dict.fromkeys(doc.get("hung_ranks") or (), "hung"),
                       **dict.fromkeys(doc.get("culprits") or (), "culprit")}
        self._line_at, self._line_cpu = time.monotonic(), time.thread_time()
        log.info("event %s: asked %d agent(s) for stacks", event_id, sent)
        self._deferred.append((lambda: self._write_document(event, doc, findings, snap), "writing hang.json"))

    @staticmethod
    def _write_document(event: HangEvent, doc: dict, findings, snap: Snapshot) -> None:
        """hang.json's per-rank rows and their GPUs, then the file (temp + rename)."""
        try:
            verdict.complete(doc, findings, snap)
        finally:   # a document without its rows rather than none
            event.flush(snap.now, force=True)

    def _maybe_say_stacks(self, event: HangEvent, now: float) -> None:
        """Once per event: the stacks are all in, or the dump deadline passed."""
        if event.refused or event.dumps_in(now) or now - event.declared >= self.config.dump_timeout_s:
            event.stacks_said = True
            self.say(event.stacks_line())

    def _maybe_say_last_words(self, event: HangEvent, now: float) -> None:
        if event.last_words_in() or now - event.declared >= self.config.last_words_timeout_s:
            event.last_words_said = True
            if event.last_words_worth_saying(self.config.hang_action == "recover"):
                self.say(event.last_words_line())
            else:
                log.debug("%s", event.last_words_line())

    def _maybe_kill(self, event: HangEvent, now: float) -> None:
        """Kill once the stacks AND the last words are in, each bounded by its deadline."""
        age = now - event.declared
        stacks = event.dumps_in(now) or age >= self.config.dump_timeout_s
        words = event.last_words_in() or age >= self.config.last_words_timeout_s
        if not (stacks and words):
            return
        event.killed = True
        action = self.config.hang_action
        kill = pb.KillWorkers(reason=f"hang {event.event_id}: --hang-action {action}")
        if action == "recover":
            nodes = self._registry.node_ranks()
            kill.recover, kill.declared_unix, kill.nodes = True, event.declared_unix, len(nodes)
            kill.leave_out_nodes.extend(blamed_nodes(event.path, self.state.snapshot(now), nodes))
        sent = self._registry.broadcast(pb.Command(kill_workers=kill))
        waited = [what for what, done in (("stacks", event.dumps_in(now)), ("last words", event.last_words_in()))
                  if not done]
        log.warning("event %s: %s; sent KillWorkers to %d agent(s)%s%s", event.event_id,
                    f"deadline passed without all {' and '.join(waited)}" if waited else "stacks and last words are in",
                    sent, "" if sent else " (none connected)",
                    f"; node(s) {fold(list(kill.leave_out_nodes))} blamed on hardware are left out"
                    if kill.leave_out_nodes else "")

    def say(self, line: str) -> None:
        print(line, file=self._out or sys.stderr, flush=True)


class GilShare:
    """Called between chunks of a long pass on a side thread: sleeps (and so
    lets the GIL go) long enough that the pass works at most ``share`` of the
    time, and not at all while ``wait_while()`` (a hang being judged). Chunks
    shorter than 10 ms in all never sleep: small jobs see no delay."""

    def __init__(self, share: float, wait_while=lambda: False) -> None:
        self._rest = (1 - share) / share
        self._wait_while = wait_while
        self._since = time.perf_counter()

    def __call__(self) -> None:
        worked = time.perf_counter() - self._since
        if worked < 0.01 and not self._wait_while():
            return
        if worked >= 0.01:
            time.sleep(worked * self._rest)
        while self._wait_while():
            time.sleep(0.05)
        self._since = time.perf_counter()


KEEP_GIL_S = 0.05


@contextlib.contextmanager
def gc_paused(pause: bool = True):
    """No cyclic GC inside (a declaration's seconds at most): at 100,000 ranks
    its full passes over the state's objects took a third of the rules' time
    (docs/collector.md "Scale"). What they leave is collected after."""
    collecting = pause and gc.isenabled()
    if collecting:
        gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


@contextlib.contextmanager
def gil_kept(keep: bool = True):
    """While ingest holds for a declaration, this thread keeps the GIL ten
    times longer before the interpreter hands it over: the gRPC threads and
    the loop wake hundreds of times a second at 12,500 agents (each link's
    read, each stream's writer), and at the default 5 ms slice they took the
    line from 0.4 s into the tick in-process to 1.4-1.7 s on a busy one."""
    if not keep:
        yield
        return
    before = sys.getswitchinterval()
    sys.setswitchinterval(KEEP_GIL_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def blamed_nodes(event_path: str, snap: Snapshot, connected: list[int]) -> list[int]:
    """Connected nodes that a fault list next to hang.json (``faults.json``,
    the fault-list format of diag/faultlist.py) names: the hang is blamed on
    their hardware, so --hang-action recover leaves them out of the restart.
    An entry that carries a node rank (the collector's own faults.json
    always does) names that node only: hostnames repeat (two launchers on one
    host, clusters that name every node alike). An entry without one is
    matched by hostname. No file, or an unreadable one: none. The file lies
    under a shared --timeline-path: it is read through safe_dirs, so another
    user's link or file on the way is refused (one line), never read."""
    path = os.path.join(event_path, dumpnames.FAULTS_JSON)
    try:
        raw = safe_dirs.read_file(path)
        if raw is None:
            return []
        faults = faultlist.parse(raw.decode("utf-8"), path)
    except (faultlist.FaultListError, safe_dirs.Unwritable) as exc:
        log.warning("not leaving any node out: %s", exc)
        return []
    except UnicodeDecodeError:
        log.warning("not leaving any node out: fault list %s: not UTF-8 text", path)
        return []
    out = []
    for node in connected:
        agent = snap.agents.get(node)
        hostname = agent.hostname if agent is not None else ""
        if any(e.node_rank == node if e.node_rank is not None else (hostname and hostname in (e.hostname, e.node))
               for e in faults.entries):
            out.append(node)
    return sorted(out)
