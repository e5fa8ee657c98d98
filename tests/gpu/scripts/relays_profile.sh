# Issue 21: where the collector's CPU goes at 12,500 agents through real relays:
# py-spy (--gil) on the collector for 25 s of the window (folded stacks in $OUT).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
timeout 300 python3 bench/collector_ingest.py --agents 12500 --drivers 8 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-log $OUT/relays_collector.log > $OUT/relays.log 2>&1 &
B=$!
# the window starts once every agent is relayed and the storm's OVERLOAD is over (60-70 s in)
for i in $(seq 60); do P=$(pgrep -f 'm diag.collector --listen' | head -1); [ -n "$P" ] && break; sleep 1; done
sleep 75
py-spy record -p $P -d 25 -r 100 --gil --nonblocking --format raw -o $OUT/collector_gil.txt > $OUT/spy.log 2>&1
wait $B; grep -v '^  driver\|relay: ingest\|relay of nodes' $OUT/relays.log | head -24; tail -2 $OUT/spy.log
