"""Output formats; each module has one Writer class (add_stack, write)."""
