#!/usr/bin/env python3
# Fixed-rate profile of issue 11: xdpfwd vs the Linux bridge vs the baseline
# (trafgen alone into XDP_DROP on the ingress root end), 60-byte UDP from
# trafgen pinned to CPU 1, xdpfwd pinned to CPU 0, XDP_DROP sink in B.
# Needs root, trafgen (netsniff-ng), ethtool, perf (linux-perf).
#
#   P=/tmp/prof; mkdir -p $P
#   go build -o $P/xdpfwd ./cmd/xdpfwd
#   go build -o $P/sink ./perf/profile/sink
#   go build -o $P/pfwd ./perf/profile/pfwd
#   perf/profile/topo.sh up
#   python3 perf/profile/profile.py          # RATES, REPS, CONT, PERF, OUT
#   python3 perf/profile/analyze.py $P/results.json $P/analysis.json
#   perf/profile/pprof.sh                    # Go CPU profiles: $P/cpu-RATE.prof
#   perf/profile/topo.sh down
import json, os, re, subprocess, sys, time, urllib.request, glob, signal
P = os.environ.get('PROF_DIR', '/tmp/prof')
RATES = [int(x) for x in os.environ.get('RATES', '20000,100000,300000').split(',')]
REPS = int(os.environ.get('REPS', '3'))
CONT = os.environ.get('CONT', 'xdpfwd,bridge,none').split(',')
WARM, WIN, PERFWIN = 1.0, 6.0, 4.0
DOPERF = os.environ.get('PERF', '1') == '1'
MPORT = 9477
HZ = os.sysconf('SC_CLK_TCK')

def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True, **kw).stdout

def procstat():
    f = open('/proc/stat').readline().split()[1:]
    v = [int(x) for x in f]
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # user nice system irq softirq steal
    return busy / HZ, sum(v[:8]) / HZ

def ethcount(ns, dev, key):
    out = sh(f'ip netns exec {ns} ethtool -S {dev}') if ns else sh(f'ethtool -S {dev}')
    m = re.search(key + r': (\d+)', out)
    return int(m.group(1))

def proc(pid):
    if pid is None:
        return {}
    st = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    d = {'utime': int(st[11]) / HZ, 'stime': int(st[12]) / HZ, 'run_ns': 0, 'wait_ns': 0, 'vcs': 0, 'ncs': 0}
    for t in glob.glob(f'/proc/{pid}/task/*'):
        try:
            a, b, _ = open(t + '/schedstat').read().split()
            d['run_ns'] += int(a); d['wait_ns'] += int(b)
            for line in open(t + '/status'):
                if line.startswith('voluntary_ctxt_switches'):
                    d['vcs'] += int(line.split()[1])
                elif line.startswith('nonvoluntary_ctxt_switches'):
                    d['ncs'] += int(line.split()[1])
        except FileNotFoundError:
            pass
    return d

METRICS = ['rx_packets_total', 'tx_packets_total', 'tx_kicks_total', 'rx_fill_wakeups_total', 'rx_batch_packets_count',
           'worker_rounds_total', 'worker_sleeps_total', 'worker_polls_total', 'worker_poll_timeouts_total',
           'worker_poll_eventfd_wakeups_total', 'worker_eventfd_writes_total']
def scrape():
    try:
        body = urllib.request.urlopen(f'http://127.0.0.1:{MPORT}/metrics', timeout=2).read().decode()
    except Exception:
        return {}
    d = {m: 0.0 for m in METRICS}
    for line in body.splitlines():
        if not line.startswith('xdpfwd_'):
            continue
        name = line.split('{')[0].split(' ')[0][len('xdpfwd_'):]
        if name in d:
            d[name] += float(line.rsplit(' ', 1)[1])
    return d

def descendants(root):
    kids = {}
    for d in glob.glob('/proc/[0-9]*/stat'):
        try:
            st = open(d).read().rsplit(')', 1)[1].split()
            kids.setdefault(int(st[1]), []).append(int(d.split('/')[2]))
        except (FileNotFoundError, ProcessLookupError):
            pass
    out, todo = [], [root]
    while todo:
        x = todo.pop()
        out.append(x)
        todo += kids.get(x, [])
    return out

def cputime(pid):
    try:
        st = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
        return (int(st[11]) + int(st[12])) / HZ
    except FileNotFoundError:
        return 0.0

KSOFT = [int(d.split('/')[2]) for d in glob.glob('/proc/[0-9]*/comm') if open(d).read().startswith('ksoftirqd/')]
GEN = [None]

