// `xdpfwd bench`: NDR/PDR and latency of a device under test between two
// namespaces, found by binary search (package ndr).

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/childproc"
	"github.com/xdpfwd/xdpfwd/internal/ndr"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

// cmdBench is `xdpfwd bench`: a device under test between two namespaces
// (the demo's topology), the txonly generator in A and a counting sink in
// B, and for each frame size a binary search for the highest offered rate
// with no loss (NDR) and with at most --pdr-loss (PDR), RFC 2544's
// throughput and FD.io CSIT's NDR/PDR; then latency at 10, 50 and 90 % of
// the NDR. The generator runs in this process, inside A; the sink and an
// xdpfwd DUT are xdpfwd processes of their own, one sink per trial.
func cmdBench(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	duts := fs.String("dut", "bridge,xdp-redirect,xdpfwd", "devices under test between the namespaces, a `LIST` of: bridge (Linux bridge), xdp-redirect (in-kernel XDP bpf_redirect), xdpfwd (xdpfwd xconnect)")
	sizes := fs.String("size", "64", "frame `SIZES` with FCS, a list of 64..1518 and imix")
	trial := fs.Duration("trial", time.Second, "how long each trial sends, `D`")
	maxTrials := fs.Int("max-trials", 8, "most rates, `N`, each binary search (NDR, then PDR) tries")
	repeat := fs.Int("repeat", 3, "`N` trials that decide a rate, by majority (a loss burst of a shared machine in one trial does not fail it)")
	precision := fs.Float64("precision", 2, "stop a search when its bounds are within `PCT` percent of the upper one")
	pdrLoss := fs.Float64("pdr-loss", 0.5, "PDR: the loss a trial may have, `PCT` percent")
	maxRate := fs.String("max-rate", "0", "upper bound of the search, `RATE` in packets/s (0: what the generator sends unpaced, measured first)")
	flows := fs.Int("flows", 1, "`N` generator flows")
	warmup := fs.Duration("warmup", time.Second, "an unpaced trial of `D` before each DUT's search, not counted, so caches, rings and CPU clocks are warm (0: none)")
	verify := fs.Int("verify", 3, "`N` trials at the NDR found that must all lose nothing; a failure lowers the rate by --precision of it and verifies again (0: none)")
	pin := fs.String("pin", "off", "`on|off`: on, with 2+ CPUs, the generator on CPU 0, an xdpfwd DUT's worker on CPU 1 and the sink on CPU 0 (the kernel DUTs run in the generator's softirq: the sink on CPU 1), for a machine of its own; off: the scheduler places them, better when other loads share the CPUs")
	jsonOut := fs.String("json", "", "also write the results as JSON to this `FILE`")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	var list []string
	for _, d := range strings.Split(*duts, ",") {
		switch d {
		case "bridge", "xdp-redirect", "xdpfwd":
			list = append(list, d)
		default:
			return usageError{fmt.Sprintf("bench: --dut %q: want bridge, xdp-redirect or xdpfwd", d)}
		}
	}
	var sizeList [][]int
	for _, s := range strings.Split(*sizes, ",") {
		sz, err := parseSizes(s)
		if err != nil {
			return usageError{"bench: " + err.Error()}
		}
		if sz[0] < 64 || sz[0] > 1518 {
			return usageError{fmt.Sprintf("bench: --size %s: want 64..1518 or imix (the path's MTU is 1500)", s)}
		}
		sizeList = append(sizeList, sz)
	}
	hi, err := parseRate(*maxRate)
	if err != nil {
		return usageError{"bench: " + err.Error()}
	}
	switch {
	case *trial < 10*time.Millisecond || *trial > time.Minute:
		return usageError{"bench: --trial: want 10ms..1m"}
	case *maxTrials < 1 || *maxTrials > 64:
		return usageError{"bench: --max-trials: want 1..64"}
	case !(*precision > 0 && *precision < 100) || !(*pdrLoss >= 0 && *pdrLoss < 100):
		return usageError{"bench: --precision and --pdr-loss: want percents, 0..100"}
	case *repeat < 1 || *repeat > 9:
		return usageError{"bench: --repeat: want 1..9"}
	case *flows < 1 || *flows > gen.MaxFlows:
		return usageError{fmt.Sprintf("bench: --flows: want 1..%d", gen.MaxFlows)}
	case *warmup < 0 || *warmup > time.Minute:
		return usageError{"bench: --warmup: want 0..1m"}
	case *verify < 0 || *verify > 9:
		return usageError{"bench: --verify: want 0..9"}
	case *pin != "on" && *pin != "off":
		return usageError{fmt.Sprintf("bench: --pin %q: want on or off", *pin)}
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r := &rig{self: self, trial: *trial, flows: *flows, log: stderr, warmup: *warmup, verify: *verify,
		pin: *pin == "on" && runtime.NumCPU() >= 2}
	var results []benchResult
	for _, dut := range list {
		for _, sz := range sizeList {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res, err := r.bench(ctx, dut, sz, hi, ndr.Params{MaxTrials: *maxTrials, Precision: *precision / 100, Repeats: *repeat}, *pdrLoss/100)
			if err != nil {
				return fmt.Errorf("bench %s: %w", dut, err)
			}
			results = append(results, res)
		}
	}
	printBench(stdout, results, *trial)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}
	return nil
}

