package main

// The restart workload (--restart): what a restart of the daemon costs
// the traffic it forwards, a plain one (SIGTERM, then the same command
// again: what systemctl restart or a pod replaced one way or another did
// before the handover) beside a handover (xdpfwd run --takeover), in
// xconnect and switch modes (the switch's two pods added over the control
// socket, so that a plain restart adds them back from its link state
// file), at a low and a high rate. A sequenced UDP stream crosses each
// trial: the longest silence at the receiver around the event and the
// datagrams lost. Trials are interleaved over rounds; every trial builds
// its own namespaces.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// restartTrial is one restart of one kind in one mode at one rate.
type restartTrial struct {
	Round   int           `json:"round"`
	Mode    string        `json:"mode"` // xconnect, switch
	Rate    int           `json:"rate"` // datagrams/s
	Kind    string        `json:"kind"` // restart, handover
	Silence time.Duration `json:"silence_ns"`
	Lost    uint64        `json:"lost"`
	Sent    uint64        `json:"sent"`
	Took    time.Duration `json:"took_ns"` // the event, from the signal (or the successor's start) to the new daemon forwarding
	Err     string        `json:"error,omitempty"`
}

var (
	restartModes = []string{"xconnect", "switch"}
	restartRates = []int{2_000, 100_000}
	restartKinds = []string{"restart", "handover"}
)

