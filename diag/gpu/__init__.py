"""GPU identity and NVML health: pure logic the agent and collector use (docs/gpu.md)."""
