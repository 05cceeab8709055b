package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/logfmt"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// metricsLogMsg is the line xdpfwd logs once its --metrics endpoint
// listens, with the address it bound as addr (cmd/xdpfwd/metrics.go).
const metricsLogMsg = "serving metrics"

// startXdpfwd starts xdpfwd as startForwarder does, with --metrics
// 127.0.0.1:0 when the build has the flag, and records the address it
// bound (child.metricsAddr): workloads that need xdpfwd's own counts over
// their window (cost, delivery) scrape it before and after. Port 0 leaves
// the choice to the kernel, so no other process can take the port between
// a pick and the bind; the daemon logs the port before it forwards, so
// once startForwarder has seen traffic cross, the line is in the log.
func (e *env) startXdpfwd(ctx context.Context, p *topo.Pair, name, bin string, args []string, cpus []int) (*child, error) {
	if e.xdpfwdMetrics {
		args = append(slices.Clone(args), "--metrics", "127.0.0.1:0")
	}
	c, err := e.startForwarder(ctx, p, name, bin, args, cpus)
	if err != nil || !e.xdpfwdMetrics {
		return c, err
	}
	if c.metricsAddr, err = c.waitMetricsAddr(2 * time.Second); err != nil {
		e.child.Store(nil)
		return nil, errors.Join(err, c.stop(5*time.Second))
	}
	return c, nil
}

// waitMetricsAddr waits up to within for the addr field of the daemon's
// "serving metrics" log line.
func (c *child) waitMetricsAddr(within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		exited := c.exited() // before the read: the log is then complete
		if f, ok := logfmt.Find(c.p.Output(), metricsLogMsg); ok && f["addr"] != "" {
			return f["addr"], nil
		}
		if exited {
			return "", fmt.Errorf("%s exited before it logged %q%s", c.name, metricsLogMsg, c.logTail())
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("%s: no %q line with an addr in its log within %v%s", c.name, metricsLogMsg, within, c.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metrics is the address the forwarder c serves its metrics on; "" when
// there is none running, or it serves none (not xdpfwd, or an xdpfwd
// without --metrics).
func (c *child) metrics() string {
	if c == nil {
		return ""
	}
	return c.metricsAddr
}

// promSample is one line of a Prometheus text exposition.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

var promLabelRe = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrapeMetrics reads every sample of the metrics named in names from
// http://addr/metrics.
func scrapeMetrics(ctx context.Context, addr string, names ...string) ([]promSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape xdpfwd metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape xdpfwd metrics: %s", resp.Status)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []promSample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if !want[name] {
			continue
		}
		s := promSample{name: name, labels: map[string]string{}}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				continue
			}
			for _, m := range promLabelRe.FindAllStringSubmatch(rest[1:j], -1) {
				s.labels[m[1]] = m[2]
			}
			rest = rest[j+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if s.value, err = strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// fwdCounts are xdpfwd's own counts for one direction of the delivery
// workload: frames it received on the ingress link, frames it transmitted
// on the egress link, and frames it counted as lost (every drop reason but
// rx_fill_ring_empty_descs, a subset of rx_dropped, and umem_exhausted,
// which counts events, not frames), per link and in all.
type fwdCounts struct {
	rx, tx, dropped float64
	rxByQueue       map[string]float64
}

// readSettledFwdCounts reads the counts once two reads 20 ms apart agree
// (at most for 500 ms): a worker adds a batch's counts just after it sends
// the batch, so a read right after traffic stops can miss its last one.
func readSettledFwdCounts(ctx context.Context, addr, in, out string) (fwdCounts, error) {
	c, err := readFwdCounts(ctx, addr, in, out)
	for deadline := time.Now().Add(500 * time.Millisecond); err == nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		var n fwdCounts
		if n, err = readFwdCounts(ctx, addr, in, out); err == nil && n.rx == c.rx && n.tx == c.tx && n.dropped == c.dropped {
			return n, nil
		}
		c = n
	}
	return c, err
}

func readFwdCounts(ctx context.Context, addr, in, out string) (fwdCounts, error) {
	ss, err := scrapeMetrics(ctx, addr, "xdpfwd_rx_packets_total", "xdpfwd_tx_packets_total", "xdpfwd_drops_total")
	if err != nil {
		return fwdCounts{}, err
	}
	c := fwdCounts{rxByQueue: map[string]float64{}}
	for _, s := range ss {
		switch s.name {
		case "xdpfwd_rx_packets_total":
			if s.labels["link"] == in {
				c.rx += s.value
				c.rxByQueue[s.labels["queue"]] += s.value
			}
		case "xdpfwd_tx_packets_total":
			if s.labels["link"] == out {
				c.tx += s.value
			}
		case "xdpfwd_drops_total":
			if r := s.labels["reason"]; r != "rx_fill_ring_empty_descs" && r != "umem_exhausted" {
				c.dropped += s.value
			}
		}
	}
	return c, nil
}
