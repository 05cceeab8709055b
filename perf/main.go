// Command perf benchmarks xdpfwd side by side against the forwarders its
// users would pick instead: the Linux bridge, an in-kernel XDP redirect
// (the upper bound of a veth datapath), a forwarder built on
// github.com/asavie/xdp, and other AF_XDP forwarders where installed: DPDK's
// testpmd (net_af_xdp) and Open vSwitch's userspace datapath (afxdp ports).
//
// As root, from the module root:
//
//	go run ./perf            # the default run: a few minutes
//	go run ./perf --quick    # under two minutes: one round of short windows
//	go run ./perf --only xdpfwd,bridge --workload udp
//	go run ./perf --readme   # run, then rewrite the results section of perf/README.md
//	go run ./perf --iommu    # IOMMU maps per 1,000 packets in a QEMU guest (internal/vmtest)
//	go run ./perf --restart  # a plain restart's silence and loss beside a handover's
//
// perf builds its own topology with netlink — a source namespace, a veth, the
// contender in the root namespace, a veth, a destination namespace — runs
// every contender on exactly the same traffic, interleaved round by round,
// and removes everything it built, also on Ctrl-C or failure. It prints
// Markdown tables on stdout and writes results.json (every sample), bench.txt
// (benchstat format) and PNG charts to --out. See perf/README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/cpulist"
	"github.com/xdpfwd/xdpfwd/perf/internal/report"
)

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main runs perf with args and returns the exit code: 0 success, 1 a failed
// or interrupted run, 2 bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "perf: %v\n", err)
		return 2
	}
	if o.List {
		listTables(stdout)
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.IOMMU {
		return iommuMain(ctx, o, stdout, stderr)
	}
	if o.Restart {
		return restartMain(ctx, o, stdout, stderr)
	}

	var res *report.Results
	if o.From != "" {
		res, err = report.LoadResults(o.From)
	} else {
		o.Progress = stderr
		res, err = Run(ctx, o)
	}
	if res != nil && (len(res.Samples) > 0 || o.From != "") {
		if o.From != "" {
			fmt.Fprint(stdout, res.Markdown())
		} else {
			// The tables are in results.md: a run prints where, and one
			// line per workload.
			fmt.Fprint(stdout, res.Brief(o.Out))
		}
		if o.Readme {
			if rerr := report.RewriteReadme(readmePath(o), res); rerr != nil {
				err = errors.Join(err, rerr)
			} else {
				fmt.Fprintf(stderr, "perf: rewrote the results section of %s\n", readmePath(o))
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "perf: %v\n", err)
		return 1
	}
	return 0
}

// Options configure a run. The zero value of every field but Out is a
// default chosen by Run (see defaults).
type Options struct {
	Quick      bool
	Only       []string      // contender names; empty: all
	Workloads  []string      // workload names or groups; empty: all
	Out        string        // results directory
	Rounds     int           // interleaved rounds
	Duration   time.Duration // measured window of each sample
	Warmup     time.Duration // traffic before each window, not measured
	CostRate   int           // offered packets/s of the CPU-cost workload
	Source     string        // the UDP workloads' sender: txonly or sendmmsg
	FwdCPU     int           // CPU of the forwarder processes
	LoadCPUs   []int         // CPUs of perf's generators and receivers; empty: all others
	Queues     int           // queues of every veth (0: 1)
	PodRPS     string        // "" or "off": the namespace ends' receive processing where the kernel puts it (the sending CPU); "load": steered (RPS) to LoadCPUs
	Src        string        // checkout to build xdpfwd from; "": this module
	RefSrc     string        // another checkout, whose xdpfwd runs as contender xdpfwd-ref
	Root       string        // perf's module root (perf/README.md, perf/asavie); "": from `go env GOMOD`
	Readme     bool          // rewrite the results section of perf/README.md
	From       string        // render this results.json instead of running
	List       bool          // list contenders and workloads
	IOMMU      bool          // run the iommu workload in a VM (internal/vmtest) instead
	Restart    bool          // run the restart workload (restart.go) instead
	KeepBuilds bool          // keep the temporary build directory (debugging)
	Command    string        // the command line, recorded in the results
	Progress   io.Writer     // progress lines; nil: none
	fwdCPUSet  bool          // FwdCPU was given
}

func parseArgs(args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./perf [flags]   (as root)\n\n")
		fs.PrintDefaults()
		fmt.Fprintf(stderr, "\ncontenders and workloads: go run ./perf --list\n")
	}
	var only, wl listFlag
	var loadCPUs string
	fs.BoolVar(&o.Quick, "quick", false, "short run (under two minutes): one round of 0.25 s windows after 0.1 s")
	fs.Var(&only, "only", "run only these contenders (repeatable or comma-separated)")
	fs.Var(&wl, "workload", "run only these workloads or groups: udp, cost, tcp, rr, reorder, latency, delivery, switch, reflect, or a name like udp-64 (repeatable or comma-separated)")
	fs.StringVar(&o.Out, "out", "perf-results", "directory for results.json, bench.txt and the charts")
	fs.IntVar(&o.Rounds, "rounds", 0, "interleaved rounds (0: 1 with --quick, else 5)")
	fs.DurationVar(&o.Duration, "duration", 0, "measured window of each sample (0: 250ms with --quick, else 1s)")
	fs.DurationVar(&o.Warmup, "warmup", 0, "unmeasured traffic before each window (0: 100ms with --quick, else 300ms)")
	fs.IntVar(&o.CostRate, "cost-rate", 0, "offered packets/s of the CPU-cost workload (0: 100000)")
	fs.StringVar(&o.Source, "source", "txonly", "sender of the udp, cost and switch UDP workloads: txonly (xdpfwd's AF_XDP generator, cheap per packet) or sendmmsg (a UDP socket); the gencost workloads compare them with trafgen")
	fs.IntVar(&o.FwdCPU, "fwd-cpu", 0, "CPU the forwarder processes are pinned to")
	fs.StringVar(&loadCPUs, "load-cpus", "", "CPUs perf's generators and receivers are pinned to, e.g. 1 or 1-3 (default: all but --fwd-cpu)")
	fs.IntVar(&o.Queues, "queues", 1, "RX/TX queues of every veth (multi-queue topology)")
	fs.StringVar(&o.PodRPS, "pod-rps", "off", "receive processing of the namespaces' veth ends: off (the kernel's default: on the CPU that sends into them, a forwarder's) or load (RPS to --load-cpus, as xdpfwd's CNI plugin does with \"rpsCPUs\")")
	fs.StringVar(&o.Src, "src", "", "checkout (module root) to build ./cmd/xdpfwd from, e.g. another commit's work tree (default: this module)")
	fs.StringVar(&o.RefSrc, "ref-src", "", "also run xdpfwd, xdpfwd-switch and xdpfwd-reflect built from this checkout, as contenders NAME-ref: a change against the code before it, in the same run")
	fs.BoolVar(&o.Readme, "readme", false, "rewrite the results section of perf/README.md from this run (or from --from)")
	fs.StringVar(&o.From, "from", "", "render tables (and, with --readme, the README section) from this results.json instead of running")
	fs.BoolVar(&o.Restart, "restart", false, "instead of the veth workloads, measure the silence and the datagrams lost across a plain restart of xdpfwd and across a handover (run --takeover), side by side, in xconnect and switch modes at 2,000 and 100,000 datagrams/s (--rounds, default 3; root; a few minutes)")
	fs.BoolVar(&o.IOMMU, "iommu", false, "instead of the veth workloads, count IOMMU maps per 1,000 forwarded packets in a QEMU guest with igb and virtio-net (internal/vmtest; root, fetch-assets.sh's assets; 5-10 minutes); with --from, render a saved iommu.jsonl")
	fs.BoolVar(&o.List, "list", false, "list contenders and workloads, then exit")
	fs.BoolVar(&o.KeepBuilds, "keep-builds", false, "keep the temporary directory with the built forwarders and their logs")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "fwd-cpu" {
			o.fwdCPUSet = true
		}
	})
	o.Only, o.Workloads = only, wl
	if o.Restart && (o.IOMMU || len(only) > 0 || len(wl) > 0 || o.RefSrc != "" || o.Quick) {
		return o, errors.New("--restart runs the restart workload alone: --iommu, --only, --workload, --ref-src and --quick do not apply to it (--from renders a saved restart.json)")
	}
	if o.IOMMU && (len(only) > 0 || len(wl) > 0 || o.RefSrc != "" || o.Quick) {
		return o, errors.New("--iommu runs the VM workload alone: --only, --workload, --ref-src and --quick do not apply to it")
	}
	if loadCPUs != "" {
		cpus, err := cpulist.Parse(loadCPUs)
		if err != nil {
			return o, fmt.Errorf("--load-cpus: %w", err)
		}
		o.LoadCPUs = cpus
	}
	switch {
	case o.Rounds < 0, o.Duration < 0, o.Warmup < 0, o.CostRate < 0:
		return o, errors.New("--rounds, --duration, --warmup and --cost-rate must not be negative")
	case o.Queues < 1:
		return o, errors.New("--queues must be at least 1")
	case o.Source != "txonly" && o.Source != "sendmmsg":
		return o, fmt.Errorf("--source %q: want txonly or sendmmsg", o.Source)
	case o.PodRPS != "" && o.PodRPS != "off" && o.PodRPS != "load":
		return o, fmt.Errorf("--pod-rps %q: want load or off", o.PodRPS)
	}
	if _, err := selectWithRefs(o.Only, o.RefSrc); err != nil {
		return o, err
	}
	if _, err := selectWorkloads(o.Workloads); err != nil {
		return o, err
	}
	o.Command = "go run ./perf"
	if len(args) > 0 {
		o.Command += " " + strings.Join(args, " ")
	}
	return o, nil
}

// listFlag collects a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func listTables(w io.Writer) {
	fmt.Fprintln(w, "contenders (--only):")
	for _, c := range contenderTable() {
		fmt.Fprintf(w, "  %-16s %s\n", c.Name, c.Label)
	}
	fmt.Fprintln(w, "workloads (--workload; a group name selects all of its workloads):")
	for _, wl := range workloadTable() {
		fmt.Fprintf(w, "  %-10s %-5s %s\n", wl.Name, wl.Group, wl.Title)
	}
}

// readmePath is perf/README.md under the module root.
func readmePath(o Options) string {
	root := o.Root
	if root == "" {
		if r, err := moduleRoot(); err == nil {
			root = r
		}
	}
	return filepath.Join(root, "perf", "README.md")
}
