"""The hang rules: pure functions of a read-only job view (api.View), one
module per rule, run in order by decide.py. No clock, no I/O: time is the
view's ``now``, so tests drive every rule with plain data and a fake clock."""
