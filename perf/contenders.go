// The contenders: xdpfwd in each configuration, the Linux bridge, the
// in-kernel XDP redirect, asavie/xdp and the no-forwarder baseline, each
// with how it is built, started, waited for and stopped, and the checks
// that it left nothing behind.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/report"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
	"github.com/xdpfwd/xdpfwd/perf/internal/xdpprog"
)

// stopFunc stops a running contender and returns what it reports about
// itself (modes, drops), recorded in results.json.
type stopFunc func() (map[string]any, error)

// contender is one way of joining the two root-side veth ends.
type contender struct {
	Name  string // --only name, results key
	Label string // row label
	Desc  string // one line for the README and results.json

	// Offloads runs it on the pair whose namespace ends keep their
	// default offloads (TX checksum and so TSO on); all others run with TX
	// checksum off there, which xdpfwd needs.
	Offloads bool
	// Baseline marks the no-forwarder reference: it runs only the cost
	// workloads, and nothing reaches the destination.
	Baseline bool
	// Groups, if set, are the only workload groups it runs (the xps
	// configurations matter only where a flow can change queue).
	Groups []string
	// OnRequest: it runs only when --only names it, not in a run of all.
	OnRequest bool

	build func(ctx context.Context, e *env) error // once; an error means "cannot run here"
	start func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error)

	// bin is the e.bins key of an xdpfwd contender's binary ("": xdpfwd).
	bin string
}

// xdpfwdConfigs are the xdpfwd configurations perf compares, one line each.
// A configuration whose flags the built xdpfwd does not know is reported as
// not run, so a line can go in before its flag lands.
var xdpfwdConfigs = []struct {
	Name, Label string
	Args        []string
	Offloads    bool     // run on the pair with default endpoint offloads
	Groups      []string // only these workload groups; nil: all
	OnRequest   bool     // only when --only names it
}{
	{Name: "xdpfwd", Label: "xdpfwd (default)"},
	{Name: "xdpfwd-inline128", Label: "xdpfwd --inline-max 128", Args: []string{"--inline-max", "128"}},
	{Name: "xdpfwd-inline-off", Label: "xdpfwd --inline-max off", Args: []string{"--inline-max", "off"}},
	{Name: "xdpfwd-offload", Label: "xdpfwd (default endpoint offloads)", Offloads: true},
	// Each TX queue choice, on the workloads where a flow arrives on two
	// RX queues (their pair has two queues, so these run with --queues 2).
	{Name: "xdpfwd-xps-cpu", Label: "xdpfwd --xps cpu", Args: []string{"--xps", "cpu"}, Groups: []string{"reorder", "latency"}},
	{Name: "xdpfwd-xps-hash", Label: "xdpfwd --xps hash", Args: []string{"--xps", "hash"}, Groups: []string{"reorder", "latency"}},
	{Name: "xdpfwd-xps-sticky", Label: "xdpfwd --xps sticky", Args: []string{"--xps", "sticky"}, Groups: []string{"reorder", "latency"}},
	// One worker: the latency workload's reference (nothing to hand over).
	{Name: "xdpfwd-q1", Label: "xdpfwd --queues 1", Args: []string{"--queues", "1"}, Groups: []string{"latency"}},
	// Off by default, run when --only names them (each adds a sixth to
	// the run time): the busy mode beside the busy-polling peers (its
	// workloads are theirs), coalescing, kernel busy polling, frag order.
	{Name: "xdpfwd-busy", Label: "xdpfwd --spin busy", Args: []string{"--spin", "busy"}, OnRequest: true},
	{Name: "xdpfwd-coalesce25", Label: "xdpfwd --coalesce 25us", Args: []string{"--coalesce", "25us"}, Groups: []string{"cost", "rr", "latency"}, OnRequest: true},
	{Name: "xdpfwd-busypoll", Label: "xdpfwd --busy-poll 20us", Args: []string{"--busy-poll", "20us"}, Groups: []string{"cost", "rr", "latency"}, OnRequest: true},
	{Name: "xdpfwd-frag3", Label: "xdpfwd --frag-order 3", Args: []string{"--frag-order", "3"}, OnRequest: true},
	// The UMEM on 4 KiB pages, beside the default's huge pages (hugetlb,
	// or THP of shmem where transparent_hugepage/shmem_enabled allows):
	// what the memfd a handover needs costs where neither is there.
	{Name: "xdpfwd-4k", Label: "xdpfwd --hugepages off", Args: []string{"--hugepages", "off"}, Groups: []string{"udp", "cost"}, OnRequest: true},
}

