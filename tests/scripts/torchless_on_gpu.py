"""on_gpu.py for torch-free ranks (torchless.py): name this rank's CUDA device
through the tracer (diag.tracer.device.use_device), then run argv[1:] as a
script. torch is kept out: the runtime's identity is then what CPU torch
gives (no UUID, no PCI address), and the agent resolves the card through
NVML by its CUDA_VISIBLE_DEVICES entry, as it does for a gloo rank here."""
import os, runpy, sys
sys.modules["torch"] = None   # `import torch` raises ImportError: runtime_identity() answers ("", None)
from diag.tracer.device import use_device
use_device(int(os.environ["GPU_OF_LOCAL_RANK"].split(",")[int(os.environ["LOCAL_RANK"])]))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
