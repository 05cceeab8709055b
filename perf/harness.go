// The run: what contenders and workloads share during it (env), the
// options' defaults and CPU placement, and the loop that builds the
// topology, runs every contender on every workload round after round and
// removes everything it built.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
	"github.com/xdpfwd/xdpfwd/perf/internal/report"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
)

// env is what contenders and workloads share during a run.
type env struct {
	o     *Options
	res   *report.Results
	root  string // perf's module root: perf/asavie, perf/README.md
	src   string // the module root xdpfwd is built from (--src)
	tmp   string // builds, logs, summaries
	bins  map[string]string
	pairs map[pairKey]*topo.Pair
	// hosts are the topologies of the switch and reflect workloads
	// (topo.Hosts), by the Pair that stands for them: A is host 0, B host
	// 1 (nil with one host), LinkA and LinkB their root-side ends.
	hosts map[*topo.Pair]*topo.Hosts
	// echoes count, on a one-host topology's namespace end, the frames
	// that come back with their MACs swapped (the reflect workload).
	echoes map[*topo.Pair]*echoCounter
	own    *measure.OwnCPU
	child  atomic.Pointer[child] // the running forwarder process, if any
	// allCPUs are the CPUs perf may use: where a forwarder started with
	// its defaults (pairKey.defaults) runs.
	allCPUs []int
	// xdpfwdMetrics: the built xdpfwd has --metrics, so perf can read
	// its own counters over a window.
	xdpfwdMetrics bool

	xdpfwdOnce sync.Once
	xdpfwdErr  error
}

// pairKey says which pair a contender runs a workload on: its endpoint
// offloads, the workload's queue count, and whether forwarders run there
// with their defaults (no --queues, not pinned: workload.FwdDefaults).
type pairKey struct {
	offloads bool
	queues   int
	defaults bool
	hosts    int // > 0: topo.NewHosts(hosts) instead of a Pair (workload.Hosts)
	workers  int // > 0: xdpfwd's --queues on this pair (workload.Workers)
}

func (k pairKey) String() string {
	s := fmt.Sprintf("%d queue(s), tx checksum offload %s", k.queues, map[bool]string{false: "off", true: "on"}[k.offloads])
	if k.defaults {
		s += ", forwarders with their defaults on every CPU"
	}
	if k.workers > 0 {
		s += fmt.Sprintf(", xdpfwd with %d workers", k.workers)
	}
	if k.hosts > 0 {
		s = fmt.Sprintf("%d host(s) on the root namespace, %s", k.hosts, s)
	}
	return s
}

func (e *env) pairKey(c *contender, w *workload) pairKey {
	return pairKey{offloads: c.Offloads, queues: w.queues(e.o), defaults: w.FwdDefaults, hosts: w.Hosts, workers: w.Workers}
}

// keyOf is the key p was built for.
func (e *env) keyOf(p *topo.Pair) pairKey {
	for k, q := range e.pairs {
		if q == p {
			return k
		}
	}
	return pairKey{queues: max(1, e.o.Queues)}
}

// queuesOf is the queue count of every veth of p.
func (e *env) queuesOf(p *topo.Pair) int {
	for k, q := range e.pairs {
		if q == p {
			return k.queues
		}
	}
	return max(1, e.o.Queues)
}

func (e *env) childPID() int {
	if c := e.child.Load(); c != nil {
		return c.p.Pid()
	}
	return 0
}

// buildXdpfwd builds ./cmd/xdpfwd once into the temporary directory.
func (e *env) buildXdpfwd(ctx context.Context) (string, error) {
	e.xdpfwdOnce.Do(func() {
		bin := filepath.Join(e.tmp, "xdpfwd")
		e.xdpfwdErr = goBuild(ctx, e.src, "./cmd/xdpfwd", bin)
		if e.xdpfwdErr == nil {
			e.bins["xdpfwd"] = bin
		}
	})
	return e.bins["xdpfwd"], e.xdpfwdErr
}

// The quick run's settings: one round of short windows, so that all of
// its 130-odd samples (every contender on every workload it runs) take a
// minute and a half, not five (4 min 51 s with two rounds of
// 0.5 s after 0.2 s). Every workload keeps its traffic's shape; only
// the windows are shorter and fewer.
const (
	quickRounds   = 1
	quickDuration = 250 * time.Millisecond
	quickWarmup   = 100 * time.Millisecond
)

