"""The node agent: reads local progress regions, reports to the collector,
dumps stacks and kills workers on the collector's command (docs/agent.md)."""