def snap(c, pid):
    b, t = procstat()
    own = sum(cputime(x) for x in KSOFT) + (cputime(pid) if pid else 0)
    if GEN[0]:
        own += sum(cputime(x) for x in descendants(GEN[0]))
    s = {'t': time.monotonic(), 'busy': b, 'total': t, 'own': own, 'proc': proc(pid), 'm': scrape()}
    if c == 'none':
        s['delivered'] = ethcount(None, 'prfxa', 'rx_queue_0_xdp_drops')
    else:
        s['delivered'] = ethcount('prfB', 'eth0', 'rx_queue_0_xdp_drops')
    return s

def start(c):
    if c == 'xdpfwd':
        p = subprocess.Popen(['taskset', '-c', '0', f'{P}/xdpfwd', 'run', '--link', 'prfxa', '--link', 'prfxb',
                              '--stats-interval', '0', '--metrics', f'127.0.0.1:{MPORT}'],
                             stdout=open(f'{P}/xdpfwd.log', 'a'), stderr=subprocess.STDOUT)
        for _ in range(50):
            time.sleep(0.1)
            if scrape():
                break
        return p, p.pid
    if c == 'bridge':
        mb = open(f'{P}/macs').read().split()[1]
        sh('ip link add prfbr type bridge && ip link set prfxa master prfbr && ip link set prfxb master prfbr && '
           f'ip link set prfbr up && bridge fdb replace {mb} dev prfxb master static')
        time.sleep(0.5)
        return None, None
    if c == 'none':
        p = subprocess.Popen([f'{P}/sink', 'prfxa', '600'], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        return p, None

def stop(c, p):
    if p:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=10)
    if c == 'bridge':
        sh('ip link del prfbr')
    time.sleep(0.3)

def delta(a, b):
    d = {k: b[k] - a[k] for k in ('t', 'busy', 'total', 'delivered', 'own')}
    d['proc'] = {k: b['proc'][k] - a['proc'][k] for k in b['proc']}
    d['m'] = {k: b['m'].get(k, 0) - a['m'].get(k, 0) for k in b['m']}
    return d

results = []
SINK = subprocess.Popen(['ip', 'netns', 'exec', 'prfB', f'{P}/sink', 'eth0', '3000'], stdout=subprocess.DEVNULL)
time.sleep(0.5)
for rep in range(REPS):
    for rate in RATES:
        for c in CONT:
            p, pid = start(c)
            total = WARM + WIN + (PERFWIN + 0.5 if DOPERF and rep == 0 and c != 'none' else 0) + 1.0
            n = int(rate * total)
            g = subprocess.Popen(f'ip netns exec prfA timeout {int(total)+10} taskset -c 1 trafgen --dev eth0 --conf {P}/udp60.cfg -b {rate}pps -P 1 -n {n} -q',
                                 shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            GEN[0] = g.pid
            time.sleep(WARM)
            s0 = snap(c, pid); time.sleep(WIN); s1 = snap(c, pid)
            d = delta(s0, s1)
            r = {'rep': rep, 'rate': rate, 'c': c, **d}
            if DOPERF and rep == 0 and c != 'none':
                f = f'{P}/perf-{c}-{rate}.data'
                a = snap(c, pid)
                sh(f'perf record -a -g -F 999 -o {f} -- sleep {PERFWIN}')
                b = snap(c, pid)
                r['perf'] = {'file': f, 'delivered': b['delivered'] - a['delivered'], 'secs': b['t'] - a['t']}
            g.wait(timeout=total + 20)
            stop(c, p)
            pk = d['delivered']
            rr = {'offered_pps': pk / d['t'], 'machine_us': 1e6 * d['busy'] / pk if pk else 0,
                  'machine_load': d['busy'] / d['total'], 'own_us': 1e6 * d['own'] / pk if pk else 0}
            if pid:
                rr.update({'user_us': 1e6 * d['proc']['utime'] / pk, 'sys_us': 1e6 * d['proc']['stime'] / pk,
                           'run_us': d['proc']['run_ns'] / 1e3 / pk,
                           'vcs_per_1k': 1e3 * d['proc']['vcs'] / pk, 'ncs_per_1k': 1e3 * d['proc']['ncs'] / pk})
                rx = d['m'].get('rx_packets_total', 0)
                if rx:
                    for k in METRICS[2:]:
                        rr[k + '_per_1k'] = 1e3 * d['m'][k] / rx
            r['fig'] = rr
            results.append(r)
            print(json.dumps({'rep': rep, 'rate': rate, 'c': c, **{k: round(v, 3) for k, v in rr.items()}}), flush=True)
json.dump(results, open(os.environ.get('OUT', f'{P}/results.json'), 'w'), indent=1)
SINK.send_signal(signal.SIGTERM); SINK.wait(timeout=10)
