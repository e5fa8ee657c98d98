"""The FAILED verdict: which rank broke a job that crashed, and the records' evidence (issue 41, item 3)."""
