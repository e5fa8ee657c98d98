"""Keep node 0's collector running for the job's life.

A collector that dies (SIGKILL, the OOM killer) took hang detection with it:
the agents only retried, and a stall later in the job was never named. The
keeper watches the process and starts it again with the same token, on the
same address (the one the agents dial) and with the same directory for its
address file. Nothing else needs carrying over: the collector keeps its
view in memory only, and every agent report carries what the hang rules
judge (each rank's oldest op in flight and its age, on the agent's own
clock), so the new collector names a stall that began before it started.
The agents reconnect by themselves (their backoff is at most 10 s).

A few tries an outage, with backoff, and a few restarts a job: a collector
that cannot start again (its port taken, its settings refused) or keeps
dying leaves one loud line that hang detection is off; training goes on.
"""

from __future__ import annotations

import signal
import subprocess
import threading

from diag.launcher import collector_proc

TRIES = 3                 # starts an outage, each after the next delay
RETRY_DELAYS_S = (0.5, 1.0, 2.0)
MAX_RESTARTS = 5          # outages a job; then it stays off (a collector that keeps dying)
POLL_S = 0.2


def how_it_ended(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"exited with status {status}"


class CollectorKeeper:
    """``start()`` the collector (in the calling thread, which must live as
    long as the launcher: the collector gets SIGTERM when the thread that
    started it ends), then a thread of its own watches and restarts it;
    ``stop()`` ends both. ``address`` is where it serves."""

    def __init__(self, config, token: str, workdir: str, env: dict, say) -> None:
        self._config, self._token, self._workdir, self._env, self._say = config, token, workdir, env, say
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self.restarts = 0
        self.off = False            # given up: hang detection is off
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """The first start; raises collector_proc.CollectorError as ``collector_proc.start``."""
        self.proc, self.address = collector_proc.start(self._config, self._token, self._workdir, self._env)
        self._thread = threading.Thread(target=self._watch, name="xpu-diag-collector-keeper", daemon=True)
        self._thread.start()
        return self.address

    def stop(self) -> None:
        """Stop watching, then the collector (SIGTERM, then SIGKILL). Never raises."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.proc is not None:
            collector_proc.stop(self.proc)

    def _watch(self) -> None:
        # Restarted collectors are this thread's children: it must not end
        # before stop() (PR_SET_PDEATHSIG fires on the thread's end).
        try:
            while not self._stopping.wait(POLL_S):
                if self.off or self.proc.poll() is None:
                    continue
                self._restart(self.proc)
        except Exception as exc:   # a keeper that dies must say so, once: nothing else watches
            self.off = True
            self._say(f"HANG DETECTION IS OFF: the collector's keeper failed ({exc!r}); training goes on")
        self._stopping.wait()

    def _restart(self, dead: subprocess.Popen) -> None:
        how = how_it_ended(dead.returncode)
        if self.restarts >= MAX_RESTARTS:
            self._give_up(f"the collector (pid {dead.pid}) {how}, its {MAX_RESTARTS + 1}th end in this job")
            return
        self._say(f"the collector (pid {dead.pid}) {how}; starting it again on {self.address} "
                  f"with the same token")
        why = ""
        for delay in RETRY_DELAYS_S[:TRIES]:
            if self._stopping.wait(delay):
                return
            try:
                self.proc, _ = collector_proc.start(self._config, self._token, self._workdir, self._env,
                                                    listen=self.address, stopping=self._stopping.is_set)
            except collector_proc.CollectorError as exc:
                why = str(exc)
                continue
            self.restarts += 1
            self._say(f"the collector is back on {self.address} (pid {self.proc.pid}); the agents reconnect "
                      f"to it and hang detection goes on")
            return
        if not self._stopping.is_set():
            self._give_up(f"the collector (pid {dead.pid}) {how} and did not start again in {TRIES} tries "
                          f"({why})")

    def _give_up(self, why: str) -> None:
        self.off = True
        self._say(f"HANG DETECTION IS OFF for the rest of this job: {why}; training goes on, unwatched "
                  f"(stalls will not be named; see docs/launcher.md)")
