#!/bin/bash
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/prolog.d/netcheck.sh, PrologFlags=Alloc).
# Runs as root on every node of the allocation before the job starts. A non-zero
# exit drains this node and requeues the job.
set -u
NODES=$(scontrol show hostnames "$SLURM_JOB_NODELIST")
NNODES=$(echo "$NODES" | wc -l)
ME=$(hostname -s)
RANK=$(echo "$NODES" | grep -nx "$ME" | cut -d: -f1)
MASTER=$(echo "$NODES" | head -n1)
PORT=$((20000 + SLURM_JOB_ID % 10000))      # same on every node of this job
OUT=/var/lib/xpu-diag/faults-$SLURM_JOB_ID.json
mkdir -p /var/lib/xpu-diag

PEERS=()
if [ "$NNODES" -gt 1 ]; then
  PEERS=(--nnodes "$NNODES" --node-rank $((RANK - 1)) --master-addr "$MASTER" --master-port "$PORT")
fi
# Short sizes and timeouts: a prolog delays the job. One node = switchbox + health only.
netcheck preflight "${PEERS[@]}" --node-name "$ME" --size 256M --timeout 30s --join-timeout 120s \
  --no-progress --output "$OUT"
status=$?
# 3 = the check could not run (e.g. a peer's prolog failed first): do not drain for that.
[ "$status" -eq 3 ] && exit 0
exit "$status"
