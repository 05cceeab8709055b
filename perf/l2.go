package main

// The L2 workloads: switch and reflect. Both run on topo.Hosts
// rather than a Pair: the switch on three hosts (host 0 sends, host 1
// receives, host 2 is learned and flooded to), the reflector on one. A
// Pair stands for each in the harness (A is host 0, B host 1 or nil,
// LinkA and LinkB their root-side ends), so the UDP and TCP generators run
// unchanged on the switch.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
	"github.com/xdpfwd/xdpfwd/perf/internal/xdpprog"
)

var (
	switchContenders  = []string{"xdpfwd-switch", "bridge-switch"}
	reflectContenders = []string{"xdpfwd-reflect", "xdp-tx-reflect"}
)

// newHosts builds the Hosts of key k, the Pair that stands for them, and
// what the workloads on them need: permanent neighbours between the hosts
// (no ARP crosses a contender during a measurement), and on a single host
// the counter of reflected frames.
func (e *env) newHosts(k pairKey) (_ *topo.Pair, err error) {
	h, err := topo.NewHosts(k.hosts, topo.Options{Queues: k.queues, TxChecksum: k.offloads, RPSCPUs: e.o.podRPSCPUs()})
	if err != nil {
		return nil, err
	}
	p := &topo.Pair{Name: h.Name, A: h.NS[0], LinkA: h.Links[0], PeerA: "eth0", V4A: h.V4[0], V6A: h.V6[0]}
	if len(h.NS) > 1 {
		p.B, p.LinkB, p.PeerB, p.V4B, p.V6B = h.NS[1], h.Links[1], "eth0", h.V4[1], h.V6[1]
	}
	e.pairs[k], e.hosts[p] = p, h
	for i, ns := range h.NS {
		e.res.AddTopology("netns "+ns.Name, "link "+h.Links[i])
	}
	if len(h.NS) > 1 {
		return p, hostNeighbours(h)
	}
	ec, err := newEchoCounter(p)
	if err != nil {
		return p, err
	}
	e.echoes[p] = ec
	return p, nil
}

// closeHosts removes what newHosts built.
func (e *env) closeHosts(p *topo.Pair, h *topo.Hosts) func() error {
	return func() error {
		var err error
		if ec := e.echoes[p]; ec != nil {
			err = ec.Close()
			delete(e.echoes, p)
		}
		return errors.Join(err, h.Close())
	}
}

// ifaceOf is the MAC address and index of ifname in ns (the root
// namespace if ns is nil).
func ifaceOf(ns *topo.NS, ifname string) (hw net.HardwareAddr, idx int, err error) {
	do := func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		hw, idx = iface.HardwareAddr, iface.Index
		return nil
	}
	if ns == nil {
		err = do()
	} else {
		err = ns.Do(do)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", ifname, err)
	}
	return
}

// hostNeighbours gives every host a permanent neighbour entry for every
// other host's IPv4 address.
func hostNeighbours(h *topo.Hosts) error {
	macs := make([]net.HardwareAddr, len(h.NS))
	idxs := make([]int, len(h.NS))
	for i, ns := range h.NS {
		var err error
		if macs[i], idxs[i], err = ifaceOf(ns, "eth0"); err != nil {
			return fmt.Errorf("in %s: %w", ns.Name, err)
		}
	}
	for i, ns := range h.NS {
		for j := range h.NS {
			if i == j {
				continue
			}
			if err := ns.Do(func() error {
				return netlink.NeighSet(&netlink.Neigh{
					LinkIndex: idxs[i], Family: unix.AF_INET, State: netlink.NUD_PERMANENT, IP: h.V4[j].AsSlice(), HardwareAddr: macs[j],
				})
			}); err != nil {
				return fmt.Errorf("neighbour %s in %s: %w", h.V4[j], ns.Name, err)
			}
		}
	}
	return nil
}

// learnHosts, on the switch topology, has every host past the first two
// (which have just pinged each other) send one frame, so that the switch
// under test has learned all of them before a measurement.
func (e *env) learnHosts(p *topo.Pair) error {
	h := e.hosts[p]
	if h == nil {
		return nil
	}
	for i := 2; i < len(h.NS); i++ {
		if _, err := topo.Ping(h.NS[i], h.V4[0], 1, time.Second); err != nil {
			return fmt.Errorf("ping from host %d (%s): %w", i, h.NS[i].Name, err)
		}
	}
	return nil
}

// ---- contenders ----

