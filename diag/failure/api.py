"""Contracts of the FAILED verdict (docs/collector.md, "On a failure").

A job failed when a rank exited non-zero or by a signal, or exited while its
peers still waited for it in a collective. The verdict names the rank that
failed first and how, what the progress records show (a divergence at a seq,
or a rank that left with fewer ops than its peers), and, where torchrun's
"Root Cause" names another rank, which one the records blame and why.
"""

from __future__ import annotations

import dataclasses
import re
import signal as _signal

# Signals torchrun sends the workers it stops (SIGTERM, then SIGKILL after
# its grace): a rank ended by one of them after another rank failed was
# stopped, it did not fail on its own.
STOP_SIGNALS = (int(_signal.SIGTERM), int(_signal.SIGKILL))
ERROR_CHARS = 120   # the exception's last line, as the FAILED line shows it
# gloo's and c10d's "[/path/pair.cc:553] " before the message: where in C++, not what
_SOURCE_AT = re.compile(r"\[[^\]]*\.(?:cc|cpp|c|h|hpp):\d+\] ?")


@dataclasses.dataclass(frozen=True)
class RankExit:
    """How one rank's worker ended. ``exit_code`` None: not known yet (the
    agent saw the process gone, torchrun has not said); ``seen_unix`` when
    the agent saw it gone (0: unknown)."""

    rank: int
    exit_code: int | None = None
    signal: int = 0
    error: str = ""
    oom_kill: bool = False
    seen_unix: float = 0.0
    torchrun_root: bool = False
    stopped: bool = False

    @property
    def known(self) -> bool:
        return self.exit_code is not None or self.signal != 0

    @property
    def failed(self) -> bool:
        """Ended non-zero or by a signal (known statuses only)."""
        return self.signal != 0 or bool(self.exit_code)

    def how(self, error: bool = True) -> str:
        """``killed by SIGABRT``, ``exit 1 (RuntimeError: ...)``, ``killed by
        SIGKILL (OOM kill)``; ``exited (status not known)``."""
        if self.signal:
            try:
                name = _signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            text = f"killed by {name}" + (" (OOM kill: the cgroup's memory.events counted it)" if self.oom_kill else "")
        elif self.exit_code is not None:
            text = f"exit {self.exit_code}"
        else:
            return "exited (status not known)"
        said = short_error(self.error) if error else ""
        return f"{text} ({said})" if said else text


def short_error(error: str) -> str:
    """The last non-empty line of an exception's text, cut to ERROR_CHARS."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return ""
    last = _SOURCE_AT.sub("", lines[-1])
    return last if len(last) <= ERROR_CHARS else last[:ERROR_CHARS - 3] + "..."


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What the progress records show. ``kind``: ``"diverged"`` (the members
    of a group ran different ops at ``seq``) or ``"left_early"`` (``ranks``
    exited having started ``seq`` ops of the group while ``peers`` were in a
    later one, ``peers_seq``). ``summary`` is the clause of the FAILED line;
    ``culprits`` the ranks it blames; ``detail`` what failure.json keeps."""

    kind: str
    summary: str
    culprits: tuple[int, ...]
    comm_id: int
    group: str
    seq: int
    detail: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Failure:
    """The verdict. ``first``: the rank that failed first (None: no status
    and no evidence orders them); ``then``: the ranks that failed after it,
    each with how; ``stopped``: ranks torchrun stopped once one had failed."""

    first: RankExit | None
    culprits: tuple[int, ...]
    evidence: Evidence | None
    then: tuple[RankExit, ...] = ()
    stopped: tuple[int, ...] = ()
    root_note: str = ""
    torchrun_root: int | None = None
