"""Slowness rules: which rank is slow, from the perf window (docs/slow.md)."""
