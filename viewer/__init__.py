"""stack-viewer: merge every rank's stack dumps into flame graphs and a summary.

Runs on a laptop: imports neither torch nor grpc. Entry point: viewer.cli:main.
"""