// TrialResult is one trial: a target rate, what was offered and what
// arrived; the NDR search's record of it (ndr.Trial).
type TrialResult struct {
	Target   float64 `json:"target_pps"` // 0: unpaced
	Offered  float64 `json:"offered_pps"`
	Sent     uint64  `json:"sent"`
	Received uint64  `json:"received"`
	// Loss is the fraction of what was sent that did not arrive.
	Loss float64 `json:"loss"`
	// SinkDrops are frames the sink's own link dropped (its RX ring
	// full, its fill ring empty): lost by the instrument, not the DUT.
	SinkDrops uint64 `json:"sink_drops"`
	// Underrun: the generator offered under 95 % of the target, in each of
	// the attempts (descheduled, on a shared machine): the trial says
	// nothing of the DUT at the target, and fails.
	Underrun bool `json:"underrun,omitempty"`
	// Burst is the most packets the generator sent in one round (paced:
	// what is due in its window, gen.Config.Window; unpaced: its batch).
	Burst   uint64              `json:"burst,omitempty"`
	Latency modes.LatencyReport `json:"latency_ns"`
}

// Outcome is what the NDR search reads of a trial.
func (t TrialResult) Outcome() ndr.Outcome {
	return ndr.Outcome{Target: t.Target, Offered: t.Offered, Loss: t.Loss, Underrun: t.Underrun}
}

// latencyWindow is the generator's pacing window in the latency trials: a
// round sends what is due in 50 µs (5 packets at 100 kpps, one below
// 20 kpps), so a latency is a packet's through the DUT, not its wait
// behind a burst of 64 sent at once. The throughput trials keep the 1 ms
// default (gen.DefaultWindow): fewer wake-ups at the rates they search.
const latencyWindow = 50 * time.Microsecond

// benchResult is one (DUT, size): NDR, PDR and latency at fractions of
// the NDR.
type benchResult struct {
	DUT     string                  `json:"dut"`
	Size    string                  `json:"size"`
	Max     TrialResult             `json:"unpaced"`
	NDR     ndr.Result[TrialResult] `json:"ndr"`
	PDR     ndr.Result[TrialResult] `json:"pdr"`
	Latency []TrialResult           `json:"latency_at_10_50_90_pct_ndr"`
	// Warmup is the discarded trial before the search.
	Warmup *TrialResult `json:"warmup,omitempty"`
}

// A trial whose generator offered less than underrunShare of its target,
// or whose sink dropped frames itself, is made again, up to underrunTries
// in all.
const (
	underrunShare = 0.95
	underrunTries = 3
)

// rig runs trials on a topology.
type rig struct {
	self   string
	trial  time.Duration
	flows  int
	log    io.Writer
	p      *topo.Pair
	dstB   net.HardwareAddr
	warmup time.Duration
	verify int
	// pin puts the generator on CPU 0 and the DUT's and sink's workers
	// where they contend least (startDUT); sinkCPU is the sink's.
	pin     bool
	sinkCPU string
}

