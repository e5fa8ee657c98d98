"""Functions the idle tests name (or not) in XPU_TIMER_HOST_TRACING_FUNC."""
import time


def start_job():  # torch's import and the process group: slow on a busy machine, named, so it is an op
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    return torch, dist


def save_checkpoint(seconds):  # a long checkpoint save, outside any collective
    time.sleep(seconds)


def wait_for_lock(seconds):  # every rank blocked outside any collective
    time.sleep(seconds)
