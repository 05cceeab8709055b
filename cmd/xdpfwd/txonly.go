// --mode txonly (the generator: its flags, and the daemon's run of it)
// and --mode sink's lines and summary.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/modes"
)

// genFlags are --mode txonly's flags (registered from the settings
// table).
type genFlags struct {
	size     string
	count    uint64
	duration time.Duration
	rate     string
	flows    int
	flowsBy  string
	vlan     int
	dstMAC   string
	srcIP    string
	dstIP    string
	srcPort  uint
	dstPort  uint
	batch    int
}

// parseRate reads a packet rate with an optional k, M or G suffix: a
// finite number, 0 (unpaced) or positive, at most 1G. How small a
// positive rate may be, gen.New says (a socket's interval between packets
// must fit in a time.Duration).
func parseRate(arg string) (float64, error) {
	mult, s := 1.0, arg
	switch {
	case strings.HasSuffix(s, "k"), strings.HasSuffix(s, "K"):
		mult, s = 1e3, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mult, s = 1e9, s[:len(s)-1]
	}
	v, err := strconv.ParseFloat(s, 64)
	// !(v >= 0) is also NaN's case.
	if err != nil || !(v >= 0) || math.IsInf(v, 0) || v*mult > 1e9 {
		return 0, fmt.Errorf("--rate %q: want packets per second, a number 0 (unpaced) .. 1G, e.g. 100k", arg)
	}
	return v * mult, nil
}

// parseSizes reads --size.
func parseSizes(s string) ([]int, error) {
	if s == "imix" {
		return gen.IMIX, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("--size %q: want bytes, a list like 64,512, or imix", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// genConfig builds the generator's configuration from the flags.
func (gf *genFlags) config(ff *fwdFlags, cfg fwd.Config) (gen.Config, error) {
	var c gen.Config
	var err error
	if c.Sizes, err = parseSizes(gf.size); err != nil {
		return c, usageError{err.Error()}
	}
	if c.Rate, err = parseRate(gf.rate); err != nil {
		return c, usageError{err.Error()}
	}
	t := &c.Template
	if t.DstMAC, err = net.ParseMAC(gf.dstMAC); err != nil || len(t.DstMAC) != 6 {
		return c, usageError{fmt.Sprintf("--dst-mac %q: not an Ethernet MAC address", gf.dstMAC)}
	}
	if t.SrcIP, err = netip.ParseAddr(gf.srcIP); err != nil || !t.SrcIP.Is4() {
		return c, usageError{fmt.Sprintf("--src-ip %q: want an IPv4 address", gf.srcIP)}
	}
	if t.DstIP, err = netip.ParseAddr(gf.dstIP); err != nil || !t.DstIP.Is4() {
		return c, usageError{fmt.Sprintf("--dst-ip %q: want an IPv4 address", gf.dstIP)}
	}
	if gf.srcPort == 0 || gf.srcPort > 65535 || gf.dstPort == 0 || gf.dstPort > 65535 {
		return c, usageError{"--src-port and --dst-port: want 1..65535"}
	}
	t.SrcPort, t.DstPort = uint16(gf.srcPort), uint16(gf.dstPort)
	switch gf.flowsBy {
	case "port":
	case "ip":
		t.ByIP = true
	default:
		return c, usageError{fmt.Sprintf("--flows-by %q: want port or ip", gf.flowsBy)}
	}
	if gf.vlan < 0 || gf.vlan > 4094 {
		return c, usageError{fmt.Sprintf("--vlan %d: want 1..4094 (0: untagged)", gf.vlan)}
	}
	t.VLAN = gf.vlan
	if gf.batch < 1 {
		return c, usageError{fmt.Sprintf("--batch %d: want 1..4096", gf.batch)}
	}
	c.Links, c.Queues, c.Count, c.Duration, c.Flows, c.Batch = cfg.Links, ff.cfg.Queues, gf.count, gf.duration, gf.flows, gf.batch
	c.RingSize, c.ZeroCopy, c.HugePages = cfg.RingSize, cfg.ZeroCopy, cfg.HugePages
	return c, nil
}

// runTxOnly is `xdpfwd run --mode txonly`: generate until the count, the
// duration or a signal, with a stats line every interval.
func (d *daemon) runTxOnly(ctx context.Context) error {
	gf, logger, interval, summary, stderr := &d.st.gf, d.logger, d.st.interval, d.st.summary, d.stderr
	gc, err := gf.config(d.ff, d.st.cfg)
	if err != nil {
		return err
	}
	g, err := gen.New(gc)
	var ie gen.InputError
	if errors.As(err, &ie) {
		msg := ie.Error()
		if strings.HasPrefix(msg, "rate ") {
			msg = "--" + msg // the flag's name, as the user wrote it
		}
		return usageError{msg}
	}
	if err != nil {
		return err
	}
	defer g.Close()
	logger.Info("txonly ready", "links", strings.Join(gc.Links, ","), "queues", max(gc.Queues, 1),
		"sizes", gf.size, "flows", g.Stats().Flows, "rate_pps", gc.Rate, "count", gc.Count, "duration", gc.Duration.String())
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if interval <= 0 {
			<-done
			return
		}
		t := time.NewTicker(interval)
		defer t.Stop()
		prev, last := g.Stats(), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				cur := g.Stats()
				fmt.Fprintln(stderr, txStatsLine(prev, cur, now.Sub(last)))
				prev, last = cur, now
			}
		}
	}()
	runErr := g.Run(ctx)
	close(done)
	<-stopped
	s := g.Stats()
	for _, q := range s.Queues {
		logger.Info("txonly queue", "link", q.Link, "queue", q.Queue, "sent", q.Sent, "completed", q.Completed,
			"kicks", q.Kicks, "kick_errors", q.KickErrors, "stalls", q.Stalls, "tx_invalid_descs", q.TXInvalid,
			"burst", q.Burst, "forgiven", q.Forgiven)
	}
	logger.Info("txonly done", "sent", s.Sent, "completed", s.Completed, "bytes", s.Bytes,
		"duration_s", fmt.Sprintf("%.3f", s.DurationS), "pps", fmt.Sprintf("%.0f", s.PPS))
	if summary != "" {
		runErr = errors.Join(runErr, writeSummary(summary, s))
	}
	if s.Completed != s.Sent {
		runErr = errors.Join(runErr, fmt.Errorf("txonly: %d of %d packets sent never completed", s.Sent-s.Completed, s.Sent))
	}
	return errors.Join(runErr, g.Close())
}