func (r *rig) bench(ctx context.Context, dut string, sizes []int, hi float64, sp ndr.Params, pdrLoss float64) (res benchResult, err error) {
	res.DUT, res.Size = dut, sizeName(sizes)
	if r.p, err = topo.NewPair(topo.Options{}); err != nil {
		return res, err
	}
	defer func() {
		if cerr := r.p.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup: %w", cerr))
		}
	}()
	if r.dstB, err = r.p.B.HardwareAddr(r.p.PeerB); err != nil {
		return res, err
	}
	r.sinkCPU = ""
	if r.pin {
		// A kernel DUT forwards in the softirq of the generator's
		// sendto, on CPU 0: the sink goes to CPU 1. An xdpfwd DUT's
		// worker takes CPU 1 (and the sink's XDP program runs in its
		// sendto there): the sink's worker goes to CPU 0, beside a
		// paced generator that sleeps between batches.
		r.sinkCPU = "1"
		if dut == "xdpfwd" {
			r.sinkCPU = "0"
		}
	}
	undo, err := r.startDUT(dut)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, undo()) }()
	fmt.Fprintf(r.log, "bench: %s, %s frames, %v trials\n", dut, res.Size, r.trial)
	trialIn := func(rate float64, window time.Duration) (TrialResult, error) {
		if ctx.Err() != nil {
			return TrialResult{}, ctx.Err()
		}
		var t TrialResult
		var err error
		// A trial whose generator fell short of the target (it was
		// descheduled) measured a lower rate than the search asks
		// about, and one whose sink dropped measured the sink: again,
		// up to underrunTries times, then it stands (and fails).
		for try := 1; ; try++ {
			if t, err = r.run(rate, sizes, r.trial, window); err != nil {
				return t, err
			}
			t.Underrun = rate > 0 && t.Offered < underrunShare*rate
			fmt.Fprintf(r.log, "bench: %s %s target %s: offered %.0f pps, loss %.3f %% (%d of %d, %d in the sink)%s\n", dut, res.Size, rateName(rate), t.Offered, 100*t.Loss, t.Sent-t.Received, t.Sent, t.SinkDrops,
				map[bool]string{true: ", generator short of the target"}[t.Underrun])
			if !t.Underrun && t.SinkDrops == 0 || try == underrunTries {
				return t, nil
			}
		}
	}
	if r.warmup > 0 {
		w, err := r.run(0, sizes, r.warmup, 0)
		if err != nil {
			return res, err
		}
		res.Warmup = &w
		fmt.Fprintf(r.log, "bench: %s %s warm-up: offered %.0f pps, loss %.3f %% (not counted)\n", dut, res.Size, w.Offered, 100*w.Loss)
	}
	trial := func(rate float64) (TrialResult, error) { return trialIn(rate, 0) }
	var prior []TrialResult
	if hi == 0 {
		if res.Max, err = trial(0); err != nil {
			return res, err
		}
		hi, prior = res.Max.Offered, []TrialResult{res.Max}
	}
	if res.NDR, err = ndr.Search(trial, 0, hi, 0, sp, prior...); err != nil {
		return res, err
	}
	// PDR ≥ NDR: the NDR search's trials bound it already.
	if res.PDR, err = ndr.Search(trial, 0, hi, pdrLoss, sp, append(prior, res.NDR.Trials...)...); err != nil {
		return res, err
	}
	// A loaded machine is not monotonic: a PDR trial above the NDR with
	// no loss is a measured zero-loss rate, so it is the NDR.
	for _, t := range res.PDR.Trials {
		if t.Loss == 0 && t.Offered > res.NDR.Rate {
			b := t
			res.NDR.Rate, res.NDR.Best = t.Offered, &b
		}
	}
	// The NDR is a maximum over trials that passed by majority, or one
	// lucky PDR trial: verify it, lower until every trial at it passes.
	// Steps of --precision of the NDR itself: the search's top (the
	// unpaced rate) may be several times the NDR.
	if res.NDR, err = ndr.Verify(trial, res.NDR, 0, r.verify, sp.Precision*res.NDR.Rate, 8); err != nil {
		return res, err
	}
	for _, f := range []float64{0.1, 0.5, 0.9} {
		if res.NDR.Rate == 0 {
			break
		}
		t, err := trialIn(f*res.NDR.Rate, latencyWindow)
		if err != nil {
			return res, err
		}
		res.Latency = append(res.Latency, t)
	}
	return res, nil
}