func (o *Options) defaults() {
	if o.Rounds == 0 {
		o.Rounds = 5
		if o.Quick {
			o.Rounds = quickRounds
		}
	}
	if o.Duration == 0 {
		o.Duration = time.Second
		if o.Quick {
			o.Duration = quickDuration
		}
	}
	if o.Warmup == 0 {
		o.Warmup = 300 * time.Millisecond
		if o.Quick {
			o.Warmup = quickWarmup
		}
	}
	if o.CostRate == 0 {
		o.CostRate = 100000
	}
	if o.Queues == 0 {
		o.Queues = 1
	}
	if o.Out == "" {
		o.Out = "perf-results"
	}
	if o.Command == "" {
		o.Command = "go run ./perf"
	}
}

// drain is the pause after each sample, for the queues to empty.
// podRPSCPUs is where the namespace ends steer their receive processing
// with --pod-rps load: the load CPUs. Otherwise none: the kernel runs it
// on the sending CPU.
func (o *Options) podRPSCPUs() []int {
	if o.PodRPS != "load" {
		return nil
	}
	return o.LoadCPUs
}

func (o *Options) drain() time.Duration {
	if o.Quick {
		return 50 * time.Millisecond
	}
	return 100 * time.Millisecond
}

// placeCPUs decides the CPU placement: forwarder processes on FwdCPU,
// perf's own threads on LoadCPUs, apart from each other where the machine
// has more than one CPU.
func (o *Options) placeCPUs() (note string, err error) {
	var avail unix.CPUSet
	if err := unix.SchedGetaffinity(0, &avail); err != nil {
		return "", fmt.Errorf("sched_getaffinity: %w", err)
	}
	cpus := traffic.CPUsOf(avail)
	if len(cpus) == 0 {
		return "", errors.New("no CPU available")
	}
	if !o.fwdCPUSet && !slices.Contains(cpus, o.FwdCPU) {
		o.FwdCPU = cpus[0]
	}
	if !slices.Contains(cpus, o.FwdCPU) {
		return "", fmt.Errorf("--fwd-cpu %d is not available (have %v)", o.FwdCPU, cpus)
	}
	if len(o.LoadCPUs) == 0 {
		for _, c := range cpus {
			if c != o.FwdCPU {
				o.LoadCPUs = append(o.LoadCPUs, c)
			}
		}
		if len(o.LoadCPUs) == 0 {
			o.LoadCPUs = []int{o.FwdCPU}
			return "only one CPU: forwarder and load share it", nil
		}
	}
	for _, c := range o.LoadCPUs {
		if !slices.Contains(cpus, c) {
			return "", fmt.Errorf("--load-cpus: CPU %d is not available (have %v)", c, cpus)
		}
		if c == o.FwdCPU {
			note = "forwarder and load CPUs overlap"
		}
	}
	return note, nil
}

