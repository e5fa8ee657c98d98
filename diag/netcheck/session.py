"""Rendezvous and liveness over torch's TCPStore (no home-made protocol).

Node rank 0 serves the store (unless torchrun's agent already does) and
coordinates; every node keeps a heartbeat counter ``hb/<rank>`` moving from
a thread with its own store connection, so a node that dies or hangs is
noticed within --timeout even while its main thread is inside a collective.
Keys live under ``netcheck/``; values are JSON.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any, Callable

from torch.distributed import PrefixStore, TCPStore

from diag.netcheck.api import NetcheckError

HEARTBEAT_S = 0.5
POLL_S = 0.1
PREFIX = "netcheck/"


class Session:
    """A connection to the job's store plus this node's heartbeat."""

    def __init__(self, addr: str, port: int, rank: int, serve: bool, connect_timeout_s: float):
        self.rank = rank
        timeout = timedelta(seconds=connect_timeout_s)
        try:
            self.raw = TCPStore(addr, port, None, serve, timeout, wait_for_workers=False)
            self._hb_raw = TCPStore(addr, port, None, False, timeout, wait_for_workers=False)
        except Exception as exc:  # noqa: BLE001 - c10d raises several types; all mean "no store"
            role = "serve" if serve else "reach"
            raise NetcheckError(f"node rank {rank}: cannot {role} the store at {addr}:{port} "
                                f"({_first_line(exc)}); check --master-addr/--master-port") from None
        self.store = PrefixStore(PREFIX, self.raw)
        self._hb_store = PrefixStore(PREFIX, self._hb_raw)
        self._stop = threading.Event()
        self._seen: dict[int, tuple[int, float]] = {}
        self._thread = threading.Thread(target=self._beat, name="netcheck-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        # Watchdog loop: never dies on an error; a store that went away just
        # means our heartbeat stops, which is what the coordinator must see.
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._hb_store.add(f"hb/{self.rank}", 1)
            except Exception:  # noqa: BLE001
                if self._stop.wait(1.0):
                    return

    def close(self) -> None:
        self._stop.set()

    def set_json(self, key: str, value: Any) -> None:
        self.store.set(key, json.dumps(value))

    def get_json(self, key: str) -> Any:
        return json.loads(self.store.get(key))

    def has(self, key: str) -> bool:
        return self.store.check([key])

    def heartbeat_age(self, rank: int) -> float:
        """Seconds since ``rank``'s heartbeat counter last moved, as seen by this node."""
        count = int(self.store.add(f"hb/{rank}", 0))
        now = time.monotonic()
        last = self._seen.get(rank)
        if last is None or last[0] != count:
            self._seen[rank] = (count, now)
            return 0.0
        return now - last[1]

    def wait_for(self, key: str, deadline_s: float | None, alive: Callable[[], None]) -> Any:
        """Poll for ``key`` and return its JSON value.

        ``alive`` is called each poll and raises to give up (e.g. the
        coordinator's heartbeat stopped); ``deadline_s`` bounds the wait.
        Polling (not store.wait) keeps c10d's timeout warnings off stderr.
        """
        start = time.monotonic()
        while not self.has(key):
            if deadline_s is not None and time.monotonic() - start > deadline_s:
                raise TimeoutError(f"no {key} within {deadline_s:g}s")
            alive()
            time.sleep(POLL_S)
        return self.get_json(key)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
