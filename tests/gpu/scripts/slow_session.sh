#!/usr/bin/env bash
# SLOW verdicts on 2 GPUs (docs/slow.md): GPT-2-small DDP under xpu_timer_launch,
# three jobs: rank 1's GPU slowed by a side-stream load (a slow GPU), rank 0
# sleeping 20 % of each step on the host (a straggler, GEMMs healthy), and a
# healthy run with a checkpoint (no verdict). Logs and slow.json files in $1.
set -uo pipefail
out=${1:?output dir}; mkdir -p "$out"
W=${SLOW_WINDOW:-15s}
job() {  # name run_s env...
  local name=$1 run=$2; shift 2
  env "$@" RUN_S=$run timeout $((run + 120)) python3 -m diag.launcher.main --nproc-per-node 2 --rdzv-id "$name" \
    --timeline-path "$out/timeline" --perf-window "$W" tests/gpu/scripts/slow_gpt2.py > "$out/$name.log" 2>&1
  echo "== $name: exit $?"; grep -E "SLOW: |HANG: |from now|done after" "$out/$name.log"
}
want() { [[ " ${SLOW_JOBS:-slowgpu straggler healthy} " == *" $1 "* ]]; }
want slowgpu && job slowgpu 75 SLOW_MODE=gpu SLOW_RANK=1 WARM_S=20 DUTY=${SLOW_DUTY:-0.3}
want straggler && job straggler 75 SLOW_MODE=host SLOW_RANK=0 WARM_S=20
want healthy && job healthy 150 PAUSE_AT=60 PAUSE_S=10
for f in "$out"/timeline/*/*/slow.json; do [ -e "$f" ] && cp "$f" "$out/$(basename "$(dirname "$(dirname "$f")")")-slow.json"; done
python3 - "$out" <<'PY'
import glob, json, sys
for path in sorted(glob.glob(f"{sys.argv[1]}/*-slow.json")):
    d = json.load(open(path))
    print(path.split("/")[-1], d["rule"], d["ranks"], "deviation", d["deviation"])
    for r in d["per_rank"]:
        print("   rank", r["rank"], "TFLOP/s", r["gemm_tflops"], "samples", r["gemm_samples"],
              [(c["op"], c["wait_share"]) for c in r["comms"]])
PY
