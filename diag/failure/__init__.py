"""The FAILED verdict: which rank broke a job that crashed, and the records' evidence."""