// Run builds the topology and the forwarders, runs every selected contender
// on every selected workload, round after round, removes everything it built,
// and writes results.json, bench.txt and the charts to o.Out. It returns the
// results even when it fails part-way or is interrupted.
func Run(ctx context.Context, o Options) (*report.Results, error) {
	o.defaults()
	start := time.Now()
	res := &report.Results{
		Schema:  report.SchemaVersion,
		Started: start.UTC().Truncate(time.Second),
		Command: o.Command,
	}
	err := runBench(ctx, &o, res)
	if ctx.Err() != nil {
		res.Interrupted = true
		err = errors.Join(err, errors.New("interrupted"))
	}
	if left := leftovers(res.Topology); len(left) > 0 {
		err = errors.Join(err, fmt.Errorf("left behind: %s", strings.Join(left, ", ")))
	}
	res.ElapsedS = time.Since(start).Seconds()
	res.DeriveNet()
	if o.Out != "" && (len(res.Samples) > 0 || err == nil) {
		if werr := res.WriteDir(o.Out); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return res, err
}

func runBench(ctx context.Context, o *Options, res *report.Results) (err error) {
	if os.Geteuid() != 0 {
		return fmt.Errorf("perf needs root (namespaces, veths, XDP, AF_XDP); euid is %d", os.Geteuid())
	}
	cs, err := selectWithRefs(o.Only, o.RefSrc)
	if err != nil {
		return err
	}
	ws, err := selectWorkloads(o.Workloads)
	if err != nil {
		return err
	}
	root := o.Root
	if root == "" {
		if root, err = moduleRoot(); err != nil {
			return err
		}
	}
	src := o.Src
	if src == "" {
		src = root
	}
	res.Machine = machineInfo(src)
	note, err := o.placeCPUs()
	if err != nil {
		return err
	}
	if note != "" {
		res.Notes = append(res.Notes, "CPU placement: "+note)
	}

	// Pin perf's own threads (generators, receivers) to the load CPUs and
	// give the runtime one P per sending and receiving thread.
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return fmt.Errorf("sched_getaffinity: %w", err)
	}
	if err := traffic.PinProcess(traffic.CPUSet(o.LoadCPUs)); err != nil {
		return err
	}
	defer traffic.PinProcess(orig)
	prevProcs := runtime.GOMAXPROCS(max(2, len(o.LoadCPUs)))
	defer runtime.GOMAXPROCS(prevProcs)

	res.Settings = report.Settings{
		Quick: o.Quick, Rounds: o.Rounds, DurationS: o.Duration.Seconds(), WarmupS: o.Warmup.Seconds(),
		CostRatePPS: o.CostRate, FwdCPU: o.FwdCPU, LoadCPUs: o.LoadCPUs, Queues: o.Queues,
		GOMAXPROCS: runtime.GOMAXPROCS(0), Source: o.Source, PodRPSCPUs: o.podRPSCPUs(),
	}
	for _, w := range ws {
		res.Workloads = append(res.Workloads, workloadInfo(w, o))
	}

	tmp, err := os.MkdirTemp("", "xdpfwd-perf-")
	if err != nil {
		return err
	}
	if o.KeepBuilds {
		res.Notes = append(res.Notes, "builds and logs kept in "+tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	e := &env{o: o, res: res, root: root, src: src, tmp: tmp, bins: map[string]string{}, pairs: map[pairKey]*topo.Pair{}, hosts: map[*topo.Pair]*topo.Hosts{}, echoes: map[*topo.Pair]*echoCounter{}, own: measure.NewOwnCPU(), allCPUs: traffic.CPUsOf(orig)}
	res.LoadAvg[0] = measure.LoadAvg()
	defer func() { res.LoadAvg[1] = measure.LoadAvg() }()
	pr := newProgress(o.Progress)

	active, err := e.build(ctx, cs, ws, pr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.removeTopology()) }()
	if err := e.buildTopology(active, ws, pr); err != nil {
		return err
	}
	e.runRounds(ctx, active, ws, pr)
	return nil
}

// build builds what needs building, for the contenders that run a
// selected workload (a switch-only run neither builds asavie-fwd nor looks
// for the peers), and returns those that can run; a contender that cannot
// be built here is reported, not fatal.
func (e *env) build(ctx context.Context, cs []*contender, ws []*workload, pr *progress) ([]*contender, error) {
	var active []*contender
	for _, c := range cs {
		cr := e.res.Contender(c.result())
		if !slices.ContainsFunc(ws, func(w *workload) bool { return w.applies(c) }) {
			cr.Skipped = report.NoWorkloadApplies
			continue
		}
		if c.build != nil {
			pr.status("building " + c.Name)
			if err := c.build(ctx, e); err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				cr.Skipped = "not run: " + err.Error()
				continue
			}
		}
		active = append(active, c)
	}
	return active, nil
}

