"""netcheck: pairwise node checks, the switchbox check and the fault list (docs/netcheck.md)."""
