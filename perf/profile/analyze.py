#!/usr/bin/env python3
# Split the machine-wide perf profile of one window into µs per delivered packet.
import json, re, subprocess, sys
res = json.load(open(sys.argv[1]))
COMMS = 'xdpfwd,trafgen,ksoftirqd/0,ksoftirqd/1,swapper'
KEYS = [
 ('trafgen send (packet_sendmsg, incl. softirq it runs)', ['packet_sendmsg']),
 ('veth xmit (veth_xmit, all)', ['veth_xmit']),
 ('veth NAPI poll (veth_poll, all)', ['veth_poll']),
 ('XDP on veth (veth_xdp_rcv)', ['veth_xdp_rcv']),
 ('AF_XDP RX copy (xsk_rcv → __xsk_rcv)', ['__xsk_map_redirect', 'xsk_rcv', '__xsk_rcv']),
 ('AF_XDP RX flush/wakeup (__xsk_map_flush)', ['__xsk_map_flush', 'xsk_map_flush', 'xsk_flush']),
 ('AF_XDP TX (xsk_generic_xmit, incl. veth_xmit)', ['__xsk_generic_xmit', 'xsk_generic_xmit']),
 ('  skb alloc in TX (xsk_build_skb)', ['xsk_build_skb']),
 ('  TX completion (xsk_destruct_skb / skb free)', ['xsk_destruct_skb', 'consume_skb']),
 ('sendto syscall (__sys_sendto)', ['__sys_sendto', '__x64_sys_sendto']),
 ('recvfrom syscall (__sys_recvfrom)', ['__sys_recvfrom']),
 ('ppoll syscall (do_sys_poll)', ['do_sys_poll', '__x64_sys_ppoll']),
 ('scheduler (schedule)', ['schedule', '__schedule']),
 ('bridge (br_handle_frame)', ['br_handle_frame']),
 ('  netfilter in bridge (nf_hook_slow)', ['nf_hook_slow']),
 ('netif_receive (__netif_receive_skb_core)', ['__netif_receive_skb_core', '__netif_receive_skb_core.constprop.0']),
 ('net_rx_action (softirq)', ['net_rx_action']),
]
def report(f, extra):
    return subprocess.run(f'perf report -i {f} --stdio -g none --percentage absolute {extra}', shell=True, capture_output=True, text=True).stdout
out = {}
for r in res:
    if 'perf' not in r:
        continue
    f, pk = r['perf']['file'], r['perf']['delivered']
    hdr = report(f, '--no-children --sort comm')
    total = int(re.search(r'Event count \(approx\.\): (\d+)', hdr).group(1))  # ns
    comm = {}
    for line in hdr.splitlines():
        m = re.match(r'\s+([\d.]+)%\s+(\S.*?)\s*$', line)
        if m:
            comm[m.group(2)] = float(m.group(1))
    us = lambda pct: pct / 100 * total / 1e3 / pk
    row = {'packets': pk, 'pps': pk / r['perf']['secs']}
    row['by comm'] = {k: round(us(v), 3) for k, v in comm.items() if k in ('xdpfwd', 'trafgen', 'ksoftirqd/0', 'ksoftirqd/1') or k == 'swapper'}
    ch = report(f, f'--children --sort sym --comms {COMMS}')
    sym = {}
    for line in ch.splitlines():
        m = re.match(r'\s+([\d.]+)%\s+([\d.]+)%\s+\[([k.])\]\s+(\S+)', line)
        if m:
            sym[m.group(4)] = (float(m.group(1)), float(m.group(2)), m.group(3))
    keys = {}
    for label, names in KEYS:
        v = max([sym[n][0] for n in names if n in sym] or [0])
        keys[label] = round(us(v), 3)
    row['inclusive'] = keys
    # user space of xdpfwd: self time in its own binary
    u = report(f, '--no-children --sort dso,sym --comms xdpfwd')
    usr = []
    for line in u.splitlines():
        m = re.match(r'\s+([\d.]+)%\s+(\S+)\s+\[([k.])\]\s+(\S+)', line)
        if m:
            usr.append((m.group(2), m.group(4), float(m.group(1))))
    row['xdpfwd user (self, by dso)'] = round(us(sum(p for d, s, p in usr if d == 'xdpfwd')), 3)
    row['xdpfwd kernel (self)'] = round(us(sum(p for d, s, p in usr if d != 'xdpfwd')), 3)
    row['xdpfwd top self'] = [(d, s, round(us(p), 3)) for d, s, p in usr[:15]]
    # top kernel self symbols in our comms
    ks = report(f, f'--no-children --sort sym --comms {COMMS}')
    top = []
    for line in ks.splitlines():
        m = re.match(r'\s+([\d.]+)%\s+\[([k.])\]\s+(\S+)', line)
        if m and m.group(3) not in ('pv_native_safe_halt', 'default_idle', 'native_safe_halt'):
            top.append((m.group(3), round(us(float(m.group(1))), 3)))
    row['top self (our comms)'] = top[:20]
    out[f"{r['c']}-{r['rate']}"] = row
json.dump(out, open(sys.argv[2], 'w'), indent=1)
print(json.dumps(out, indent=1))