// contenderTable lists every contender in table order; the reference
// (xdpfwd's default) comes first.
func contenderTable() []*contender {
	var cs []*contender
	for _, cfg := range xdpfwdConfigs {
		c := xdpfwdContender(cfg.Name, cfg.Label, cfg.Args)
		c.Offloads, c.Groups, c.OnRequest = cfg.Offloads, cfg.Groups, cfg.OnRequest
		cs = append(cs, c)
	}
	cs = append(cs, captureContenders()...) // xdpfwd with a capture client attached
	return append(cs,
		bridgeContender("bridge", "Linux bridge (tx-csum off, as the XDP rows)", false),
		bridgeContender("bridge-offload", "Linux bridge (default offloads)", true),
		redirectContender(),
		asavieContender(),
		// Other AF_XDP forwarders (peers.go), not run where
		// not installed.
		testpmdContender(),
		ovsAfxdpContender(),
		dropBaseline(),
		// The switch and reflect workloads' contenders (l2.go).
		xdpfwdModeContender("xdpfwd-switch", "xdpfwd --mode switch", "switch", "switch", "scale"),
		switchBridgeContender(),
		ovsAfxdpSwitchContender(),
		xdpfwdModeContender("xdpfwd-reflect", "xdpfwd --mode reflect", "reflect", "reflect"),
		xdpTxReflectContender(),
	)
}

// result is c's entry in the results, before it runs.
func (c *contender) result() report.ContenderResult {
	return report.ContenderResult{Name: c.Name, Label: c.Label, Desc: c.Desc, Baseline: c.Baseline}
}

