#!/bin/bash
# Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=/etc/slurm/netcheck-health.sh,
# HealthCheckInterval=3600, HealthCheckNodeState=IDLE). slurmd ignores the exit status,
# so, like NHC, the script drains the node itself with the reason netcheck gave.
set -u
ME=$(hostname -s)
OUT=/var/lib/xpu-diag/health.json
mkdir -p /var/lib/xpu-diag
if ! msg=$(netcheck preflight --node-name "$ME" --no-progress --output "$OUT" 2>&1); then
  reason=$(echo "$msg" | grep -m1 "is faulty" | cut -c1-200)
  scontrol update nodename="$ME" state=drain reason="netcheck: ${reason:-see $OUT}"
  exit 1
fi
exit 0
