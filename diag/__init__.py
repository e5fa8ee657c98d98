"""xpu-diag: hang detection and cluster diagnostics for PyTorch distributed jobs.

Importing this package must stay cheap and must not import torch: the viewer
and the agent use it on machines that have neither torch nor a GPU.
"""

__version__ = "0.1.0"
