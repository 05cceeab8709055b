package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// xdpfwd runs with --metrics 127.0.0.1:0 and logs the address it bound:
// workloads that need xdpfwd's own counts over their window (delivery)
// scrape it before and after.
var metricsAddrRe = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// metricsAddr is the address the running forwarder serves its metrics on,
// from its log; "" if it serves none (not xdpfwd, or an xdpfwd without
// --metrics). It waits up to within for the log line.
func (c *child) metricsAddr(within time.Duration) string {
	if c == nil || !c.metrics {
		return ""
	}
	deadline := time.Now().Add(within)
	for {
		if b, err := os.ReadFile(c.logPath); err == nil {
			if m := metricsAddrRe.FindSubmatch(b); m != nil {
				return string(m[1])
			}
		}
		if c.exited() || !time.Now().Before(deadline) {
			return ""
		}
		time.Sleep(20 * time.Millisecond)
	}
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
