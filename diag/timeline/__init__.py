"""The merged timeline: each agent's ring of recent spans, the Trace Event
Format writer, and ``xpu-diag timeline`` (docs/timeline.md)."""
