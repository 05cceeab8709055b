#!/bin/bash
# usage: topo.sh up|down — the topology of the issue-11 profile (perf/README.md,
# "Profile of one forwarded packet"): netns prfA (eth0 198.18.0.1) — veth —
# prfxa [root] prfxb — veth — netns prfB (eth0 198.18.0.2). "up" also writes
# $P/udp60.cfg, trafgen's 60-byte UDP frame from A to B.
set -e
P=${PROF_DIR:-/tmp/prof}
mkdir -p "$P"
A=prfA B=prfB
case $1 in
up)
  ip netns add $A; ip netns add $B
  ip link add prfa0 type veth peer name prfxa
  ip link add prfb0 type veth peer name prfxb
  ip link set prfa0 netns $A; ip link set prfb0 netns $B
  ip -n $A link set prfa0 name eth0; ip -n $B link set prfb0 name eth0
  for x in prfxa prfxb; do sysctl -qw net.ipv6.conf.$x.disable_ipv6=1; ip link set $x up; done
  ip -n $A addr add 198.18.0.1/24 dev eth0; ip -n $B addr add 198.18.0.2/24 dev eth0
  ip -n $A link set eth0 up; ip -n $B link set eth0 up; ip -n $A link set lo up; ip -n $B link set lo up
  ip netns exec $A ethtool -K eth0 tx off >/dev/null; ip netns exec $B ethtool -K eth0 tx off >/dev/null
  MA=$(ip -n $A -j link show eth0 | python3 -c 'import json,sys;print(json.load(sys.stdin)[0]["address"])')
  MB=$(ip -n $B -j link show eth0 | python3 -c 'import json,sys;print(json.load(sys.stdin)[0]["address"])')
  ip -n $A neigh add 198.18.0.2 lladdr $MB dev eth0 nud permanent
  ip -n $B neigh add 198.18.0.1 lladdr $MA dev eth0 nud permanent
  echo "$MA $MB" > "$P/macs"
  cat > "$P/udp60.cfg" <<CFG
{
  eth(da=$MB, sa=$MA, type=0x0800),
  ipv4(saddr=198.18.0.1, daddr=198.18.0.2, ttl=64, proto=17),
  udp(sp=4000, dp=9),
  fill(0, 18)
}
CFG
  ;;
down)
  ip link del prfxa 2>/dev/null || true; ip link del prfxb 2>/dev/null || true; ip link del prfbr 2>/dev/null || true
  ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true
  ;;
esac