// startDUT joins the pair's root ends with dut and returns its undo.
func (r *rig) startDUT(dut string) (func() error, error) {
	la, err := netlink.LinkByName(r.p.LinkA)
	if err != nil {
		return nil, err
	}
	lb, err := netlink.LinkByName(r.p.LinkB)
	if err != nil {
		return nil, err
	}
	switch dut {
	case "bridge":
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: r.p.LinkA[:len(r.p.LinkA)-1] + "br"}}
		if err := netlink.LinkAdd(br); err != nil {
			return nil, fmt.Errorf("bridge %s: %w", br.Name, err)
		}
		undo := func() error { return netlink.LinkDel(br) }
		for _, l := range []netlink.Link{la, lb} {
			if err := netlink.LinkSetMaster(l, br); err != nil {
				return nil, errors.Join(fmt.Errorf("bridge %s: enslave %s: %w", br.Name, l.Attrs().Name, err), undo())
			}
		}
		if err := netlink.LinkSetUp(br); err != nil {
			return nil, errors.Join(err, undo())
		}
		return undo, nil
	case "xdp-redirect":
		var links []link.Link
		undo := func() error {
			var errs []error
			for _, l := range links {
				errs = append(errs, l.Close())
			}
			return errors.Join(errs...)
		}
		for _, pr := range [][2]netlink.Link{{la, lb}, {lb, la}} {
			prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
				Type: ebpf.XDP, License: "GPL",
				Instructions: asm.Instructions{
					asm.Mov.Imm(asm.R1, int32(pr[1].Attrs().Index)),
					asm.Mov.Imm(asm.R2, 0),
					asm.FnRedirect.Call(),
					asm.Return(),
				},
			})
			if err != nil {
				return nil, errors.Join(fmt.Errorf("xdp-redirect program: %w", err), undo())
			}
			l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: pr[0].Attrs().Index, Flags: link.XDPDriverMode})
			prog.Close() // the link holds it
			if err != nil {
				return nil, errors.Join(fmt.Errorf("xdp-redirect on %s: %w", pr[0].Attrs().Name, err), undo())
			}
			links = append(links, l)
		}
		return undo, nil
	case "xdpfwd":
		args := []string{"run", "--link", r.p.LinkA, "--link", r.p.LinkB, "--control", "off", "--stats-interval", "0", "--queues", "1"}
		if r.pin {
			args = append(args, "--cpus", "1")
		}
		c, err := startXdpfwd("xdpfwd DUT", r.self, "", args...)
		if err != nil {
			return nil, err
		}
		return func() error { return c.Stop(stopTimeout) }, nil
	}
	return nil, fmt.Errorf("unknown DUT %q", dut)
}

