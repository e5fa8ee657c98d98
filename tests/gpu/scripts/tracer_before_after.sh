#!/usr/bin/env bash
# The tracer's per-call cost before and after a change, side by side in one run:
# the benches of an older tree ($1, e.g. .carry/old from `git archive`) and of
# this one, alternating, twice each.  bash tests/gpu/scripts/tracer_before_after.sh OLD_TREE OUT_DIR
set -u
old=$1 out=$2
for round in 1 2; do
  for tree in "$old" .; do
    label=$([ "$tree" = . ] && echo new || echo old)
    for bench in tracer_overhead cpp_collective_overhead; do
      echo "== round $round $label $bench"
      timeout 150 python3 "$tree/bench/$bench.py" 2>&1 | tee "$out/$bench-$label-$round.log" | tail -n 12
    done
  done
done
