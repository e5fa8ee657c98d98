"""Drains the node's progress regions into a NodeState.

Only regions whose header pid is a live descendant of the launcher are read:
a region file cannot make the agent report, trace or kill anyone else's
process. Regions of exited workers are read one last time, then removed.
"""

from __future__ import annotations

import os

from diag.agent import procs
from diag.agent.links import LinkTables
from diag.agent.state import NodeState
from diag.records import reader


class Sampler(procs.WorkerFiles):
    def __init__(self, shm_dir: str, state: NodeState, root_pid: int, log,
                 is_alive=procs.is_alive, is_descendant=procs.is_descendant):
        # ``state`` feeds the perf window and the timeline ring in turn.
        super().__init__(shm_dir, state, root_pid, log, is_alive, is_descendant)
        self._readers: dict[str, reader.RegionReader] = {}
        self._said: dict[str, set[str]] = {}   # region -> anomalies already said
        self._skipped: dict[str, int] = {}     # region skipped mid-run -> its live worker's pid
        self.busiest = 0.0   # fraction of a ring drained by the last pass
        # The NCCL profiler plugin's tables (docs/link.md), same pid rules as the regions.
        self.links = LinkTables(shm_dir, state, root_pid, log, is_alive, is_descendant)

    def sample(self) -> float:
        """One pass: new regions, new records, exited workers; returns the
        fullest ring's backlog, as a fraction of its capacity. Never raises for one bad region; the
        caller's loop catches the rest."""
        self.busiest = 0.0
        if not os.path.isdir(self.shm_dir):
            return 0.0
        found = reader.scan(self.shm_dir, {**self._readers,
                                           **{p: None for p in self._refused}})
        for path, err in found.errors.items():
            self._refused.add(path)
            why = err if err.startswith(path) else f"{path}: {err}"   # said once: now refused
            self.log(f"skipping region {why}; its rank is judged without it")
        for path, rdr in found.readers.items():
            if rdr is None or path in self._readers:
                continue
            self._adopt(path, rdr)
        for path, rdr in list(self._readers.items()):
            self._drain(path, rdr)
        self._reap_skipped()
        try:
            self.links.sample()
        except Exception as exc:   # an extra: the progress path it shares this loop with goes on
            self.log(f"link tables: {exc!r}")
        return self.busiest

    def _adopt(self, path: str, rdr: reader.RegionReader) -> None:
        pid = rdr.header.pid
        if not self._is_descendant(pid, self.root_pid):
            self._refused.add(path)
            rdr.close()
            # A pid that is gone is most likely a worker that exited before this
            # first look (a fast failure): unverifiable, so unread, but no warning.
            if self._is_alive(pid):
                self.log(f"ignoring region {path}: pid {pid} is not one of this launcher's "
                         f"workers")
            return
        self._readers[path] = rdr
        self.state.add_region(path, rdr.header)

    def _drain(self, path: str, rdr: reader.RegionReader) -> None:
        alive = self._is_alive(rdr.header.pid)
        try:
            records = rdr.poll()
            self.busiest = max(self.busiest, rdr.backlog / rdr.header.capacity)
            self._say_anomalies(path, rdr)
            self.state.apply(path, records)
            self.state.set_dropped(path, rdr.dropped)
        except Exception as exc:   # one region's garbage never stops the others' pass
            self.log(f"skipping region {path}: reading it failed: {exc}; its rank is "
                     f"judged without it")
            self._refused.add(path)
            self._forget(path, rdr)
            if alive:   # its worker's exit is still seen (_reap_skipped)
                self._skipped[path] = rdr.header.pid
                return
        else:
            if alive:
                return
            self._forget(path, rdr)
        # Read after the death check, so no record written before exit is lost.
        self.state.mark_exited(rdr.header.pid)
        _unlink(path)

    def _forget(self, path: str, rdr: reader.RegionReader) -> None:
        self.state.remove_region(path)
        del self._readers[path]
        self._said.pop(path, None)
        rdr.close()

    def _reap_skipped(self) -> None:
        """Workers whose region was skipped mid-run still exit as ranks."""
        for path, pid in list(self._skipped.items()):
            if not self._is_alive(pid):
                del self._skipped[path]
                self.state.mark_exited(pid)
                _unlink(path)

    def _say_anomalies(self, path: str, rdr: reader.RegionReader) -> None:
        """Index jumps and garbage records, each said once per region."""
        said = self._said.setdefault(path, set())
        if rdr.index_problem and "index" not in said:
            said.add("index")
            self.log(f"region {path}: {rdr.index_problem} ({rdr.lost} records lost); "
                     f"a worker wrote over its header")
        if rdr.bad_records and "records" not in said:
            said.add("records")
            self.log(f"region {path}: skipping records with an event or kind no producer "
                     f"writes ({rdr.bad_records} so far)")

    def close(self) -> None:
        self.links.close()
        for rdr in self._readers.values():
            rdr.close()
        self._readers.clear()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