// xdpfwdModeContender is xdpfwd run with --mode mode on every root-side
// link of the hosts topology; it runs only the workload groups groups.
func xdpfwdModeContender(name, label, mode string, groups ...string) *contender {
	c := xdpfwdContender(name, label, []string{"--mode", mode})
	c.Desc = "xdpfwd run as a child process with --mode " + mode + " on every root-side link of the hosts"
	c.Groups = groups
	c.start = func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
		h := e.hosts[p]
		if h == nil {
			return nil, fmt.Errorf("%s runs only on a hosts topology", name)
		}
		sum := filepath.Join(e.tmp, name+"-summary.json")
		os.Remove(sum)
		args := []string{"run", "--mode", mode}
		for _, l := range h.Links {
			args = append(args, "--link", l)
		}
		args = append(args, "--stats-interval", "0", "--summary", sum)
		bin := e.bins["xdpfwd"]
		if c.bin != "" {
			bin = e.bins[c.bin]
		}
		ch, err := e.startXdpfwd(ctx, p, name, bin, args, []int{e.o.FwdCPU})
		if err != nil {
			return nil, err
		}
		return func() (map[string]any, error) {
			e.child.Store(nil)
			err := ch.stop(10 * time.Second)
			d, derr := xdpfwdDetails(sum)
			return d, errors.Join(err, derr)
		}, nil
	}
	return c
}

// switchBridgeContender is a Linux bridge enslaving every root-side link
// of the switch topology, with the namespace ends' settings of the bridge
// contender (TX checksum off).
func switchBridgeContender() *contender {
	return &contender{
		Name:   "bridge-switch",
		Label:  "Linux bridge (tx-csum off, as the XDP rows)",
		Desc:   "a Linux bridge in the root namespace enslaving the three hosts' veth ends; namespace ends with TX checksum offload off, as for xdpfwd",
		Groups: []string{"switch", "scale"},
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			h := e.hosts[p]
			if h == nil {
				return nil, errors.New("bridge-switch runs only on a hosts topology")
			}
			return e.startBridge(ctx, p, h.Links)
		},
	}
}

// xdpTxReflectContender is the in-kernel reflector: an XDP program on the
// root-side end that swaps the MAC addresses and returns XDP_TX.
func xdpTxReflectContender() *contender {
	return &contender{
		Name:   "xdp-tx-reflect",
		Label:  "in-kernel XDP_TX reflector",
		Desc:   "an XDP program on the root-side end (native XDP) that swaps the MAC addresses and returns XDP_TX",
		Groups: []string{"reflect"},
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			x := &xdpprog.Set{}
			stop := func() (map[string]any, error) { return map[string]any{"xdp_mode": "native"}, x.Close() }
			fail := func(err error) (stopFunc, error) {
				_, serr := stop()
				return nil, errors.Join(err, serr)
			}
			prog, err := xdpprog.LoadMACSwap()
			if err != nil {
				return fail(fmt.Errorf("load XDP_TX reflector: %w", err))
			}
			x.Progs = append(x.Progs, prog)
			if err := x.Attach(nil, p.LinkA, prog); err != nil {
				return fail(err)
			}
			if err := e.waitPath(ctx, p, nil); err != nil {
				return fail(err)
			}
			return stop, nil
		},
	}
}

// ---- XDP programs ----

// ---- the reflect workload ----

// echoCounter counts, on host 0's eth0, the frames that come back from
// the reflector: addressed to eth0 from the root-side end's MAC, the
// reverse of what the reflect sender sends. Its XDP program also gives
// eth0 the NAPI a veth needs to take frames its peer sends with XDP_TX.
type echoCounter struct {
	x        xdpprog.Set
	counts   *ebpf.Map
	src, dst net.HardwareAddr // of the frames sent: eth0's, the root end's
}

func newEchoCounter(p *topo.Pair) (_ *echoCounter, err error) {
	ec := &echoCounter{}
	defer func() {
		if err != nil {
			err = errors.Join(err, ec.Close())
		}
	}()
	if ec.src, _, err = ifaceOf(p.A, p.PeerA); err != nil {
		return nil, err
	}
	if ec.dst, _, err = ifaceOf(nil, p.LinkA); err != nil {
		return nil, err
	}
	if ec.counts, err = ebpf.NewMap(&ebpf.MapSpec{Name: "perf_echoes", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}); err != nil {
		return nil, fmt.Errorf("echo counter map: %w", err)
	}
	ec.x.Maps = append(ec.x.Maps, ec.counts)
	prog, err := xdpprog.LoadEchoCounter(ec.counts, ec.src, ec.dst)
	if err != nil {
		return nil, fmt.Errorf("load echo counter: %w", err)
	}
	ec.x.Progs = append(ec.x.Progs, prog)
	if err := ec.x.Attach(p.A, p.PeerA, prog); err != nil {
		return nil, err
	}
	return ec, nil
}

