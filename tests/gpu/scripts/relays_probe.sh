# Issue 21: the 12,500-agent run through real report relays alone, with the
# listen-queue counters before and after, and where the agents of each bench
# driver stand while the run waits for them to reach their relays.
#   bash tests/gpu/scripts/relays_probe.sh   (outputs in $OUT)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
lo() { awk '/^TcpExt:/{if(!h){split($0,k);h=1}else{split($0,v);for(i=2;i<=length(k);i++) if(k[i]~/Listen|SynRetrans|TCPTimeouts|TCPReqQFull/) printf "%s=%s ",k[i],v[i]; print ""}}' /proc/net/netstat; }
echo "somaxconn $(cat /proc/sys/net/core/somaxconn) tcp_max_syn_backlog $(cat /proc/sys/net/ipv4/tcp_max_syn_backlog)"
echo "before: $(lo)"
timeout 300 python3 bench/collector_ingest.py --agents 12500 --drivers 8 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 --collector-log $OUT/relays_collector.log > $OUT/relays.log 2>&1; echo "exit $?"
echo "after: $(lo)"
grep -v 'relay: ingest process\|relay of nodes' $OUT/relays.log | head -60
# then the collector's side alone at the same scale (simulated relays)
timeout 200 python3 bench/collector_ingest.py --agents 12500 --seconds 40 --hang-timeout 10 --nodes-per-relay 32 \
  --simulated-relays --collector-log $OUT/simulated_collector.log > $OUT/simulated.log 2>&1; echo "simulated exit $?"
cat $OUT/simulated.log
