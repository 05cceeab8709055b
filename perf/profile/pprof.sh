#!/bin/bash
# Go CPU profile of the fwd library (defaults) at each rate, trafgen as in run.py
P=${PROF_DIR:-/tmp/prof}
cd "$P"
ip netns exec prfB ./sink eth0 200 >/dev/null & SP=$!
sleep 0.5
for rate in 20000 100000 300000; do
  taskset -c 0 ./pfwd prfxa prfxb $P/cpu-$rate.prof 9 > pfwd-$rate.log 2>&1 & FP=$!
  sleep 1
  ip netns exec prfA timeout 20 taskset -c 1 trafgen --dev eth0 --conf udp60.cfg -b ${rate}pps -P 1 -n $((rate*9)) -q >/dev/null 2>&1
  wait $FP
  cat pfwd-$rate.log
done
kill $SP; wait $SP
