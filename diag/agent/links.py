"""The NCCL profiler plugin's link tables on this node (docs/link.md).

Each worker that loaded the plugin writes ``link-r<rank>-p<pid>.tab`` into the
shm dir. A table is adopted only when its pid is a live descendant of the
launcher (as the progress regions are), and handed to the rank's state, which
reads it only when it reports an op stuck: a healthy job's reports carry no
link data, and a stuck one only its entries in flight (analysis.worth_sending).
Tables of exited workers are closed and removed.
"""

from __future__ import annotations

import os

from diag.agent import procs
from diag.link import analysis, wire
from diag.link import table as link_table
from diag.link.api import LinkTableError

MAX_ENTRIES_SENT = 512   # per rank and report: a ring over 64 channels has 256


class LinkTables(procs.WorkerFiles):
    def __init__(self, shm_dir: str, state, root_pid: int, log, is_alive=procs.is_alive,
                 is_descendant=procs.is_descendant):
        super().__init__(shm_dir, state, root_pid, log, is_alive, is_descendant)
        self._tables: dict[str, link_table.LinkTable] = {}

    def sample(self) -> None:
        """Adopt new tables, attach them to their rank, drop those of exited workers."""
        if not os.path.isdir(self.shm_dir):
            return
        for path, (_rank, pid) in link_table.find(self.shm_dir).items():
            if path in self._tables or path in self._refused:
                continue
            if not self._is_descendant(pid, self.root_pid):
                self._refused.add(path)
                continue
            try:
                self._tables[path] = link_table.LinkTable(path)
            except LinkTableError as exc:
                self._refused.add(path)
                self.log(f"skipping {exc}")
        for path, tab in list(self._tables.items()):
            if not self._is_alive(tab.pid):
                tab.close()
                del self._tables[path]
                try:
                    os.unlink(path)
                except OSError:
                    pass
                continue
            rank = self.state.ranks.get(tab.rank)
            if rank is not None and rank.pid == tab.pid and rank.links is None:
                rank.links = lambda t=tab: self._messages(t)

    def _messages(self, tab: link_table.LinkTable) -> list:
        """The table as LinkChannel messages; none if it cannot be read (said once per table)."""
        try:
            entries = tab.read()
        except (OSError, ValueError) as exc:
            self.log(f"reading link table {tab.path} failed: {exc}")
            return []
        return [wire.entry_msg(e) for e in analysis.worth_sending(entries, MAX_ENTRIES_SENT)]

    def close(self) -> None:
        for tab in self._tables.values():
            tab.close()
        self._tables.clear()