// txStatsLine gives each queue's TX rate between two readings.
func txStatsLine(prev, cur gen.Summary, dt time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "txonly %.0f pps sent, %d total", float64(cur.Sent-prev.Sent)/dt.Seconds(), cur.Sent)
	for i, q := range cur.Queues {
		fmt.Fprintf(&b, " | %s/%d %.0f pps, %d stalls", q.Link, q.Queue, float64(q.Sent-prev.Queues[i].Sent)/dt.Seconds(), q.Stalls)
	}
	return b.String()
}

// daemonSummary is a daemon's summary: the forwarder's, with what a
// counting sink saw of the generator's frames and the pods its links
// serve (those removed while it ran among them).
type daemonSummary struct {
	fwd.Summary
	Sink *modes.SinkReport     `json:"sink,omitempty"`
	Pods map[string]linkop.Pod `json:"pods,omitempty"`
}

func summaryOf(s fwd.Summary, sink *modes.CountingSink, pods map[string]linkop.Pod) daemonSummary {
	d := daemonSummary{Summary: s}
	if sink != nil {
		r := sink.Report()
		d.Sink = &r
	}
	for link, p := range pods {
		if _, ok := s.Links[link]; ok {
			if d.Pods == nil {
				d.Pods = map[string]linkop.Pod{}
			}
			d.Pods[link] = p
		}
	}
	return d
}

// logSink logs a counting sink's totals and latency.
func logSink(logger *slog.Logger, sink *modes.CountingSink) {
	if sink == nil {
		return
	}
	r := sink.Report()
	logger.Info("sink", "generator_frames", r.Frames, "other_frames", r.Other, "flows", len(r.Flows),
		"lost", r.Lost, "reordered", r.Reordered, "duplicates", r.Dups, "seq_jumps", r.SeqJumps, "bad_checksum", r.BadChecksum,
		"latency_p50_us", fmt.Sprintf("%.1f", float64(r.Latency.P50)/1e3),
		"latency_p99_us", fmt.Sprintf("%.1f", float64(r.Latency.P99)/1e3),
		"latency_p999_us", fmt.Sprintf("%.1f", float64(r.Latency.P999)/1e3))
}

// sinkLines prints a counting sink's totals every interval, under the
// stats line, until the returned stop is called.
func sinkLines(sink *modes.CountingSink, interval time.Duration, stderr io.Writer) (stop func()) {
	if sink == nil || interval <= 0 {
		return func() {}
	}
	return every(interval, func() {
		r := sink.Report()
		fmt.Fprintf(stderr, "sink: %d generator frames in %d flows, %d lost, %d reordered, %d duplicates, %d seq jumps; latency p50 %.1f p99 %.1f p999 %.1f µs; %d other frames, %d bad checksum\n",
			r.Frames, len(r.Flows), r.Lost, r.Reordered, r.Dups, r.SeqJumps,
			float64(r.Latency.P50)/1e3, float64(r.Latency.P99)/1e3, float64(r.Latency.P999)/1e3, r.Other, r.BadChecksum)
	})
}

// every runs fn every d on a goroutine of its own until the returned stop
// is called; stop returns once fn no longer runs.
func every(d time.Duration, fn func()) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn()
			}
		}
	}()
	return func() { close(done); <-stopped }
}
