// xdpfwd's Prometheus metrics: a scrape of /metrics, and the frame counts
// of one direction of the delivery workload.

package measure

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Sample is one line of a Prometheus text exposition.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

var promLabelRe = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// Scrape reads every sample of the metrics named in names from
// http://addr/metrics.
func Scrape(ctx context.Context, addr string, names ...string) ([]Sample, error) {
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
	var out []Sample
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
		s := Sample{Name: name, Labels: map[string]string{}}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				continue
			}
			for _, m := range promLabelRe.FindAllStringSubmatch(rest[1:j], -1) {
				s.Labels[m[1]] = m[2]
			}
			rest = rest[j+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if s.Value, err = strconv.ParseFloat(f[0], 64); err != nil {
			continue
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// FwdCounts are xdpfwd's own counts for one direction of the delivery
// workload: frames it received on the ingress link, frames it transmitted
// on the egress link, and frames it counted as lost (every drop reason but
// rx_fill_ring_empty_descs, a subset of rx_dropped, and umem_exhausted,
// which counts events, not frames), per link and in all.
type FwdCounts struct {
	RX, TX, Dropped float64
	RXByQueue       map[string]float64 // RX by the queue label
}

// ReadSettledFwdCounts reads the counts once two reads 20 ms apart agree
// (at most for 500 ms): a worker adds a batch's counts just after it sends
// the batch, so a read right after traffic stops can miss its last one.
func ReadSettledFwdCounts(ctx context.Context, addr, in, out string) (FwdCounts, error) {
	c, err := readFwdCounts(ctx, addr, in, out)
	for deadline := time.Now().Add(500 * time.Millisecond); err == nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		var n FwdCounts
		if n, err = readFwdCounts(ctx, addr, in, out); err == nil && n.RX == c.RX && n.TX == c.TX && n.Dropped == c.Dropped {
			return n, nil
		}
		c = n
	}
	return c, err
}

func readFwdCounts(ctx context.Context, addr, in, out string) (FwdCounts, error) {
	ss, err := Scrape(ctx, addr, "xdpfwd_rx_packets_total", "xdpfwd_tx_packets_total", "xdpfwd_drops_total")
	if err != nil {
		return FwdCounts{}, err
	}
	c := FwdCounts{RXByQueue: map[string]float64{}}
	for _, s := range ss {
		switch s.Name {
		case "xdpfwd_rx_packets_total":
			if s.Labels["link"] == in {
				c.RX += s.Value
				c.RXByQueue[s.Labels["queue"]] += s.Value
			}
		case "xdpfwd_tx_packets_total":
			if s.Labels["link"] == out {
				c.TX += s.Value
			}
		case "xdpfwd_drops_total":
			if r := s.Labels["reason"]; r != "rx_fill_ring_empty_descs" && r != "umem_exhausted" {
				c.Dropped += s.Value
			}
		}
	}
	return c, nil
}
