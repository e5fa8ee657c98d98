"""The launcher's closing summary and its exit status (docs/launcher.md "Exit status").

torchrun ends a failed job with its own block, which blames the first rank
that died: after ``--hang-action kill`` that is a rank xpu-diag killed
("exitcode -9"), not the one the verdict named. So the launcher's last
lines are its own: the events of this run (HANG, SLOW), their culprits, where
their stacks are, and what the exit status means.

Events are learned two ways: the agent hears every DumpStacks and KillWorkers
the collector sends (every node), and the node that ran the collector reads
the event documents it wrote under the timeline path (a SLOW report asks
for no stacks, so only the documents know of it).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import threading
import time

from diag.common import dumpnames, safe_dirs
from diag.common.ranks import fold

EXIT_HANG_KILLED = 3       # the workers were ended by xpu-diag because of a hang (--hang-action kill/recover)
MAX_EVENTS_LISTED = 5
MAX_DOC_BYTES = 64 << 20   # hang.json of 100,000 ranks is ~25 MB; a bigger file is not ours
PREFIX = "xpu-diag: "


class Closing:
    """Filled while the job runs (``note`` is called on the agent's connection
    thread), read once at the end (``finish``)."""

    def __init__(self, config, say=None) -> None:
        self._config = config
        self._say = say or _say
        self._lock = threading.Lock()
        self.started_unix: float | None = None    # set when torchrun starts: no summary before
        self.event_ids: list[str] = []            # from DumpStacks, in arrival order
        self.kills: list[str] = []                # KillWorkers reasons
        self.failures: dict[int, int] = {}        # global rank -> exit code, torchrun's last round
        self.detection_off = ""                   # why there was no hang detection, if there was none
        self.unwatched = ""                       # this node's ranks never watched, and why (watched.py)

    def start(self) -> None:
        self.started_unix = time.time()

    def note(self, command) -> None:
        """An agent command; never raises (it runs on the agent's thread)."""
        try:
            which = command.WhichOneof("command")
            with self._lock:
                if which == "dump_stacks" and command.dump_stacks.event_id not in self.event_ids:
                    self.event_ids.append(command.dump_stacks.event_id)
                elif which == "kill_workers":
                    self.kills.append(command.kill_workers.reason)
        except Exception:
            pass

    def noting(self, submit):
        """``submit`` (the agent's command entry) that notes each command first."""
        def submit_noted(command):
            self.note(command)
            return submit(command)
        return submit_noted

    # -- the end --------------------------------------------------------------
    def finish(self, status: int) -> int:
        """Say the summary and return the exit status; ``status`` unchanged
        when no worker was started (a usage error said its own line)."""
        if self.started_unix is None:
            return status
        try:
            lines, status = self.summary(status)
        except Exception as exc:   # the summary never changes how the job ends
            lines = [f"could not build the closing summary ({exc!r})"]
        for line in lines:
            self._say(line)
        return status

    def summary(self, status: int) -> tuple[list[str], int]:
        events = self.events()
        failed = [e for e in events if e.kind == "failure"]   # at most one: the collector judges once a run
        events = [e for e in events if e.kind != "failure"]
        lines = [event_line(e) for e in events[:MAX_EVENTS_LISTED]]
        if len(events) > MAX_EVENTS_LISTED:
            lines.append(f"{len(events) - MAX_EVENTS_LISTED} more event(s) under {self._job_dir()}/")
        hangs = sum(1 for e in events if e.kind == "hang")
        slows = len(events) - hangs
        if not events:
            head = (f"no hang detection in this run ({self.detection_off})" if self.detection_off
                    else "no hang or slow rank seen" + (" among the ranks watched" if self.unwatched else ""))
        else:
            head = ", ".join(filter(None, [_count(hangs, "hang"), _count(slows, "slow-rank event")])) + " in this run"
        killed = self.killed_by_us(status)
        # The FAILED line only for the job's own failure: not after a success,
        # not after our own kill, not when the launcher was stopped (Ctrl-C).
        said = failed and status == 1 and not killed
        if not (said and not events):   # the FAILED line says more than "no hang or slow rank seen"
            lines.insert(0, head)
        if said:
            lines.append(failed[-1].verdict or f"FAILED: the verdict is in the collector's log (node 0); "
                                                f"details in {failed[-1].path}/")
        if killed:
            status = EXIT_HANG_KILLED
            culprit = next((e.culprit_phrase() for e in reversed(events) if e.kind == "hang" and e.culprits), "")
            lines.append(f"the workers were stopped by xpu-diag (SIGKILL, --hang-action {self._config.hang_action})"
                         f" because of the hang{' (' + culprit + ')' if culprit else ''}: torchrun's "
                         f"'exitcode -9' above is that kill, not a crash of {killed}")
        if self.unwatched:
            lines.append(self.unwatched)
        lines.append(f"exit {status} ({meaning(status, bool(killed))})")
        return lines, status

    def killed_by_us(self, status: int) -> str:
        """The ranks torchrun reported dead by our SIGKILL ("rank(s) 0-3"), or
        "" when the job did not end on our kill (a restart that then
        succeeded, a crash of its own)."""
        if status == 0 or not self.kills or not self.failures:
            return ""
        if any(code != -signal.SIGKILL for code in self.failures.values()):
            return ""
        return f"rank(s) {fold(sorted(self.failures))}"

    def events(self) -> list["Event"]:
        """This run's events: the documents on disk (node 0), then any the
        agent heard of whose document this node cannot read."""
        self._refused = ""
        found = {e.event_id: e for e in self._from_disk()}
        with self._lock:
            heard = list(self.event_ids)
        for event_id in heard:
            if event_id not in found:
                found[event_id] = Event(event_id, "hang", "", [], os.path.join(self._job_dir(), event_id))
                found[event_id].refused = self._refused   # not where the stacks are: refused, never written
        return sorted(found.values(), key=lambda e: e.event_id)

    def _job_dir(self) -> str:
        return os.path.join(self._config.timeline_path, self._config.job_id)

    def _from_disk(self) -> list["Event"]:
        # Under a shared --timeline-path: walked through safe_dirs, so another
        # user's link or directory at the job's or an event's name is refused
        # (one line) and lends the summary no verdict of theirs.
        job_dir = self._job_dir()
        try:
            fd = safe_dirs.open_dir(job_dir, read=True)
        except FileNotFoundError:
            return []
        except safe_dirs.Unwritable as exc:
            safe_dirs.say_once(self._say, exc)
            self._refused = str(exc).removesuffix("; nothing there is read")
            return []
        out = []
        try:
            for name in os.listdir(fd):
                event = self._event_on_disk(fd, job_dir, name)
                if event is not None:
                    out.append(event)
        finally:
            os.close(fd)
        return out

    def _event_on_disk(self, job_fd: int, job_dir: str, name: str) -> "Event | None":
        try:
            efd = safe_dirs.open_dir_in(job_fd, job_dir, name)
        except OSError as exc:   # not a directory (collector.json), gone; a refusal is said
            if isinstance(exc, safe_dirs.Unwritable) and exc.errno == errno.EPERM:
                safe_dirs.say_once(self._say, exc)
            return None
        try:
            for doc_name, kind in ((dumpnames.HANG_JSON, "hang"), (dumpnames.SLOW_JSON, "slow"),
                                   (dumpnames.FAILURE_JSON, "failure")):
                doc = _read_doc(efd, os.path.join(job_dir, name), doc_name, self._say)
                if doc is None or doc.get("job_id") not in (None, self._config.job_id):
                    continue
                declared = doc.get("declared_unix")
                if not isinstance(declared, (int, float)) or declared < self.started_unix - 1.0:
                    continue   # an earlier run's event under the same job id
                culprits = [r for r in doc.get("culprits") or [] if isinstance(r, int)] if kind != "slow" \
                    else [r for r in doc.get("ranks") or [] if isinstance(r, int)]
                return Event(name, kind, str(doc.get("verdict") or ""), culprits, os.path.join(job_dir, name))
        finally:
            os.close(efd)
        return None


class Event:
    def __init__(self, event_id: str, kind: str, verdict: str, culprits: list[int], path: str) -> None:
        self.event_id, self.kind, self.verdict, self.culprits, self.path = event_id, kind, verdict, culprits, path
        self.refused = ""   # why its directory was refused (another user's): its files are not there

    def culprit_phrase(self) -> str:
        return f"culprit rank(s) {fold(self.culprits)}" if self.culprits else ""

    def what(self) -> str:
        """The verdict without its tag and its trailing "stacks in"/"details in" clause."""
        text = self.verdict
        for tag in ("HANG: ", "SLOW: "):
            if text.startswith(tag):
                text = text[len(tag):]
        for tail in ("; stacks in ", "; details in ", "; stacks not written ("):
            if tail in text:
                text = text[:text.rindex(tail)]
        return text


def event_line(event: Event) -> str:
    what = event.what() or "its verdict is in the collector's log (node 0)"
    culprit = f"; {event.culprit_phrase()}" if event.culprit_phrase() else ""
    where = "stacks" if event.kind == "hang" else "details"
    if event.refused:
        return f"{event.kind.upper()} event {event.event_id}: {what}{culprit}; {where} not written ({event.refused})"
    return (f"{event.kind.upper()} event {event.event_id}: {what}{culprit}; {where} in {event.path}/ "
            f"(stack-viewer --path {event.path})")


def _count(n: int, what: str) -> str:
    return "" if not n else f"1 {what}" if n == 1 else f"{n} {what}s"


def meaning(status: int, killed: bool) -> str:
    if killed:
        return "stopped by xpu-diag because of a hang"
    if status == 0:
        return "the job succeeded"
    if status > 128:
        try:
            return f"stopped by {signal.Signals(status - 128).name}"
        except ValueError:
            return f"stopped by signal {status - 128}"
    if status == 75:
        return "this node left the job (docs/recovery.md)"
    if status == 2:
        return "refused to run (the line above)"
    return "the job's own failure, torchrun's summary above"


def _say(line: str) -> None:
    sys.stderr.write(PREFIX + line + "\n")
    sys.stderr.flush()


def _read_doc(dir_fd: int, directory: str, name: str, say) -> dict | None:
    try:
        data = safe_dirs.read_in(dir_fd, directory, name, MAX_DOC_BYTES)
    except safe_dirs.Unwritable as exc:
        if exc.errno == errno.EPERM:   # another user's: said once; too big or unreadable: not ours
            safe_dirs.say_once(say, exc)
        return None
    if data is None:
        return None
    try:
        doc = json.loads(data)
        return doc if isinstance(doc, dict) else None
    except ValueError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read(MAX_DOC_BYTES + 1)
        if len(data) > MAX_DOC_BYTES:
            return None
        doc = json.loads(data)
        return doc if isinstance(doc, dict) else None
    except (OSError, ValueError):
        return None