// read is the number of reflected frames counted so far.
func (ec *echoCounter) read() (uint64, error) {
	var per []uint64
	if err := ec.counts.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("read echo counter: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

func (ec *echoCounter) Close() error { return ec.x.Close() }

// waitReflect waits until frames sent from host 0 come back reflected
// (bounded), and fails early if the forwarder process c (may be nil)
// exits.
func (e *env) waitReflect(ctx context.Context, p *topo.Pair, c *child) error {
	ec := e.echoes[p]
	if ec == nil {
		return fmt.Errorf("%s: no echo counter", p.Name)
	}
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if c != nil && c.exited() {
			return fmt.Errorf("%s exited during start-up%s", c.name, c.logTail())
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		before, err := ec.read()
		if err != nil {
			return err
		}
		s, err := traffic.NewReflectSender(p, ec.dst, ec.src, 64, 64, time.Now().Add(time.Second))
		if err != nil {
			return err
		}
		for end := time.Now().Add(250 * time.Millisecond); s.Sent.Load() < 64 && time.Now().Before(end); {
			time.Sleep(time.Millisecond)
		}
		last = s.Close()
		for end := time.Now().Add(250 * time.Millisecond); time.Now().Before(end); {
			if n, _ := ec.read(); n > before {
				return nil
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return fmt.Errorf("no frame came back to %s within 10s (last send: %v)", p.A.Name, last)
}

// runReflect sends 64-byte frames from host 0 as fast as its AF_XDP
// sender can and counts what comes back with its MACs swapped.
func runReflect(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	ec := e.echoes[p]
	if ec == nil {
		return nil, fmt.Errorf("%s: no echo counter", p.Name)
	}
	tx, err := traffic.NewReflectSender(p, ec.dst, ec.src, w.Size, traffic.MaxPackets, time.Now().Add(e.o.Warmup+e.o.Duration+2*time.Second))
	if err != nil {
		return nil, err
	}
	var rerr error
	a, b, werr := e.window(ctx, func() [3]float64 {
		n, err := ec.read()
		rerr = errors.Join(rerr, err)
		return [3]float64{float64(tx.Sent.Load()), float64(n)}
	})
	if err := errors.Join(werr, rerr, tx.Close()); err != nil {
		return nil, err
	}
	secs := b.cpu.At.Sub(a.cpu.At).Seconds()
	sent, got := b.n[0]-a.n[0], b.n[1]-a.n[1]
	m := map[string]float64{"sent_pps": sent / secs, "pps": got / secs, "cpu_busy_ns": measure.BusyNs(a.cpu, b.cpu), "own_cpu_ns": b.own - a.own}
	if sent > 0 {
		m["loss_pct"] = max(0, 100*(1-got/sent))
	}
	e.cpuMetrics(m, a, b)
	if got == 0 {
		return m, fmt.Errorf("no frame came back (%.0f sent)", sent)
	}
	m["own_cpu_ns_per_pkt"] = m["own_cpu_ns"] / got
	return m, nil
}

// ---- report ----

// runSwitch runs a workload on the switch topology and adds what the
// hosts past the first two received over the whole sample (warm-up
// included): frames the switch flooded to them ("flooded_pkts"), which
// stays near 0 once the switch has learned every host (not measured when
// the workload spreads its flows over them).
func runSwitch(run func(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error)) func(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	return func(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
		h := e.hosts[p]
		rx := func() (n float64) {
			if h == nil {
				return 0
			}
			for i := 2; i < len(h.NS); i++ {
				h.NS[i].Do(func() error {
					l, err := netlink.LinkByName("eth0")
					if err == nil && l.Attrs().Statistics != nil {
						n += float64(l.Attrs().Statistics.RxPackets)
					}
					return err
				})
			}
			return n
		}
		before := rx()
		m, err := run(ctx, e, c, p, w)
		if m != nil && h != nil && len(h.NS) > 2 && w.SpreadFlows == 0 { // spread flows go to them all
			m["flooded_pkts"] = max(0, rx()-before)
		}
		return m, err
	}
}
