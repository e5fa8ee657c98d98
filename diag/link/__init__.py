"""Naming the broken link of a hang where every rank waits (docs/link.md)."""