func selectContenders(only []string) ([]*contender, error) {
	all := contenderTable()
	if len(only) == 0 {
		return slices.DeleteFunc(all, func(c *contender) bool { return c.OnRequest }), nil
	}
	var names []string
	for _, c := range all {
		names = append(names, c.Name)
	}
	var out []*contender
	for _, c := range all {
		for _, n := range only {
			if n == c.Name {
				out = append(out, c)
				break
			}
		}
	}
	for _, n := range only {
		found := false
		for _, c := range all {
			found = found || c.Name == n
		}
		if !found {
			return nil, fmt.Errorf("--only %q: no such contender (have %s)", n, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// ---- xdpfwd ----

func xdpfwdContender(name, label string, extra []string) *contender {
	var c *contender
	c = &contender{
		Name:  name,
		Label: label,
		Desc:  "xdpfwd run as a child process: AF_XDP sockets on one shared UMEM, zero copies in user space" + argsNote(extra),
		build: func(ctx context.Context, e *env) error {
			bin, err := e.buildXdpfwd(ctx)
			if err != nil {
				return err
			}
			help, _ := exec.Command(bin, "run", "--help").CombinedOutput()
			e.xdpfwdMetrics = strings.Contains(string(help), "-metrics ")
			for _, a := range extra {
				if f, ok := strings.CutPrefix(a, "--"); ok {
					f, _, _ = strings.Cut(f, "=")
					if !strings.Contains(string(help), "-"+f+" ") && !strings.Contains(string(help), "-"+f+"\n") {
						return fmt.Errorf("this xdpfwd has no --%s flag yet", f)
					}
				}
			}
			return nil
		},
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			sum := filepath.Join(e.tmp, name+"-summary.json")
			os.Remove(sum)
			args := []string{"run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--summary", sum}
			k := e.keyOf(p)
			cpus := []int{e.o.FwdCPU}
			switch {
			case k.defaults:
				// As a user would run it: every CPU, the queue count
				// xdpfwd picks.
				cpus = e.allCPUs
			case k.queues > 1 && !slices.Contains(extra, "--queues"):
				n := k.queues
				if k.workers > 0 {
					n = k.workers
				}
				args = append(args, "--queues", strconv.Itoa(n))
			}
			args = append(args, extra...)
			bin := e.bins["xdpfwd"]
			if c.bin != "" {
				bin = e.bins[c.bin]
			}
			ch, err := e.startXdpfwd(ctx, p, name, bin, args, cpus)
			if err != nil {
				return nil, err
			}
			return func() (map[string]any, error) {
				e.child.Store(nil)
				err := ch.stop(10 * time.Second)
				d, derr := xdpfwdDetails(sum)
				return d, errors.Join(err, derr)
			}, nil
		},
	}
	return c
}

func argsNote(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return " (" + strings.Join(args, " ") + ")"
}

// xdpfwdDetails reads the fields of xdpfwd's --summary that explain a run.
func xdpfwdDetails(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("xdpfwd summary: %w", err)
	}
	var s struct {
		Links map[string]struct {
			RXPackets uint64            `json:"rx_packets"`
			TXPackets uint64            `json:"tx_packets"`
			Drops     map[string]uint64 `json:"drops"`
			XDPMode   string            `json:"xdp_mode"`
			BindMode  string            `json:"bind_mode"`
			Queues    int               `json:"queues"`
		} `json:"links"`
		UMEM struct {
			Backing string `json:"backing"`
			Leaked  int    `json:"leaked_addresses"`
		} `json:"umem"`
		XPS struct {
			Mode      string `json:"mode"`
			Queues    int    `json:"queues"`
			Flows     uint64 `json:"flows"`
			Moves     uint64 `json:"moves"`
			Fallbacks uint64 `json:"fallbacks"`
		} `json:"xps"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("xdpfwd summary %s: %w", path, err)
	}
	d := map[string]any{"umem_backing": s.UMEM.Backing, "leaked_addresses": s.UMEM.Leaked}
	var rx, tx, drops uint64
	why := map[string]uint64{}
	for _, l := range s.Links {
		d["xdp_mode"], d["bind_mode"], d["queues"] = l.XDPMode, l.BindMode, l.Queues
		rx += l.RXPackets
		tx += l.TXPackets
		for r, v := range l.Drops {
			drops += v
			why[r] += v
		}
	}
	d["rx_packets"], d["tx_packets"], d["drops"] = rx, tx, drops
	for r, v := range why {
		if v > 0 {
			d["drops_"+r] = v // by reason, over every link
		}
	}
	if s.XPS.Mode != "" && s.XPS.Mode != "single-queue" {
		// Only a run with several queues has a TX queue choice; its keys
		// stay in the details when a later one-queue run is merged in.
		d["xps_mode"], d["xps_flows"], d["xps_moves"], d["xps_fallbacks"] = s.XPS.Mode, s.XPS.Flows, s.XPS.Moves, s.XPS.Fallbacks
		d["workers"] = s.XPS.Queues // its TX queues: one per worker
	}
	if s.UMEM.Leaked != 0 {
		return d, fmt.Errorf("xdpfwd leaked %d UMEM addresses", s.UMEM.Leaked)
	}
	return d, nil
}

// ---- asavie/xdp ----

func asavieContender() *contender {
	return &contender{
		Name:  "asavie",
		Label: "asavie/xdp forwarder",
		Desc:  "a forwarder on github.com/asavie/xdp v0.3.3 (perf/asavie): one socket and UMEM per link, frames copied between them",
		build: func(ctx context.Context, e *env) error {
			bin := filepath.Join(e.tmp, "asavie-fwd")
			if err := goBuild(ctx, filepath.Join(e.root, "perf", "asavie"), ".", bin); err != nil {
				return err
			}
			e.bins["asavie"] = bin
			return nil
		},
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			sum := filepath.Join(e.tmp, "asavie-summary.json")
			os.Remove(sum)
			args := []string{"--link", p.LinkA, "--link", p.LinkB, "--summary", sum}
			cpus := []int{e.o.FwdCPU}
			if k := e.keyOf(p); k.defaults {
				cpus = e.allCPUs
			} else if k.queues > 1 {
				args = append(args, "--queues", strconv.Itoa(k.queues))
			}
			c, err := e.startForwarder(ctx, p, "asavie-fwd", e.bins["asavie"], args, cpus)
			if err != nil {
				return nil, err
			}
			return func() (map[string]any, error) {
				e.child.Store(nil)
				err := c.stop(10 * time.Second)
				var d map[string]any
				if b, rerr := os.ReadFile(sum); rerr == nil {
					json.Unmarshal(b, &d)
				} else {
					err = errors.Join(err, fmt.Errorf("asavie-fwd summary: %w", rerr))
				}
				return d, err
			}, nil
		},
	}
}

// startForwarder starts a forwarder process pinned to cpus (the forwarder
// CPU, or all of them for a forwarder run with its defaults) and waits
// until traffic crosses it.
func (e *env) startForwarder(ctx context.Context, p *topo.Pair, name, bin string, args []string, cpus []int) (*child, error) {
	begin := time.Now()
	c, err := startChild(name, bin, args, cpus, filepath.Join(e.tmp, name+".log"))
	if err != nil {
		return nil, err
	}
	c.started = begin
	if err := e.waitPath(ctx, p, c); err != nil {
		return nil, errors.Join(err, c.stop(5*time.Second))
	}

	e.child.Store(c)
	return c, nil
}

// ---- Linux bridge ----

func bridgeContender(name, label string, offloads bool) *contender {
	desc := "a Linux bridge in the root namespace enslaving both veth ends; namespace ends with TX checksum offload off, as for the XDP contenders"
	if offloads {
		desc = "a Linux bridge in the root namespace enslaving both veth ends; namespace ends with their default offloads (TX checksum, TSO, GSO)"
	}
	return &contender{
		Name:     name,
		Label:    label,
		Desc:     desc,
		Offloads: offloads,
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			return e.startBridge(ctx, p, []string{p.LinkA, p.LinkB})
		},
	}
}

// startBridge creates a Linux bridge in the root namespace enslaving links
// and waits until traffic crosses it; its stop removes it.
func (e *env) startBridge(ctx context.Context, p *topo.Pair, links []string) (stopFunc, error) {
	brName := "xf" + pairID(p) + "br"
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: brName, MTU: 1500}}
	if err := netlink.LinkAdd(br); err != nil {
		return nil, fmt.Errorf("create bridge %s: %w", brName, err)
	}
	e.res.AddTopology("bridge " + brName)
	l, err := netlink.LinkByName(brName)
	if err != nil {
		return nil, fmt.Errorf("look up bridge %s: %w", brName, err)
	}
	index := l.Attrs().Index
	stop := func() (map[string]any, error) {
		var errs []error
		for _, n := range links {
			if pl, err := netlink.LinkByName(n); err == nil {
				errs = append(errs, netlink.LinkSetNoMaster(pl))
			}
		}
		if cur, err := netlink.LinkByName(brName); err == nil && cur.Attrs().Index == index {
			errs = append(errs, netlink.LinkDel(cur))
		}
		return map[string]any{"bridge_nf_call_iptables": e.res.Machine.BridgeNF}, errors.Join(errs...)
	}
	fail := func(err error) (stopFunc, error) {
		_, serr := stop()
		return nil, errors.Join(err, serr)
	}
	// No IPv6 on the bridge either: the root stack then sends
	// nothing into the path being measured.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+brName+"/disable_ipv6", []byte("1\n"), 0); err != nil && !os.IsNotExist(err) {
		return fail(fmt.Errorf("disable IPv6 on %s: %w", brName, err))
	}
	for _, n := range links {
		pl, err := netlink.LinkByName(n)
		if err != nil {
			return fail(err)
		}
		if err := netlink.LinkSetMasterByIndex(pl, index); err != nil {
			return fail(fmt.Errorf("enslave %s to %s: %w", n, brName, err))
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fail(fmt.Errorf("set %s up: %w", brName, err))
	}
	if err := e.waitPath(ctx, p, nil); err != nil {
		return fail(err)
	}
	return stop, nil
}

// pairID is the random part of the pair's names ("xdpfwd-<id>").
func pairID(p *topo.Pair) string {
	return strings.TrimPrefix(p.Name, "xdpfwd-")
}

// ---- in-kernel XDP redirect ----

func redirectContender() *contender {
	return &contender{
		Name:  "xdp-redirect",
		Label: "in-kernel XDP redirect (upper bound)",
		Desc:  "bpf_redirect_map into a DEVMAP on both root ends (native XDP), XDP_PASS on the namespace ends so they accept redirected frames",
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			x := &xdpprog.Set{}
			stop := func() (map[string]any, error) { return map[string]any{"xdp_mode": "native"}, x.Close() }
			fail := func(err error) (stopFunc, error) {
				_, serr := stop()
				return nil, errors.Join(err, serr)
			}
			dm, err := ebpf.NewMap(&ebpf.MapSpec{Name: "perf_devmap", Type: ebpf.DevMap, KeySize: 4, ValueSize: 4, MaxEntries: 2})
			if err != nil {
				return fail(fmt.Errorf("DEVMAP: %w", err))
			}
			x.Maps = append(x.Maps, dm)
			for i, n := range []string{p.LinkA, p.LinkB} {
				l, err := netlink.LinkByName(n)
				if err != nil {
					return fail(err)
				}
				if err := dm.Put(uint32(i), uint32(l.Attrs().Index)); err != nil {
					return fail(fmt.Errorf("DEVMAP[%d] = %s: %w", i, n, err))
				}
			}
			pass, err := xdpprog.LoadAction("perf_pass", xdpprog.Pass)
			if err != nil {
				return fail(fmt.Errorf("load XDP_PASS program: %w", err))
			}
			x.Progs = append(x.Progs, pass)
			// Namespace ends first, so no redirected frame meets a peer
			// that cannot take it.
			if err := x.Attach(p.A, p.PeerA, pass); err != nil {
				return fail(err)
			}
			if err := x.Attach(p.B, p.PeerB, pass); err != nil {
				return fail(err)
			}
			for i, n := range []string{p.LinkA, p.LinkB} {
				prog, err := xdpprog.LoadRedirect(dm, int32(1-i)) // A → B's slot, B → A's
				if err != nil {
					return fail(fmt.Errorf("load redirect program: %w", err))
				}
				x.Progs = append(x.Progs, prog)
				if err := x.Attach(nil, n, prog); err != nil {
					return fail(err)
				}
			}
			if err := e.waitPath(ctx, p, nil); err != nil {
				return fail(err)
			}
			return stop, nil
		},
	}
}

// ---- no forwarder: the CPU-cost baseline ----

func dropBaseline() *contender {
	return &contender{
		Name:     "baseline-drop",
		Label:    "no forwarder (XDP_DROP at ingress)",
		Desc:     "the generator alone: its packets are dropped by XDP on the ingress root end; subtracted from every contender's CPU cost",
		Baseline: true,
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			x := &xdpprog.Set{}
			stop := func() (map[string]any, error) { return nil, x.Close() }
			prog, err := xdpprog.LoadAction("perf_drop", xdpprog.Drop)
			if err != nil {
				return nil, fmt.Errorf("load XDP_DROP program: %w", err)
			}
			x.Progs = append(x.Progs, prog)
			if err := x.Attach(nil, p.LinkA, prog); err != nil {
				stop()
				return nil, err
			}
			return stop, nil
		},
	}
}

// waitPath waits until A can ping B across the contender (bounded), and
// fails early if the forwarder process c (may be nil) exits. c's ready
// time is when the first ping came back: within readyProbe of when the
// path opened.
func (e *env) waitPath(ctx context.Context, p *topo.Pair, c *child) error {
	if p.B == nil {
		return e.waitReflect(ctx, p, c)
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
		if _, err := topo.Ping(p.A, p.V4B, 1, readyProbe); err == nil {
			if c != nil {
				c.ready = time.Since(c.started)
			}
			return e.learnHosts(p)
		} else {
			last = err
		}
		// A forwarder that serves only some of a multi-queue link's RX
		// queues (xdpfwd with fewer --queues than the link has, before
		// every RX queue got a socket) loses the ping if its flow hashes
		// to another queue: then a path is any of 16 UDP flows crossing.
		if e.queuesOf(p) > 1 && udpProbe(p, 16) {
			return nil
		}
	}
	return fmt.Errorf("no path from %s to %s within 10s: %w", p.A.Name, p.B.Name, last)
}

// readyProbe is how long waitPath's pings wait for their reply: the
// grain of a forwarder's ready time (a ping of 250 ms made every start
// under 250 ms read 256 and every one above it 509).
const readyProbe = 20 * time.Millisecond

// udpProbe sends one datagram from each of flows sockets (distinct source
// ports) in A to B and reports whether any arrived within 250 ms.
func udpProbe(p *topo.Pair, flows int) bool {
	rfd, port, err := traffic.UDPSocket(p.B, p.V4B)
	if err != nil {
		return false
	}
	defer unix.Close(rfd)
	to := traffic.Sockaddr4(netip.AddrPortFrom(p.V4B, uint16(port)))
	for range flows {
		fd, _, err := traffic.UDPSocket(p.A, p.V4A)
		if err != nil {
			return false
		}
		unix.Sendto(fd, []byte("xdpfwd-perf-probe"), 0, to)
		unix.Close(fd)
	}
	buf := make([]byte, 64)
	for end := time.Now().Add(250 * time.Millisecond); time.Now().Before(end); {
		if n, _, err := unix.Recvfrom(rfd, buf, 0); err == nil && n > 0 {
			return true
		}
	}
	return false
}

// checkLinksClean verifies a stopped contender left no XDP program on the
// root ends; one attached through netlink (as asavie/xdp does) is removed.
func (e *env) checkLinksClean(p *topo.Pair) error {
	var errs []error
	links := []string{p.LinkA, p.LinkB}
	if h := e.hosts[p]; h != nil {
		links = h.Links // every host's, and a one-host topology has no LinkB
	}
	for _, n := range links {
		on, id, err := xdpprog.Attached(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !on {
			continue
		}
		derr := xdpprog.DetachNetlink(n)
		if on2, _, _ := xdpprog.Attached(n); on2 {
			errs = append(errs, fmt.Errorf("XDP program %d left on %s and could not be removed: %v", id, n, derr))
		} else {
			errs = append(errs, fmt.Errorf("XDP program %d was left on %s (removed)", id, n))
		}
	}
	return errors.Join(errs...)
}
