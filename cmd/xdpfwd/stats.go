// `xdpfwd stats`: a client of a running daemon's --metrics endpoint that
// prints its counters per second, a table per interval. The endpoint itself
// is metrics.go.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// cmdStats prints a running daemon's counters once per interval, read from
// its --metrics endpoint.
func cmdStats(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	addr := fs.String("metrics", "", "the daemon's --metrics address, `ADDR`: HOST:PORT or a URL (required)")
	interval := fs.Duration("interval", time.Second, "time between two tables, `D`")
	count := fs.Int("count", 0, "`N` tables to print, then exit; 0 = until Ctrl-C")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	switch {
	case *addr == "":
		return usageError{"stats: --metrics ADDR is required: the address given to 'xdpfwd run --metrics'"}
	case *interval <= 0:
		return usageError{fmt.Sprintf("stats: --interval %v: must be positive", *interval)}
	case *count < 0:
		return usageError{fmt.Sprintf("stats: --count %d: must be 0 (no limit) or more", *count)}
	}
	u, err := metricsURL(*addr)
	if err != nil {
		return usageError{fmt.Sprintf("stats: --metrics %q: %v", *addr, err)}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client := &http.Client{Timeout: max(*interval, 2*time.Second)}

	prev, err := scrape(ctx, client, u)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("stats: cannot read the xdpfwd metrics at %s: %w (is 'xdpfwd run --metrics %s' running?)", u, err, *addr)
	}
	fmt.Fprintln(stdout, prev.header(u))
	t := time.NewTicker(*interval)
	defer t.Stop()
	for n := 0; *count == 0 || n < *count; n++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := scrape(ctx, client, u)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("stats: lost the xdpfwd metrics at %s: %w", u, err)
		}
		writeTable(stdout, prev, cur)
		prev = cur
	}
	return nil
}

// metricsURL turns HOST:PORT, :PORT or a URL into the /metrics URL.
func metricsURL(addr string) (*url.URL, error) {
	s := addr
	if !strings.Contains(s, "://") {
		if strings.HasPrefix(s, ":") {
			s = "127.0.0.1" + s
		}
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/metrics"
	}
	return u, nil
}

// sample is one scrape, summed over queues.
type sample struct {
	at                 time.Time
	links              []string // sorted
	rxP, rxB, txP, txB map[string]float64
	drops              map[string]map[string]float64 // link → reason
	paths              map[string]map[string]float64 // link → path
	zones              []zoneSample
	info               map[string]string
	linkModes          map[string]string // link → xdp_mode
	queues             float64
}

type zoneSample struct {
	name        string
	units, free float64
}

const maxScrapeBytes = 16 << 20

func scrape(ctx context.Context, client *http.Client, u *url.URL) (*sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = unwrapNetErr(ue.Err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, maxScrapeBytes))
	if err != nil {
		return nil, fmt.Errorf("not Prometheus text: %w", err)
	}
	if fams["xdpfwd_info"] == nil || fams["xdpfwd_rx_packets_total"] == nil {
		return nil, errors.New("no xdpfwd metrics there")
	}
	return newSample(fams, time.Now()), nil
}

func newSample(fams map[string]*dto.MetricFamily, at time.Time) *sample {
	s := &sample{
		at:  at,
		rxP: map[string]float64{}, rxB: map[string]float64{}, txP: map[string]float64{}, txB: map[string]float64{},
		drops: map[string]map[string]float64{}, paths: map[string]map[string]float64{},
		info: map[string]string{}, linkModes: map[string]string{},
	}
	links := map[string]bool{}
	each := func(name string, fn func(labels map[string]string, v float64)) {
		mf := fams[name]
		if mf == nil {
			return
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			var v float64
			switch {
			case m.Counter != nil:
				v = m.Counter.GetValue()
			case m.Gauge != nil:
				v = m.Gauge.GetValue()
			case m.Untyped != nil:
				v = m.Untyped.GetValue()
			}
			fn(labels, v)
		}
	}
	sum := func(name string, into map[string]float64) {
		each(name, func(l map[string]string, v float64) {
			into[l["link"]] += v
			links[l["link"]] = true
		})
	}
	sum("xdpfwd_rx_packets_total", s.rxP)
	sum("xdpfwd_rx_bytes_total", s.rxB)
	sum("xdpfwd_tx_packets_total", s.txP)
	sum("xdpfwd_tx_bytes_total", s.txB)
	by := func(name, label string, into map[string]map[string]float64) {
		each(name, func(l map[string]string, v float64) {
			if into[l["link"]] == nil {
				into[l["link"]] = map[string]float64{}
			}
			into[l["link"]][l[label]] += v
		})
	}
	by("xdpfwd_drops_total", "reason", s.drops)
	by("xdpfwd_tx_path_packets_total", "path", s.paths)
	zones := map[string]*zoneSample{}
	zone := func(n string) *zoneSample {
		if zones[n] == nil {
			zones[n] = &zoneSample{name: n}
		}
		return zones[n]
	}
	each("xdpfwd_umem_zone_units", func(l map[string]string, v float64) { zone(l["zone"]).units = v })
	each("xdpfwd_umem_zone_free_units", func(l map[string]string, v float64) { zone(l["zone"]).free = v })
	for _, n := range slices.Sorted(maps.Keys(zones)) {
		s.zones = append(s.zones, *zones[n])
	}
	each("xdpfwd_info", func(l map[string]string, _ float64) { s.info = l })
	each("xdpfwd_link_info", func(l map[string]string, _ float64) { s.linkModes[l["link"]] = l["xdp_mode"] })
	each("xdpfwd_queues", func(_ map[string]string, v float64) { s.queues = v })
	s.links = slices.Sorted(maps.Keys(links))
	return s
}

