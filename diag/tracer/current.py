"""This process's tracer: set by core.install_from_env, cleared in a forked
child, read by the calls a user makes (device.use_device).

Its own module so that device.py reads it without importing core.py, which
imports device.py to install it (no import cycle inside a package).
"""

from __future__ import annotations

tracer = None   # diag.tracer.core.Tracer, or None
