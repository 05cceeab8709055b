package measure

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// exposition is a /metrics page as xdpfwd serves it, with a metric perf
// does not ask for and a label value with an escaped quote.
const exposition = `# HELP xdpfwd_rx_packets_total Frames received.
# TYPE xdpfwd_rx_packets_total counter
xdpfwd_rx_packets_total{link="a",queue="0"} 100
xdpfwd_rx_packets_total{link="a",queue="1"} 50
xdpfwd_rx_packets_total{link="b",queue="0"} 7
xdpfwd_tx_packets_total{link="b",queue="0"} 140
xdpfwd_tx_packets_total{link="a",queue="0"} 3
xdpfwd_drops_total{link="a",reason="tx_ring_full"} 4
xdpfwd_drops_total{link="a",reason="rx_fill_ring_empty_descs"} 1000
xdpfwd_drops_total{link="a",reason="umem_exhausted"} 9
xdpfwd_build_info{version="v1 \"x\""} 1
`

func serve(t *testing.T, page string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, page)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestScrape: only the named metrics, each line with its labels and
// value, escaped quotes kept as written.
func TestScrape(t *testing.T) {
	addr := serve(t, exposition)
	ss, err := Scrape(context.Background(), addr, "xdpfwd_tx_packets_total", "xdpfwd_build_info")
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 3 {
		t.Fatalf("%d samples, want 3: %+v", len(ss), ss)
	}
	if s := ss[0]; s.Name != "xdpfwd_tx_packets_total" || s.Labels["link"] != "b" || s.Labels["queue"] != "0" || s.Value != 140 {
		t.Errorf("first sample %+v", s)
	}
	if s := ss[2]; s.Name != "xdpfwd_build_info" || s.Labels["version"] != `v1 \"x\"` || s.Value != 1 {
		t.Errorf("build_info sample %+v", s)
	}
}

// TestFwdCounts: one direction's counts, RX of the ingress link by queue,
// TX of the egress link, and drops but the two reasons that are not lost
// frames.
func TestFwdCounts(t *testing.T) {
	addr := serve(t, exposition)
	c, err := ReadSettledFwdCounts(context.Background(), addr, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if c.RX != 150 || c.TX != 140 || c.Dropped != 4 || c.RXByQueue["0"] != 100 || c.RXByQueue["1"] != 50 {
		t.Errorf("counts %+v, want rx 150 (100+50), tx 140, dropped 4", c)
	}
}

// TestScrapeNotXdpfwd: a server without /metrics is an error naming the
// status.
func TestScrapeNotXdpfwd(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	if _, err := Scrape(context.Background(), strings.TrimPrefix(srv.URL, "http://"), "x"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("err %v, want the 404", err)
	}
}

// TestReadings: /proc/stat has a line per CPU and busy time only grows;
// this process's own costs read.
func TestReadings(t *testing.T) {
	a, err := ReadCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 1e6; i++ {
		_ = os.Getpid()
	}
	b, err := ReadCPUTimes()
	if err != nil {
		t.Fatal(err)
	}
	if a.CPUs() < 1 || b.CPUs() != a.CPUs() || BusyNs(a, b) < 0 || !b.At.After(a.At) {
		t.Errorf("CPU times: %d then %d CPUs, busy %v ns", a.CPUs(), b.CPUs(), BusyNs(a, b))
	}
	pc := ReadProcCost(os.Getpid())
	if !pc.OK || pc.VCS+pc.NCS == 0 {
		t.Errorf("own process: %+v, want read, with context switches", pc)
	}
	if pc := ReadProcCost(-1); pc.OK {
		t.Errorf("no process: %+v, want not OK", pc)
	}
	if own := NewOwnCPU().NS(0); own <= 0 {
		t.Errorf("own CPU %v ns, want > 0", own)
	}
}