// buildTopology builds one pair (or hosts topology) per pair key in use:
// offload setting, queue count, defaults, hosts. removeTopology removes
// what it built, also when it fails part-way.
func (e *env) buildTopology(active []*contender, ws []*workload, pr *progress) error {
	for _, c := range active {
		for _, w := range ws {
			k := e.pairKey(c, w)
			if !w.applies(c) || e.pairs[k] != nil {
				continue
			}
			pr.status("building the topology")
			if k.hosts > 0 {
				p, err := e.newHosts(k)
				if err != nil {
					return err
				}
				pr.status(fmt.Sprintf("built %s: namespaces and links %s (%s)", p.Name, strings.Join(e.hosts[p].Links, ", "), k))
				continue
			}
			p, err := topo.NewPair(topo.Options{Queues: k.queues, TxChecksum: k.offloads, RPSCPUs: e.o.podRPSCPUs()})
			if err != nil {
				return err
			}
			e.pairs[k] = p
			e.res.AddTopology("netns "+p.A.Name, "netns "+p.B.Name, "link "+p.LinkA, "link "+p.LinkB)
			pr.status(fmt.Sprintf("built namespaces %s, %s and links %s, %s (%s)", p.A.Name, p.B.Name, p.LinkA, p.LinkB, k))
			if err := staticNeighbours(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeTopology removes every pair and hosts topology buildTopology
// built.
func (e *env) removeTopology() error {
	var errs []error
	for _, p := range e.pairs {
		closer := p.Close
		if h := e.hosts[p]; h != nil {
			closer = e.closeHosts(p, h)
		}
		if cerr := closer(); cerr != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", p.Name, cerr))
		}
	}
	return errors.Join(errs...)
}

// runRounds runs every active contender on the workloads that apply to
// it, round after round, until the rounds are done or ctx is.
func (e *env) runRounds(ctx context.Context, active []*contender, ws []*workload, pr *progress) {
	for _, c := range active {
		for _, w := range ws {
			if w.applies(c) {
				pr.total += e.o.Rounds
			}
		}
	}
	// A contender that fails to start on a pair is not started on it
	// again; on its other pair (if any) it goes on.
	failed := map[string]bool{}
	for round := 1; round <= e.o.Rounds; round++ {
		for _, c := range active {
			// The contender's workloads, by the pair they run on, in
			// table order: it is started once per pair and round.
			var keys []pairKey
			byPair := map[pairKey][]*workload{}
			for _, w := range ws {
				if w.applies(c) {
					k := e.pairKey(c, w)
					if byPair[k] == nil {
						keys = append(keys, k)
					}
					byPair[k] = append(byPair[k], w)
				}
			}
			for _, k := range keys {
				if ctx.Err() != nil {
					return
				}
				e.runContender(ctx, round, c, e.pairs[k], byPair[k], failed, pr)
			}
		}
	}
	pr.finish()
}

// runContender starts c on p, runs the workloads wls, stops it and checks
// that it left nothing behind.
func (e *env) runContender(ctx context.Context, round int, c *contender, p *topo.Pair, wls []*workload, failed map[string]bool, pr *progress) {
	o, res := e.o, e.res
	fkey := c.Name + " " + p.Name
	if failed[fkey] {
		pr.done += len(wls)
		return
	}
	cr := res.Contender(c.result())
	where := ""
	if len(e.pairs) > 1 {
		where = fmt.Sprintf(" on %s (%d queue(s))", p.Name, e.queuesOf(p))
	}
	pr.status(fmt.Sprintf("round %d/%d: starting %s%s", round, o.Rounds, c.Name, where))
	stop, err := c.start(ctx, e, p)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		cr.Errors = append(cr.Errors, fmt.Sprintf("round %d: start%s: %v", round, where, err))
		cr.Skipped = "failed to start" + where + ": " + err.Error()
		failed[fkey] = true
		pr.done += len(wls)
		if cerr := e.checkLinksClean(p); cerr != nil {
			cr.Errors = append(cr.Errors, fmt.Sprintf("round %d: after failed start: %v", round, cerr))
		}
		return
	}
	cr.Ran = true
	if !c.Baseline {
		// Warm the path (caches, bridge tables, the forwarder's
		// rings) before the first sample.
		e.warm(ctx, p)
	}
	for _, w := range wls {
		if ctx.Err() != nil {
			break
		}
		m, werr := w.run(ctx, e, c, p, w)
		s := report.Sample{Round: round, Contender: c.Name, Workload: w.Name, Metrics: m}
		if werr != nil && ctx.Err() == nil {
			s.Error = werr.Error()
		}
		if ctx.Err() == nil {
			res.Samples = append(res.Samples, s)
		}
		pr.sample(round, o.Rounds, c.Name, w, s)
		sleepCtx(ctx, o.drain()) // let queues drain
	}
	details, serr := stop()
	// Details of the last round; a contender run on two pairs keeps the
	// keys only one of them reports (xdpfwd's xps_* on the multi-queue one).
	if details != nil && cr.Details == nil {
		cr.Details = map[string]any{}
	}
	for k, v := range details {
		cr.Details[k] = v
	}
	if serr = errors.Join(serr, e.checkLinksClean(p)); serr != nil {
		cr.Errors = append(cr.Errors, fmt.Sprintf("round %d: stop%s: %v", round, where, serr))
	}
}

// warm sends UDP from A to B for the warm-up time, unmeasured.
func (e *env) warm(ctx context.Context, p *topo.Pair) {
	if p.B == nil {
		return // one host (reflect): its workload warms up itself
	}
	rx, err := traffic.NewUDPReceiver(p.B, p.V4B, time.Now().Add(e.o.Warmup+2*time.Second))
	if err != nil {
		return
	}
	defer rx.Close()
	to := netip.AddrPortFrom(p.V4B, uint16(rx.Port))
	tx, err := traffic.NewUDPSender(p.A, p.V4A, to, 256, 0, time.Now().Add(e.o.Warmup+time.Second))
	if err != nil {
		return
	}
	sleepCtx(ctx, e.o.Warmup)
	tx.Close()
}

// staticNeighbours gives each namespace a permanent neighbour entry for the
// other's address, so no ARP crosses (or fails to cross) a contender during
// a measurement, and the baseline's packets leave even though nothing
// answers behind its XDP_DROP.
func staticNeighbours(p *topo.Pair) error {
	mac := func(ns *topo.NS, ifname string) (hw net.HardwareAddr, idx int, err error) {
		err = ns.Do(func() error {
			iface, err := net.InterfaceByName(ifname)
			if err != nil {
				return err
			}
			hw, idx = iface.HardwareAddr, iface.Index
			return nil
		})
		return
	}
	macA, idxA, err := mac(p.A, p.PeerA)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", p.PeerA, p.A.Name, err)
	}
	macB, idxB, err := mac(p.B, p.PeerB)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", p.PeerB, p.B.Name, err)
	}
	set := func(ns *topo.NS, idx int, ip net.IP, hw net.HardwareAddr) error {
		return ns.Do(func() error {
			return netlink.NeighSet(&netlink.Neigh{
				LinkIndex: idx, Family: unix.AF_INET, State: netlink.NUD_PERMANENT, IP: ip, HardwareAddr: hw,
			})
		})
	}
	if err := set(p.A, idxA, p.V4B.AsSlice(), macB); err != nil {
		return fmt.Errorf("neighbour %s in %s: %w", p.V4B, p.A.Name, err)
	}
	if err := set(p.B, idxB, p.V4A.AsSlice(), macA); err != nil {
		return fmt.Errorf("neighbour %s in %s: %w", p.V4A, p.B.Name, err)
	}
	return nil
}