// run is one trial at rate (0: unpaced): a fresh sink in B, the generator
// in A for the trial's duration, pacing in window (0: the default), then
// the sink's count.
func (r *rig) run(rate float64, sizes []int, d, window time.Duration) (TrialResult, error) {
	t := TrialResult{Target: rate}
	dir, err := os.MkdirTemp("", "xdpfwd-bench-")
	if err != nil {
		return t, err
	}
	defer os.RemoveAll(dir)
	sumFile := filepath.Join(dir, "sink.json")
	// A ring of 4096 holds 16 ms at 250 kpps: a sink descheduled that
	// long loses nothing, so loss is the DUT's (sink drops are counted
	// apart).
	args := []string{"run", "--mode", "sink", "--link", r.p.PeerB, "--control", "off",
		"--stats-interval", "0", "--queues", "1", "--summary", sumFile, "--ring-size", "4096"}
	if r.sinkCPU != "" {
		args = append(args, "--cpus", r.sinkCPU)
	}
	sink, err := startXdpfwd("sink", r.self, r.p.B.Name, args...)
	if err != nil {
		return t, err
	}
	// The sink's worker starts polling a moment after it says it is
	// ready: frames sent before would wait in its RX ring, or overflow it.
	time.Sleep(200 * time.Millisecond)
	cfg := gen.Config{Links: []string{r.p.PeerA}, Sizes: sizes, Rate: rate, Duration: d, Flows: r.flows,
		Window: window, Template: gen.Template{DstMAC: r.dstB}}
	if r.pin {
		cfg.CPUs = []int{0}
	}
	if rate > 0 {
		cfg.Count = uint64(math.Ceil(rate * d.Seconds()))
	}
	var g *gen.Generator
	err = r.p.A.Do(func() (err error) { g, err = gen.New(cfg); return err })
	if err == nil {
		err = g.Run(context.Background())
		s := g.Stats()
		t.Sent = s.Sent
		t.Offered = float64(s.Sent) / d.Seconds()
		for _, q := range s.Queues {
			t.Burst = max(t.Burst, q.Burst)
		}
		err = errors.Join(err, g.Close())
	}
	time.Sleep(100 * time.Millisecond) // what is in flight through the DUT arrives
	if err = errors.Join(err, sink.Stop(stopTimeout)); err != nil {
		return t, fmt.Errorf("%w\nsink: %s", err, sink.Output())
	}
	b, err := os.ReadFile(sumFile)
	if err != nil {
		return t, fmt.Errorf("sink summary: %w", err)
	}
	var sum struct {
		Sink  *modes.SinkReport `json:"sink"`
		Links map[string]struct {
			Drops map[string]uint64 `json:"drops"`
		} `json:"links"`
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.Sink == nil {
		return t, fmt.Errorf("sink summary %s: no sink report (%v)", sumFile, err)
	}
	for _, l := range sum.Links { // its receive side's reasons, not the handler's (every frame)
		t.SinkDrops += l.Drops[fwd.DropRXDropped] + l.Drops[fwd.DropRXRingFull] + l.Drops[fwd.DropUMEMExhausted]
	}
	t.Received = min(sum.Sink.Received, t.Sent)
	if t.Sent > 0 {
		t.Loss = float64(t.Sent-t.Received) / float64(t.Sent)
	}
	t.Latency = sum.Sink.Latency
	t.Latency.Buckets = nil
	return t, nil
}

// startXdpfwd starts self with args as the child name, in network
// namespace ns ("": this one), and waits until it logs that its
// forwarder is ready.
func startXdpfwd(name, self, ns string, args ...string) (*childproc.Process, error) {
	c, err := childproc.Start(name, append([]string{self}, args...), childproc.Options{Netns: ns})
	if err != nil {
		return nil, err
	}
	if err := c.WaitFor("forwarder ready", 15*time.Second); err != nil {
		c.Stop(stopTimeout) // reaps it; err says why, with its output's tail
		return nil, err
	}
	return c, nil
}

// stopTimeout is how long a child has to stop on SIGINT before it is
// killed.
const stopTimeout = 10 * time.Second

// bound says what limited the NDR: the generator when its unpaced
// trial lost nothing (the DUT's NDR is at least that), else the DUT.
func bound(r benchResult) string {
	if r.NDR.Best != nil && r.NDR.Best.Target == 0 || r.Max.Sent > 0 && r.Max.Loss == 0 {
		return "generator"
	}
	return "DUT"
}

func sizeName(s []int) string {
	if len(s) > 1 {
		return "imix"
	}
	return fmt.Sprint(s[0])
}

func rateName(r float64) string {
	if r == 0 {
		return "unpaced"
	}
	return fmt.Sprintf("%.0f pps", r)
}

// printBench writes the results table.
func printBench(w io.Writer, rs []benchResult, trial time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "DUT\tsize\tunpaced pps\tloss %%\tNDR pps\tverified\tPDR pps\tPDR loss %%\ttrials\tbound\t\n")
	for _, r := range rs {
		pdrLoss := 0.0
		if r.PDR.Best != nil {
			pdrLoss = 100 * r.PDR.Best.Loss
		}
		unpaced, loss := "-", "-" // --max-rate given: no unpaced trial
		if r.Max.Sent > 0 {
			unpaced, loss = fmt.Sprintf("%.0f", r.Max.Offered), fmt.Sprintf("%.2f", 100*r.Max.Loss)
		}
		verified := "-"
		if len(r.NDR.VerifyTrials) > 0 {
			verified = map[bool]string{true: "yes", false: "no"}[r.NDR.Verified]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%s\t%.0f\t%.3f\t%d\t%s\t\n", r.DUT, r.Size, unpaced, loss,
			r.NDR.Rate, verified, r.PDR.Rate, pdrLoss, len(r.NDR.Trials)+len(r.NDR.VerifyTrials)+len(r.PDR.Trials)+len(r.Latency)+map[bool]int{true: 1}[r.Max.Sent > 0], bound(r))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nlatency at 10/50/90 %% of NDR (µs, p50/p99/p999; %v trials; the generator sends at most what is due in %v at once: burst):\n", trial, latencyWindow)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "DUT\tsize\trate pps\tburst\tloss %%\tp50\tp99\tp999\t\n")
	for _, r := range rs {
		for _, t := range r.Latency {
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%d\t%.3f\t%.1f\t%.1f\t%.1f\t\n", r.DUT, r.Size, t.Offered, t.Burst, 100*t.Loss,
				float64(t.Latency.P50)/1e3, float64(t.Latency.P99)/1e3, float64(t.Latency.P999)/1e3)
		}
	}
	tw.Flush()
}
