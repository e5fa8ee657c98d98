"""Every environment variable xpu-diag reads or sets, named once.

The launcher's options also have an env equivalent; those are declared with
the option in ``diag.common.options`` (its ``env=``) and listed here too, so
this module is the one place to look a name up.
"""

# Set by xpu_timer_launch for the collector, agent and workers.
JOB_TOKEN = "XPU_TIMER_JOB_TOKEN"          # shared secret on every collector RPC
SHM_DIR = "XPU_TIMER_SHM_DIR"              # the node's record rings
TRACER_PID = "XPU_TIMER_TRACER_PID"        # the process that owns a ring (fork check)
DIE_WITH_PID = "XPU_TIMER_DIE_WITH_PID"    # a worker or collector whose parent is this pid dies with it

# Read by the Python tracer in each worker.
TRACER_DISABLE = "XPU_TIMER_TRACER_DISABLE"
RING_CAPACITY = "XPU_TIMER_RING_CAPACITY"
HOST_TRACING_FUNC = "XPU_TIMER_HOST_TRACING_FUNC"
TRACER_CPP_COLLECTIVES = "XPU_TIMER_TRACER_CPP_COLLECTIVES"   # 0: no dispatcher kernel (diag/tracer/dispatch.py)

# Read by the C++ hook (kernel_hook/); forwarded by the launcher.
HOOK_TIME_EVERY = "XPU_TIMER_HOOK_TIME_EVERY"
HOOK_COMPLETION = "XPU_TIMER_HOOK_COMPLETION"
HOOK_DISABLE = "XPU_TIMER_HOOK_DISABLE"
HOOK_POLL_US = "XPU_TIMER_HOOK_POLL_US"
HOOK_COUNT_MS = "XPU_TIMER_HOOK_COUNT_MS"
HOOK_CAPTURE_CHECK = "XPU_TIMER_HOOK_CAPTURE_CHECK"   # "always": bench knob (docs/kernel_hook.md)
HOOK_EVENT_API = "XPU_TIMER_HOOK_EVENT_API"           # "driver": bench knob

# The NCCL profiler plugin (kernel_hook/nccl_profiler, docs/link.md): set by the
# launcher for the workers unless the user set it; its knobs, read by the plugin;
# where the collector asks NCCL RAS (NCCL's own variable).
NCCL_PROFILER_PLUGIN = "NCCL_PROFILER_PLUGIN"
LINK_DISABLE = "XPU_TIMER_LINK_DISABLE"       # 1: the plugin asks NCCL for no events
LINK_KERNEL = "XPU_TIMER_LINK_KERNEL"         # 0: no kernel-channel events
NCCL_RAS_ADDR = "NCCL_RAS_ADDR"

# Read by the launcher / agent.
REPORT_INTERVAL = "XPU_TIMER_REPORT_INTERVAL"
DUMP_TOOLS = "XPU_TIMER_DUMP_TOOLS"
NODE_NAME = "XPU_TIMER_NODE_NAME"

# Recovery (diag/recover, docs/recovery.md): set by the launcher for the workers.
CKPT_DIR = "XPU_TIMER_CKPT_DIR"                  # the node's snapshot store (tmpfs, outlives workers)
CKPT_PERSIST_DIR = "XPU_TIMER_CKPT_PERSIST_DIR"  # the persisted copies (shared by the job's nodes)
CKPT_DISABLE = "XPU_TIMER_CKPT_DISABLE"          # 1: Checkpointer keeps nothing (opt-out)
ATTEMPT_STORE = "XPU_TIMER_ATTEMPT_STORE"        # 1: a restarted worker keys env:// by attempt (diag/recover/attempt_store.py)

# The launcher's options (flag equivalents; see diag.common.options).
HANG_TIMEOUT = "XPU_TIMER_HANG_TIMEOUT"
IDLE_TIMEOUT = "XPU_TIMER_IDLE_TIMEOUT"
VERDICTS = "XPU_TIMER_VERDICTS"
BLOCKED_AFTER = "XPU_TIMER_BLOCKED_AFTER"
TIMELINE_PATH = "XPU_TIMER_TIMELINE_PATH"
COLLECTOR = "XPU_TIMER_COLLECTOR"
HANG_ACTION = "XPU_TIMER_HANG_ACTION"
NO_HOOK = "XPU_TIMER_NO_HOOK"
LINK_PLUGIN = "XPU_TIMER_LINK_PLUGIN"     # yes: the launcher points NCCL_PROFILER_PLUGIN at ours (the default)
NO_LINK_PLUGIN = "XPU_TIMER_NO_LINK_PLUGIN"   # yes: it does not (docs/link.md)
FAULT_LIST = "XPU_TIMER_FAULT_LIST"
FAULT_LIST_MAX_AGE = "XPU_TIMER_FAULT_LIST_MAX_AGE"
TIMELINE_WINDOW = "XPU_TIMER_TIMELINE_WINDOW"
PERF_WINDOW = "XPU_TIMER_PERF_WINDOW"
PERF_STEP = "XPU_TIMER_PERF_STEP"
METRICS_PORT = "XPU_TIMER_METRICS_PORT"
METRICS_ADDR = "XPU_TIMER_METRICS_ADDR"
COLLECTOR_METRICS_PORT = "XPU_TIMER_COLLECTOR_METRICS_PORT"
SLOW_THRESHOLD = "XPU_TIMER_SLOW_THRESHOLD"
INGEST_PROCS = "XPU_TIMER_INGEST_PROCS"
NODES_PER_RELAY = "XPU_TIMER_NODES_PER_RELAY"
SLOW_ACTION = "XPU_TIMER_SLOW_ACTION"
GPU_SAMPLE_INTERVAL = "XPU_TIMER_GPU_SAMPLE_INTERVAL"
NVML_REPLAY = "XPU_TIMER_NVML_REPLAY"
CKPT_PERSIST_EVERY = "XPU_TIMER_CKPT_PERSIST_EVERY"   # docs/recovery.md; --ckpt-dir is CKPT_PERSIST_DIR
