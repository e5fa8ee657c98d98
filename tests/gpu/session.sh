#!/usr/bin/env bash
# Every GPU check for one machine, in one go, through the device tool:
#   bash tests/gpu/session.sh x4s16|x4s16b|x4s16c|x2s16|x4ab|x4titan|x4fw32|x2fw32|cpu12500|cpu12500one|cpu12500prof|cpu25000prof|cpu25000|cpu25000only|x2linkhang|x1|x1drv|x1gpu|x1nosetdev|stuckkernel|cpudeadlock|cpus27|x1s28|x1s21|x1tracercost|x1fw|x1tracer|x1recover|x1fwrecover|x1link|x2link|x2|x4|x2hook|x2step|x2net|x2ctx|x2fence|x2step2|x2gen|x2pair|x2verify|x2timeline|x2perf|x2slow|x2diverge|x2gpt2|x2race|deps
#   (outputs in $OUT/gpu-<label>.tgz)
# x4fw32: issue 32 on 4 GPUs: the tracer's NCCL completion test, the Megatron-shaped
# step bench in process and as whole jobs (torchrun against the launcher), and
# Megatron-Core TP=2 x PP=2 with the distributed optimizer healthy (paired with
# torchrun) and with each planted fault (tests/gpu/scripts/fw_session.py).
# x2fw32: the same for DeepSpeed ZeRO-3 on 2 GPUs.
# x4s16: issue 32's tracer cost once device ops are left to the hook: the
# tracer's GPU tests, the step bench without and with the hook preloaded,
# Megatron healthy (torchrun / launcher pairs, and the tracer in and out by
# blocks inside one launched job: --ab) and its TP skip and stall.
# x4s16b: the same after the hook's answer is kept 50 ms and the share outlives a
# re-patch: the tracer's GPU tests, the step bench with the hook, Megatron's
# healthy pair and in-job A/B, DeepSpeed's (GPUs 0-1) with its faults.
# x4s16c: the tracer's added host time per step, in-job A/B (Megatron, DeepSpeed),
# then torchtitan's debug Llama (TP=2 x FSDP2=2, compile) healthy pair, A/B and faults.
# x2s16: the same healthy pairs and in-job A/B for DeepSpeed ZeRO-3, and its faults.
# x4ab: Megatron's in-job A/B three ways (XPU_AB_MODE, tracer_ab.py): A/A, a bare
# pass-through wrapper, the tracer: what the block order and any wrapper cost alone.
# x4titan: torchtitan 0.3.0's debug Llama (TP=2 x FSDP=2, torch.compile) healthy
# under torchrun and the launcher (paired, twice) and with each planted fault
# (a stall in tp rank 1's forward, one in rank 3's data iterator, a skipped
# tensor-parallel reduce-scatter on rank 1). Carried wheels: torchtitan,
# spmd_types, tyro, docstring_parser, typeguard (docs/frameworks.md).
# x4fw32b: the second call: the tracer's NCCL test and step bench again,
# DeepSpeed ZeRO-3 (GPUs 0-1), Megatron healthy three ways (torchrun, the
# launcher, the launcher with the tracer off) and its skipped all-reduce.
# x2fence: the hook's 2-GPU tests and per-call bench after the fence change;
# x2step2: short turns, many rounds (the turn-to-turn spread dominates), and
# the per-call bench.
# x2gen: short turns spread over 8 generations of fresh jobs, so the
# job-to-job level spread averages out and is in the interval.
# x2pair: the per-call bench (its bypass figure is the forwarding cost), then
# the step bench with in-process hooked/bypassed pairs over 4 job generations
# (the step-time verdict; about 380 s).
# x2perf: GPT-2 DDP under xpu_timer_launch --metrics-port: /metrics, `xpu-diag top`
# and the figures per phase in perf/ (docs/metrics.md), then the per-call bench.
# x2verify: the hook's 2-GPU tests alone (NCCL ids/seqs, the real hang, capture).
# x2slow: SLOW verdicts on GPT-2 DDP: a GPU slowed by a side-stream load, a host-side straggler, a healthy run.
# x2diverge: GPT-2 DDP with a skipped loss all_reduce (divergence named), the
# hook's 2-GPU tests, and the per-call bench (the fingerprint args' cost).
# x2gpt2: only x2diverge's GPT-2 DDP divergence test (ddp_skip_loss.py through gpt2_ddp.py).
# x2timeline: the merged timeline of 5 GPT-2-small DDP steps (timeline_gpt2.json, docs/timeline.md).
# x1drv: issue 20 item 4: driver launches (cuBLAS, NCCL, Triton) counted and a
# 1-rank all-reduce one series without busbw, then the per-call bench (its driver mode).
# x1gpu: issue 20 items 1-3: two ranks on GPU 0 (rank 1 under CUDA MPS at 25 % of
# the SMs where the machine allows MPS) named by bus id and said to share it, a
# real NVML sample on /metrics, the NVML recorder (outputs in gpu-runs/).
# x1s17: the paired hook per-launch bench, then x1nosetdev.
# x1nosetdev: issue 34 item 6: two ranks on cuda:0 that never call set_device (GEMMs, gloo
# all-reduce): the planted slow rank's SLOW line and a GPU-kernel hang's HANG line name
# the card and that both ranks share it, from the hook's DEVICE records (outputs in gpu-runs/).
# stuckkernel: issue 41 item 5: two gloo ranks on cuda:0 under the launcher's defaults,
# rank 1 stuck behind a kernel that never ends (torch.cuda._sleep) in .item():
# named by the stuck_kernel rule within 30 s (tests/gpu/test_stuck_kernel_gpu.py;
# the launcher's output in gpu-runs/stuck_kernel.log). Under 2 minutes.
# cpus27: issue 44 (session 27) on the device host's 16 cores, no GPU: every
# deadlock_runs variant 8 times, the healthy ones and a skip starved
# (--starve 64: a low-weight cpu cgroup beside two spinners a core), and the
# launcher's exit with and without gc.freeze (bench/launcher_exit.py).
# x1s28: session 28's hook probes (a run's length and a probe's age clamp at 0) on a
# real GPU: the stuck-kernel test and the hook's one-GPU tests; then the agent's
# state-R activity rule through every deadlock_runs variant, 6 times, on the 16 cores.
# cpudeadlock: issue 41 item 2 on the device host's 16 cores (no GPU used): each
# cross-group deadlock variant of bench/deadlock_runs.py 20 times through the launcher's
# defaults (6 at a time), the healthy crossing waits beside them: right means rule
# deadlock, the variant's culprits, within 10 s of the break.
# x1tracercost: issue 45 item 3: the tracer's cost per traced op where it means
# something, the device host's idle cores: gloo at 2 ranks and NCCL at world size 1
# with the hook preloaded (in-process alternating blocks; docs/tracer.md "Cost").
# x1s21: the hook's one-GPU tests alone, after the completion probes and the END a full
# ring keeps (issue 41 items 4 and 5).
# x1fw: Lightning, HF Trainer, FSDP2 and pipelining on one GPU under the launcher
# (tests/gpu/test_frameworks_gpu.py), then the per-call bench.
# x1fwrecover: issue 42 on one GPU: DeepSpeed ZeRO 1-3 (world size 1) and Megatron-Core's
# DistributedOptimizer (TP=PP=DP=1) killed and resumed from memory bitwise, and the paired step
# cost of save() for DeepSpeed (tests/gpu/test_recover_frameworks_gpu.py). Carry .whl/fw
# (deepspeed 0.19.8 built here, megatron-core 0.16.1 and pydantic for cp312).
# x1recover: snapshots on one GPU (tests/gpu/test_recover_gpu.py), then
# bench/ckpt_snapshot.py on GPT-2 small (batch 8 and 16 x 1024; docs/recovery.md).
# x1tracer: the tracer's per-call benches, this tree against .carry/old (an older
# tree from `git archive`), alternating (tests/gpu/scripts/tracer_before_after.sh).
# x1link: issue 22 on one GPU: real NCCL loads the profiler plugin (tests/gpu/test_link_gpu.py -k one_gpu),
# then its step-time cost on GPT-2 small, paired in one job (bench/link_step_pairs.py).
# x2link: issue 22's acceptance run on 2 GPUs (socket transport, one direction dropped: the link named;
# carry .carry/ipt-debs for an iptables where the image has none), then the paired step-time cost
# at 2 ranks over NVLink P2P and over the socket transport (where NCCL's proxy carries every channel).
# x2linkhang: only x2link's acceptance test (the link tables before the drop and at the HANG kept in link/).
# cpu12500: issue 21 on the device host's 16 cores (no GPU used): 12,500 agents
# through 391 real report relays (--nodes-per-relay 32), two runs: the
# collector on two cores of its own and the simulated fleet off them
# (--collector-cores 2), then sharing all 16 (0); the listen-queue counters
# before and after; the same with the relays simulated (the collector's side
# alone); the declaring tick in-process, the rest of the job a seq behind (the
# heaviest line). CPU12500_CORES="2 2" picks the runs (about 175 s each: two
# fit in one call).
# cpu12500one: only the first of cpu12500's runs (real relays, the collector on two cores).
# cpu25000: 25,000 agents (200,000 ranks) through 782 real report relays, the collector on
# two cores of its own (about 250 s; the relays ~46 MiB resident each, ~36 GiB in all).
# cpu25000only: that run alone, without the in-process tick benches (they run on any host);
# CPU25000_SECONDS=60 makes its window 60 s, the first 20 s of it healthy (the steady cost apart);
# CPU25000_TREE=DIR runs the collector from another tree (git archive REV diag | tar -x -C DIR).
# cpu25000prof2: cpu25000only with py-spy (--gil) on the collector: the window's healthy 9 s, then 20 s from
# the stall through its HANG (--threads: the watchdog's declaring tick apart from ingest).
# cpu12500prof: the real-relay run with py-spy (--gil) on the collector for 25 s of its window.
# x2race: issue 36 item 3 on 2 GPUs: bench/verdict_race.py plants a stalled rank, a
# skipped collective, a never-ending GPU kernel, a dropped link (socket transport, the
# carried iptables of x2link) and a killed rank, each under torchrun with Flight
# Recorder (PG timeout 60 s), NVRx's ft_launcher with heartbeats, and xpu_timer_launch
# (defaults); seconds from each fault to each tool's first verdict, and whom it named.
# Carry .whl/nvrx (nvidia-resiliency-ext 0.7.0 for cp312 manylinux_2_39 and defusedxml,
# the one dependency the image lacks; installed apart so that a refused wheel cannot stop
# the other labels' install). One call (--budget 450 s; 500 s with teardown, under 560 s
# with the build) does not hold all 15 runs: RACE_TOOLS/RACE_FAULTS pick, in three calls:
# RACE_TOOLS=torchrun (4 x ~95 s + killed); RACE_TOOLS=nvrx,xpu RACE_FAULTS=stall,skip,link,killed;
# RACE_TOOLS=nvrx,xpu RACE_FAULTS=spin (xpu waits out its 300 s --hang-timeout: no evidence
# rule sees a kernel that never ends without an XID). Runs the budget cannot hold print as skipped.
# deps: the generated gRPC stubs, the collector and the agent import under the
# image's OWN grpcio and protobuf (not the carried wheels; issue 13 item 8).
# x2hook: only the kernel hook's 2-GPU tests and benches (< 400 s in all);
# x2step: only its step-time bench; x2net: only netcheck (as x4 does); x2bench: only the per-call bench.
# Carry .whl (py-spy, grpcio, protobuf wheels for the image's Python) and .carry
# (nccl-tests all_reduce_perf, built outside the repo and never committed).
set -uo pipefail
label=${1:?machine label}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
LD_LIBRARY_PATH=$(python3 -c 'import nvidia.nccl;print(list(nvidia.nccl.__path__)[0]+"/lib")'):${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH NCCL_TESTS_BIN=$PWD/.carry/nccl-tests/build/all_reduce_perf
R=/tmp/gpu-$label; rm -rf $R; mkdir -p $R
finish() { tar czf "$OUT/gpu-$label.tgz" -C "$R" . ; }
trap finish EXIT
{ nvidia-smi; nvidia-smi topo -m
  python3 -c "import torch,grpc,google.protobuf as p;print('torch',torch.__version__,'nccl',torch.cuda.nccl.version(),'grpc',grpc.__version__,'protobuf',p.__version__)"
} > $R/machine.txt 2>&1
make -s -C kernel_hook > $R/build.log 2>&1 || { echo "hook build failed"; cat $R/build.log; }
# the kernel's listen-queue counters (a connection storm that overflowed them shows here)
listen_drops() { awk '/^TcpExt:/{if(!h){split($0,k);h=1}else{split($0,v);for(i=2;i<=length(k);i++) if(k[i]~/Listen|SynRetrans|TCPReqQFull/) printf "%s=%s ",k[i],v[i]; print ""}}' /proc/net/netstat; }
run() { local name=$1 limit=$2; shift 2; echo "== $name"; timeout "$limit" "$@" > "$R/$name.log" 2>&1; echo "exit $?" | tee -a "$R/$name.log"; tail -n 5 "$R/$name.log"; }
case $label in
  x4fw32) run tracer_gpu 80 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_tracer_gpu.py
      run tracer_async_step_nccl 80 python3 bench/tracer_async_step.py --backend nccl --world 4 --rounds 10
      run megatron 380 python3 tests/gpu/scripts/fw_session.py $R/fw megatron --runs 2 ;;
  x4s16) run tracer_gpu 80 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_tracer_gpu.py
      run tracer_async_step_nccl 70 python3 bench/tracer_async_step.py --backend nccl --world 4 --rounds 8
      run tracer_async_step_nccl_hook 70 python3 bench/tracer_async_step.py --backend nccl --world 4 --rounds 8 --hook
      run megatron 330 python3 tests/gpu/scripts/fw_session.py $R/fw megatron --runs 2 --ab --faults --skip-tp,--stall-tp ;;
  x4s16c) python3 -c "import torch, torchtitan, spmd_types, tyro; print('torch', torch.__version__)" >> $R/machine.txt 2>&1
      run megatron 120 python3 tests/gpu/scripts/fw_session.py $R/fw megatron --runs 1 --ab --only-ab --faults none
      run deepspeed 60 python3 tests/gpu/scripts/fw_session.py $R/fw deepspeed --runs 1 --ab --only-ab --faults none
      run torchtitan 400 python3 tests/gpu/scripts/fw_session.py $R/fw torchtitan --runs 1 --ab ;;
  x2s16) run deepspeed 330 python3 tests/gpu/scripts/fw_session.py $R/fw deepspeed --runs 2 --ab ;;
  x4s16b) run tracer_gpu 80 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_tracer_gpu.py
      run tracer_async_step_nccl_hook 70 python3 bench/tracer_async_step.py --backend nccl --world 4 --rounds 8 --hook
      run megatron 150 python3 tests/gpu/scripts/fw_session.py $R/fw megatron --runs 1 --ab --faults none
      run deepspeed 200 python3 tests/gpu/scripts/fw_session.py $R/fw deepspeed --runs 1 --ab ;;
  x4ab) for m in same bare tracer; do XPU_AB_MODE=$m run megatron_ab_$m 150 python3 tests/gpu/scripts/fw_session.py $R/fw-$m megatron --runs 1 --ab --only-ab --faults none; done ;;
  x4titan) python3 -c "import torch, torchtitan, spmd_types, tyro; print('torch', torch.__version__)" >> $R/machine.txt 2>&1
      run torchtitan 560 python3 tests/gpu/scripts/fw_session.py $R/fw torchtitan --runs 2 ;;
  x2fw32) run deepspeed 300 python3 tests/gpu/scripts/fw_session.py $R/fw deepspeed --runs 2
      run tracer_async_step_launcher 110 python3 bench/tracer_async_step.py --backend nccl --world 2 --launcher --runs 2 --rounds 10 ;;
  x4fw32b) run tracer_gpu 60 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_tracer_gpu.py
      run tracer_async_step_nccl 60 python3 bench/tracer_async_step.py --backend nccl --world 4 --rounds 8
      run deepspeed 170 python3 tests/gpu/scripts/fw_session.py $R/fw deepspeed --runs 1
      run megatron 290 python3 tests/gpu/scripts/fw_session.py $R/fw megatron --runs 2 --tracer-off --faults --skip-tp ;;
  x1) run hook_single_gpu 200 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_single_gpu.py
      run hook_launch_bench 200 python3 bench/hook_launch_bench.py ;;
  x1drv) run hook_driver 300 python3 -m pytest -q -s -p no:cacheprovider "tests/gpu/test_hook_single_gpu.py::test_driver_launches_counted_and_one_all_reduce_series"
      run hook_launch_bench 200 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json ;;
  x1gpu) mkdir -p $R/gpu-runs; GPU_RUNS_OUT=$R/gpu-runs run gpu_identity 560 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_identity.py ;;
  x1s17) run hook_launch_bench 150 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json
      mkdir -p $R/gpu-runs; GPU_RUNS_OUT=$R/gpu-runs run gpu_no_set_device 400 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_identity.py -k no_set_device ;;
  cpus27) run deadlock_runs 220 python3 bench/deadlock_runs.py --runs 8 --parallel 10 --out $R/deadlock_runs.json
      run deadlock_starved 200 python3 bench/deadlock_runs.py --runs 2 --parallel 4 --starve 64 \
        --variants healthy-async,healthy-async-quarter,skip-default --out $R/deadlock_starved.json
      run launcher_exit 80 python3 bench/launcher_exit.py --runs 12 ;;
  x1s28) mkdir -p $R/gpu-runs; GPU_RUNS_OUT=$R/gpu-runs run stuck_kernel 110 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_stuck_kernel_gpu.py
      run hook_single_gpu 200 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_single_gpu.py
      run deadlock_runs 230 python3 bench/deadlock_runs.py --runs 6 --parallel 10 --out $R/deadlock_runs.json ;;
  cpudeadlock) run deadlock_runs 330 python3 bench/deadlock_runs.py --runs 20 --parallel 10 --out $R/deadlock_runs.json ;;
  x1tracercost) run tracer_async_step_gloo 90 python3 bench/tracer_async_step.py --backend gloo --world 2 --rounds 12
      run tracer_async_step_nccl_hook 90 python3 bench/tracer_async_step.py --backend nccl --world 1 --hook --rounds 12 ;;
  x1s21) run hook_single_gpu 200 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_single_gpu.py ;;
  stuckkernel) mkdir -p $R/gpu-runs; GPU_RUNS_OUT=$R/gpu-runs run stuck_kernel 110 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_stuck_kernel_gpu.py ;;
  x1nosetdev) mkdir -p $R/gpu-runs; GPU_RUNS_OUT=$R/gpu-runs run gpu_no_set_device 420 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_gpu_identity.py -k no_set_device ;;
  x1fw) run frameworks_gpu 420 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_frameworks_gpu.py
      run hook_launch_bench 150 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json ;;
  x1tracer) run tracer_before_after 560 bash tests/gpu/scripts/tracer_before_after.sh .carry/old $R ;;
  x1link) run link_gpu 300 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_link_gpu.py -k one_gpu
      run link_step_pairs 280 python3 bench/link_step_pairs.py --pairs 150 --out $R/link_step_pairs.json ;;
  x2linkhang) source tests/gpu/scripts/carried_iptables.sh > $R/iptables.log 2>&1; cat $R/iptables.log
      LINK_GPU_OUT=$R/link run link_gpu 300 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_link_gpu.py -k two_gpus ;;
  x2link) source tests/gpu/scripts/carried_iptables.sh > $R/iptables.log 2>&1; cat $R/iptables.log
      LINK_GPU_OUT=$R/link run link_gpu 280 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_link_gpu.py
      run link_step_pairs 110 python3 bench/link_step_pairs.py --nproc 2 --pairs 80 --out $R/link_step_pairs.json
      run link_step_pairs_socket 140 python3 bench/link_step_pairs.py --nproc 2 --pairs 120 --transport socket --out $R/link_step_pairs_socket.json ;;
  cpu12500) listen_drops > $R/listen_drops.txt; lscpu > $R/lscpu.txt
      i=0; for c in ${CPU12500_CORES:-2 0}; do i=$((i+1)); run relays_12500_${i}_cores$c 175 python3 bench/collector_ingest.py --agents 12500 --drivers 8 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-cores $c --collector-log $R/relays_12500_${i}_cores${c}_collector.log; done
      listen_drops >> $R/listen_drops.txt; cat $R/listen_drops.txt
      run relays_12500_simulated 110 python3 bench/collector_ingest.py --agents 12500 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --simulated-relays --collector-cores 2 --collector-log $R/relays_12500_simulated_collector.log
      run collector_tick_12500 60 python3 bench/collector_tick.py --agents 12500 --stall behind ;;
  cpu12500one) run relays_12500_cores2 200 python3 bench/collector_ingest.py --agents 12500 --drivers 8 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-cores 2 --collector-log $R/relays_12500_cores2_collector.log ;;
  cpu25000) listen_drops > $R/listen_drops.txt; free -g > $R/memory.txt
      run relays_25000_cores2 340 python3 bench/collector_ingest.py --agents 25000 --drivers 10 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-cores 2 --collector-log $R/relays_25000_cores2_collector.log
      listen_drops >> $R/listen_drops.txt; free -g >> $R/memory.txt
      run collector_tick_25000_relayed 90 python3 bench/collector_tick.py --agents 25000 --relayed
      run collector_tick_25000_behind 90 python3 bench/collector_tick.py --agents 25000 --stall behind ;;
  cpu25000only) listen_drops > $R/listen_drops.txt; free -g > $R/memory.txt
      run relays_25000_cores2 340 python3 bench/collector_ingest.py --agents 25000 --drivers 10 --seconds ${CPU25000_SECONDS:-40} --hang-timeout 10 --nodes-per-relay 32 --collector-cores 2 --collector-log $R/relays_25000_cores2_collector.log ${CPU25000_TREE:+--collector-tree $CPU25000_TREE}
      listen_drops >> $R/listen_drops.txt; free -g >> $R/memory.txt ;;
  cpu25000prof) python3 bench/collector_ingest.py --agents 25000 --drivers 10 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-cores 2 --collector-log $R/relays_collector.log > $R/relays.log 2>&1 &
      bench=$!   # the window starts once every driver's agents are relayed (50 to 140 s in at this size)
      for i in $(seq 60); do pid=$(pgrep -f 'm diag.collector --listen' | head -1); [ -n "$pid" ] && break; sleep 1; done
      for i in $(seq 300); do grep -q 'the window starts' $R/relays.log && break; sleep 1; done
      # the healthy half of the window: its rank stalls 10 s in, the HANG 10 s later
      py-spy record -p $pid -d 16 -r 100 --gil --threads --nonblocking --format raw -o $R/collector_gil.txt > $R/spy.log 2>&1
      wait $bench; grep -v '^  driver\|relay: ingest\|relay of nodes' $R/relays.log | head -30 ;;
  cpu25000prof2) python3 bench/collector_ingest.py --agents 25000 --drivers 10 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-cores 2 --collector-log $R/relays_collector.log > $R/relays.log 2>&1 &
      bench=$!
      for i in $(seq 60); do pid=$(pgrep -f 'm diag.collector --listen' | head -1); [ -n "$pid" ] && break; sleep 1; done
      for i in $(seq 300); do grep -q 'the window starts' $R/relays.log && break; sleep 1; done
      # the healthy part of the window (its rank stalls 10 s in), then the stall through its HANG (20 s in) and after
      py-spy record -p $pid -d 9 -r 100 --gil --nonblocking --format raw -o $R/collector_gil_healthy.txt > $R/spy.log 2>&1
      py-spy record -p $pid -d 20 -r 100 --gil --threads --nonblocking --format raw -o $R/collector_gil_stall.txt >> $R/spy.log 2>&1
      wait $bench; grep -v '^  driver\|relay: ingest\|relay of nodes' $R/relays.log | head -34 ;;
  cpu12500prof) python3 bench/collector_ingest.py --agents 12500 --drivers 8 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-log $R/relays_collector.log > $R/relays.log 2>&1 &
      bench=$!   # the window starts once every agent is relayed and the storm's OVERLOAD is over (60-70 s in)
      for i in $(seq 60); do pid=$(pgrep -f 'm diag.collector --listen' | head -1); [ -n "$pid" ] && break; sleep 1; done
      sleep 75; py-spy record -p $pid -d 25 -r 100 --gil --nonblocking --format raw -o $R/collector_gil.txt > $R/spy.log 2>&1
      wait $bench; grep -v '^  driver\|relay: ingest\|relay of nodes' $R/relays.log | head -24 ;;
  x1fwrecover) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/fw/*.whl > $R/fw_install.log 2>&1   # deepspeed, megatron-core, pydantic: the image has none
      python3 -c "import deepspeed, megatron.core as m; print('deepspeed', deepspeed.__version__, 'megatron-core', m.__version__)" >> $R/machine.txt 2>&1
      run recover_frameworks_gpu 420 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_recover_frameworks_gpu.py ;;
  x1recover) run recover_gpu 200 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_recover_gpu.py
      run ckpt_snapshot 300 python3 bench/ckpt_snapshot.py --cuda --persist --out $R/ckpt_snapshot.json
      run ckpt_snapshot_b16 240 python3 bench/ckpt_snapshot.py --cuda --batch 16 --out $R/ckpt_snapshot_b16.json ;;
  x2) run hook_nccl_2gpu 220 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_nccl_2gpu.py
      run hook_step 170 python3 bench/hook_step_overhead.py --rounds 8 --steps 20 --out $R/hook_step.json
      run netcheck 170 python3 bench/netcheck_gpu_session.py --out $R/netcheck ;;
  x2hook) run hook_nccl_2gpu 80 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_nccl_2gpu.py
      run hook_step 165 python3 bench/hook_step_overhead.py --rounds 16 --steps 20 --out $R/hook_step.json
      run hook_launch_bench 85 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json ;;
  x2step) run hook_step 200 python3 bench/hook_step_overhead.py --rounds 36 --steps 12 --out $R/hook_step.json ;;
  x2ctx) run hook_ctx_capture 120 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_ctx_capture.py
      run hook_nccl_2gpu 120 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_nccl_2gpu.py ;;
  x2fence) run hook_nccl_2gpu 100 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_nccl_2gpu.py
      run hook_ctx_capture 100 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_ctx_capture.py
      run hook_launch_bench 300 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json ;;
  x2step2) run hook_step 330 python3 bench/hook_step_overhead.py --rounds 300 --steps 2 --out $R/hook_step.json
      run hook_launch_bench 220 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json ;;
  x2gen) run hook_step 580 python3 bench/hook_step_overhead.py --rounds 240 --steps 2 --warmup 8 --generations 8 --out $R/hook_step.json ;;
  x2pair) run hook_launch_bench 200 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json
      fwd=$(python3 -c "import json,sys;r=json.load(open(sys.argv[1]))['result'];b=lambda m:max(0.0,r[m+'/bypass/paired']['added_ns']);print(f\"{b('launch')},{max(b('gemm'),b('nccl'))}\")" $R/hook_launch_bench.json) || fwd=
      run hook_step 390 python3 bench/hook_step_overhead.py --rounds 120 --steps 2 --warmup 8 --generations 4 --pairs 1000 ${fwd:+--forward-ns $fwd} --out $R/hook_step.json ;;
  x2verify) run hook_nccl_2gpu 120 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_nccl_2gpu.py
      run hook_ctx_capture 100 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_ctx_capture.py ;;
  x2diverge) run divergence_2gpu 330 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_divergence_2gpu.py
      run hook_nccl_2gpu 120 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_hook_nccl_2gpu.py
      run hook_launch_bench 140 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json ;;
  x2gpt2) run divergence_2gpu 200 python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_divergence_2gpu.py ;;
  x2timeline) run timeline_gpt2 500 env TIMELINE_OUT=$R/timeline_gpt2.json python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_timeline_gpt2.py ;;
  x2slow) run slow 560 bash tests/gpu/scripts/slow_session.sh $R/slow ;;
  x2perf) run perf_gpt2 400 python3 tests/gpu/scripts/perf_gpt2_session.py $R/perf ;;   # the per-call bench: x2diverge
  deps) python3 -m pip install -q --no-index --no-deps --target /tmp/floor .whl/floor/*.whl   # health checking alone: a declared dependency the image lacks
      run image_grpc 60 env PYTHONPATH=$PWD:/tmp/floor python3 -c "import grpc, google.protobuf as p, diag.pb.collector_pb2_grpc, diag.collector.server, diag.agent.agent; print('image grpc', grpc.__version__, 'protobuf', p.__version__, ': stubs, collector and agent import')" ;;
  x2race) source tests/gpu/scripts/carried_iptables.sh > $R/iptables.log 2>&1; cat $R/iptables.log
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/nvrx/*.whl > $R/nvrx_install.log 2>&1 \
        || for w in .whl/nvrx/*.whl; do python3 -m zipfile -e "$w" /tmp/site; done   # a glibc under 2.39 refuses the tag: unpacked, ft_launcher runs as a module
      python3 -c "import nvidia_resiliency_ext.fault_tolerance as ft; print('nvrx', ft.__file__)" >> $R/machine.txt 2>&1
      run verdict_race 500 python3 bench/verdict_race.py --nproc 2 --budget 450 --keep $R/race --out $R/verdict_race.json \
        ${RACE_FAULTS:+--faults $RACE_FAULTS} ${RACE_TOOLS:+--tools $RACE_TOOLS} ;;
  x2bench) run hook_launch_bench 200 python3 bench/hook_launch_bench.py --launches 200000 --timed 20000 --rounds 3 --out $R/hook_launch_bench.json ;;
  x2net|x4) run netcheck 400 python3 bench/netcheck_gpu_session.py --out $R/netcheck ;;
esac