// leftovers lists what of the recorded topology still exists.
func leftovers(topology []string) []string {
	var left []string
	for _, t := range topology {
		kind, name, _ := strings.Cut(t, " ")
		switch kind {
		case "netns":
			if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
				left = append(left, t)
			}
		case "link", "bridge":
			if _, err := netlink.LinkByName(name); err == nil {
				left = append(left, t)
			}
		}
	}
	return left
}

// progress prints one line per sample: in place on a terminal, else one
// after another.
type progress struct {
	w           io.Writer
	tty         bool
	start       time.Time
	done, total int
}

func newProgress(w io.Writer) *progress {
	pr := &progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
		pr.tty = err == nil
	}
	return pr
}

func (pr *progress) line(s string) {
	if pr.w == nil {
		return
	}
	if pr.tty {
		fmt.Fprintf(pr.w, "\r\033[K%s", s)
	} else {
		fmt.Fprintln(pr.w, s)
	}
}

func (pr *progress) status(s string) {
	pr.line(fmt.Sprintf("perf %s: %s", report.FmtClock(time.Since(pr.start)), s))
}

func (pr *progress) sample(round, rounds int, c string, w *workload, s report.Sample) {
	pr.done++
	el := time.Since(pr.start)
	eta := ""
	if pr.done > 0 && pr.total > pr.done {
		eta = fmt.Sprintf(", ~%s left", report.FmtClock(el/time.Duration(pr.done)*time.Duration(pr.total-pr.done)))
	}
	val := "error: " + s.Error
	if s.Error == "" {
		val = report.FmtMetric(s.Metrics[w.Metric], w.Metric)
		if w.Metric == "own_cpu_ns_per_pkt_net" {
			val = report.FmtMetric(s.Metrics["own_cpu_ns_per_pkt"], "cpu_ns_per_pkt") + " ns/pkt (before subtracting the baseline)"
		}
	}
	pr.line(fmt.Sprintf("perf %s: [%d/%d] round %d/%d %-14s %-9s %s%s",
		report.FmtClock(el), pr.done, pr.total, round, rounds, c, w.Name, val, eta))
}

func (pr *progress) finish() {
	if pr.w != nil && pr.tty {
		fmt.Fprintln(pr.w)
	}
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
