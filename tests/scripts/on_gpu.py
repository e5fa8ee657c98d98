"""Name this rank's CUDA device through the tracer, then run argv[1:] as a
script. GPU_OF_LOCAL_RANK="0,0,1,2" gives each local rank its ordinal (CPU
torch has no torch.cuda.set_device to say it; docs/gpu.md)."""
import os, runpy, sys
from diag.tracer.device import use_device
use_device(int(os.environ["GPU_OF_LOCAL_RANK"].split(",")[int(os.environ["LOCAL_RANK"])]))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
