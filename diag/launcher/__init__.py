"""xpu_timer_launch: torch.distributed.run with the node agent and tracer around it."""
