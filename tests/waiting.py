"""Polling for a condition in tests that drive real processes and servers."""

from __future__ import annotations

import time


def poll_until(predicate, timeout: float, interval: float = 0.05):
    """predicate()'s first truthy value within timeout seconds, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def wait_for(predicate, what: str, timeout: float = 30.0):
    """As poll_until, but a timeout fails the test, naming what was awaited."""
    value = poll_until(predicate, timeout)
    if not value:
        raise AssertionError(f"timed out waiting for {what}")
    return value