// header describes the daemon once, above the tables.
func (s *sample) header(u *url.URL) string {
	var modes []string
	for _, l := range s.links {
		modes = append(modes, l+" "+s.linkModes[l])
	}
	if m := s.info["xdp_mode"]; m != "" && m != "mixed" {
		modes = []string{m}
	}
	return fmt.Sprintf("xdpfwd %s at %s: links %s; xdp %s; %s sockets; %.0f queue(s) per link; umem %s",
		s.info["version"], u, strings.Join(s.links, ", "), strings.Join(modes, ", "),
		s.info["bind_mode"], s.queues, s.info["umem_backing"])
}

// delta is a counter's increase; a counter that went down was reset (the
// daemon restarted) and counts from zero.
func delta(cur, prev float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

// txPathOrder is the order paths are shown in.
var txPathOrder = []string{"inline", "frame", "frag", "chain"}

// writeTable prints one interval: per link and direction packets/s, Mbit/s
// and drops/s by reason (non-zero only); TX path shares; UMEM free units.
func writeTable(w io.Writer, prev, cur *sample) {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		dt = math.SmallestNonzeroFloat64
	}
	width := len("LINK")
	for _, l := range cur.links {
		width = max(width, len(l))
	}
	fmt.Fprintf(w, "\n%s  over %.2fs\n", cur.at.Format("15:04:05"), dt)
	fmt.Fprintf(w, "%-*s  %-3s  %10s  %9s  %s\n", width, "LINK", "DIR", "PPS", "MBIT/S", "DROPS/S")
	for _, l := range cur.links {
		for _, dir := range []string{"rx", "tx"} {
			p, b := cur.rxP, cur.rxB
			pp, pb := prev.rxP, prev.rxB
			if dir == "tx" {
				p, b, pp, pb = cur.txP, cur.txB, prev.txP, prev.txB
			}
			pps := delta(p[l], pp[l]) / dt
			mbps := delta(b[l], pb[l]) * 8 / dt / 1e6
			var ds []string
			for _, r := range slices.Sorted(maps.Keys(cur.drops[l])) {
				if dropDir(r) != dir {
					continue
				}
				if d := delta(cur.drops[l][r], prev.drops[l][r]); d > 0 {
					ds = append(ds, r+" "+rate(d/dt))
				}
			}
			drops := "-"
			if len(ds) > 0 {
				drops = strings.Join(ds, ", ")
			}
			fmt.Fprintf(w, "%-*s  %-3s  %10.0f  %9.1f  %s\n", width, l, dir, pps, mbps, drops)
		}
	}
	var shares []string
	for _, l := range cur.links {
		var total float64
		d := map[string]float64{}
		for p, v := range cur.paths[l] {
			d[p] = delta(v, prev.paths[l][p])
			total += d[p]
		}
		if total == 0 {
			shares = append(shares, l+" -")
			continue
		}
		var parts []string
		for _, p := range pathsOf(d) {
			parts = append(parts, fmt.Sprintf("%s %.0f%%", p, 100*d[p]/total))
		}
		shares = append(shares, l+" "+strings.Join(parts, " "))
	}
	fmt.Fprintf(w, "tx paths: %s\n", strings.Join(shares, " | "))
	var zs []string
	for _, z := range cur.zones {
		zs = append(zs, fmt.Sprintf("%s %.0f/%.0f", z.name, z.free, z.units))
	}
	if len(zs) > 0 {
		fmt.Fprintf(w, "umem free units: %s\n", strings.Join(zs, ", "))
	}
}

// pathsOf orders the paths: the known ones first, then any new ones.
func pathsOf(d map[string]float64) []string {
	out := slices.Clone(txPathOrder)
	for _, p := range slices.Sorted(maps.Keys(d)) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// dropDir assigns a drop reason to the direction it is counted in: tx_*
// and handoff_full on the link the frame would have left from, the rest
// (rx_*, umem_exhausted) on the link it arrived on.
func dropDir(reason string) string {
	if strings.HasPrefix(reason, "tx_") || reason == fwd.DropHandoffFull {
		return "tx"
	}
	return "rx"
}

func rate(v float64) string {
	if v < 10 && v != math.Trunc(v) {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