// restartMain runs --restart: rounds of every trial, interleaved, then
// the table on stdout and the trials in Out/restart.json.
func restartMain(ctx context.Context, o Options, stdout, stderr io.Writer) int {
	if o.From != "" {
		var trials []restartTrial
		b, err := os.ReadFile(o.From)
		if err == nil {
			err = json.Unmarshal(b, &trials)
		}
		if err != nil {
			fmt.Fprintf(stderr, "perf: %v\n", err)
			return 1
		}
		fmt.Fprint(stdout, restartTable(trials))
		return 0
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "perf: --restart needs root (namespaces, XDP); euid is %d\n", os.Geteuid())
		return 1
	}
	if o.Out == "" {
		o.Out = "perf-results"
	}
	rounds := o.Rounds
	if rounds == 0 {
		rounds = 3
	}
	src := o.Src
	if src == "" {
		var err error
		if src, err = moduleRoot(); err != nil {
			fmt.Fprintf(stderr, "perf: %v\n", err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "xdpfwd-perf-restart-")
	if err != nil {
		fmt.Fprintf(stderr, "perf: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "xdpfwd")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/xdpfwd")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(stderr, "perf: go build ./cmd/xdpfwd: %v\n%s", err, out)
		return 1
	}
	var trials []restartTrial
	for r := range rounds {
		for _, mode := range restartModes {
			for _, rate := range restartRates {
				// Which kind goes first alternates by round.
				kinds := slices.Clone(restartKinds)
				if r%2 == 1 {
					slices.Reverse(kinds)
				}
				for _, kind := range kinds {
					if ctx.Err() != nil {
						break
					}
					tr := runRestartTrial(ctx, bin, dir, mode, rate, kind)
					tr.Round = r
					fmt.Fprintf(stderr, "perf: restart round %d/%d: %s %d/s %s: silence %v, %d of %d lost, took %v %s\n",
						r+1, rounds, mode, rate, kind, tr.Silence.Round(time.Microsecond), tr.Lost, tr.Sent, tr.Took.Round(time.Microsecond), tr.Err)
					trials = append(trials, tr)
				}
			}
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err == nil {
		b, _ := json.MarshalIndent(trials, "", "  ")
		os.WriteFile(filepath.Join(o.Out, "restart.json"), b, 0o644)
		os.WriteFile(filepath.Join(o.Out, "restart.md"), []byte(restartTable(trials)), 0o644)
	}
	fmt.Fprint(stdout, restartTable(trials))
	if ctx.Err() != nil {
		return 1
	}
	return 0
}

// runRestartTrial builds the topology, starts the daemon, streams at rate
// for a second, restarts or hands over, streams a second more.
func runRestartTrial(ctx context.Context, bin, dir, mode string, rate int, kind string) (tr restartTrial) {
	tr = restartTrial{Mode: mode, Rate: rate, Kind: kind}
	fail := func(err error) restartTrial {
		tr.Err = err.Error()
		return tr
	}
	h, err := topo.NewHosts(3, topo.Options{})
	if err != nil {
		return fail(err)
	}
	defer h.Close()
	ctl := filepath.Join(dir, fmt.Sprintf("%s.sock", h.Name))
	args := []string{"run", "--mode", mode, "--stats-interval", "0", "--control", ctl}
	// The stream goes from host 1 to host 2: through a cross-connect of
	// their links, or the switch's two pods (host 0 its uplink).
	var from, to *topo.NS
	var fromIP, toIP netip.Addr
	from, to, fromIP, toIP = h.NS[1], h.NS[2], h.V4[1], h.V4[2]
	if mode == "xconnect" {
		args = append(args, "--link", h.Links[1], "--link", h.Links[2])
	} else {
		args = append(args, "--link", h.Links[0], "--max-links", "8", "--ring-size", "2048", "--added-ring-size", "2048")
	}
	d, err := startDaemon(ctx, bin, dir, args)
	if err != nil {
		return fail(err)
	}
	defer func() { d.stop() }()
	if mode == "switch" {
		for _, l := range h.Links[1:] {
			if out, err := exec.CommandContext(ctx, bin, "link", "add", "--control", ctl, l).CombinedOutput(); err != nil {
				return fail(fmt.Errorf("link add %s: %v: %s", l, err, out))
			}
		}
	}
	if r, err := topo.Ping(from, toIP, 1, 5*time.Second); err != nil || r.Received != 1 {
		return fail(fmt.Errorf("no ping before: %+v %v", r, err))
	}
	s, err := topo.StartSeqStream(from, to, fromIP, toIP, rate, 64, time.Millisecond)
	if err != nil {
		return fail(err)
	}
	time.Sleep(time.Second)
	begin := time.Now()
	var next *daemon
	if kind == "restart" {
		if err := d.stopWith(syscall.SIGTERM, 15*time.Second); err != nil {
			s.Stop(0)
			return fail(err)
		}
		next, err = startDaemon(ctx, bin, dir, args)
	} else {
		next, err = startDaemon(ctx, bin, dir, append(slices.Clone(args), "--takeover", ctl))
		if err == nil {
			err = d.waitExit(15 * time.Second)
		}
	}
	tr.Took = time.Since(begin)
	if next != nil {
		d = next
	}
	if err != nil {
		s.Stop(0)
		return fail(err)
	}
	end := time.Now()
	time.Sleep(time.Second)
	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		return fail(err)
	}
	tr.Lost, tr.Sent = res.Lost, res.Sent
	for _, g := range res.Gaps {
		if g.At.Add(g.Len).After(begin.Add(-10*time.Millisecond)) && g.At.Before(end.Add(10*time.Millisecond)) {
			tr.Silence = max(tr.Silence, g.Len)
		}
	}
	return tr
}

// daemon is an xdpfwd run perf started, logging to a file.
type daemon struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startDaemon starts bin with args and waits until it forwards (or took
// over: its log says so either way).
func startDaemon(ctx context.Context, bin, dir string, args []string) (*daemon, error) {
	f, err := os.CreateTemp(dir, "daemon-*.log")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d := &daemon{cmd: exec.Command(bin, args...), log: f.Name(), done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		b, _ := os.ReadFile(d.log)
		if bytes.Contains(b, []byte(`msg="forwarder ready"`)) && !slices.Contains(args, "--takeover") ||
			bytes.Contains(b, []byte(`msg="took over the datapath"`)) {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("xdpfwd %s exited: %s", strings.Join(args, " "), lastLines(b, 5))
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("xdpfwd %s: not forwarding 30 s later: %s", strings.Join(args, " "), lastLines(b, 5))
		}
	}
}

func (d *daemon) waitExit(within time.Duration) error {
	select {
	case <-d.done:
		return nil
	case <-time.After(within):
		return errors.New("the predecessor did not exit after the handover")
	}
}

func (d *daemon) stopWith(sig syscall.Signal, within time.Duration) error {
	d.cmd.Process.Signal(sig)
	select {
	case <-d.done:
		return nil
	case <-time.After(within):
		d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("xdpfwd did not stop on %v within %v", sig, within)
	}
}

func (d *daemon) stop() {
	select {
	case <-d.done:
	default:
		d.stopWith(syscall.SIGINT, 15*time.Second)
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// restartTable is the Markdown table of the trials: per mode and rate,
// each kind's median silence and loss (with their ranges), and the
// handover's as a share of the restart's.
func restartTable(trials []restartTrial) string {
	var b strings.Builder
	b.WriteString("| mode | rate | restart: silence | restart: lost | handover: silence | handover: lost | restart took | handover took |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, mode := range restartModes {
		for _, rate := range restartRates {
			col := func(kind string, f func(restartTrial) float64, unit string) string {
				var v []float64
				fails := 0
				for _, t := range trials {
					if t.Mode == mode && t.Rate == rate && t.Kind == kind {
						if t.Err != "" {
							fails++
							continue
						}
						v = append(v, f(t))
					}
				}
				if len(v) == 0 {
					return "not run"
				}
				sort.Float64s(v)
				prec := 1
				if unit == "" {
					prec = 0
				}
				s := fmt.Sprintf("%.*f%s (%.*f–%.*f)", prec, v[len(v)/2], unit, prec, v[0], prec, v[len(v)-1])
				if fails > 0 {
					s += fmt.Sprintf(", %d failed", fails)
				}
				return s
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			silence := func(t restartTrial) float64 { return ms(t.Silence) }
			lost := func(t restartTrial) float64 { return float64(t.Lost) }
			took := func(t restartTrial) float64 { return ms(t.Took) }
			fmt.Fprintf(&b, "| %s | %d/s | %s | %s | %s | %s | %s | %s |\n", mode, rate,
				col("restart", silence, " ms"), col("restart", lost, ""), col("handover", silence, " ms"), col("handover", lost, ""),
				col("restart", took, " ms"), col("handover", took, " ms"))
		}
	}
	return b.String()
}
