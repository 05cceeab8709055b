package main

// Tests of --metrics and `xdpfwd stats`, in process and through the binary.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/logfmt"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// busyAddr returns a loopback address the test listens on until it ends.
func busyAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestServeMetricsAddrInUse: an address in use is a usage error (exit 2),
// found before the forwarder is touched.
func TestServeMetricsAddrInUse(t *testing.T) {
	addr := busyAddr(t)
	stop, err := serveMetrics(addr, nil, slog.New(slog.DiscardHandler), nil)
	if err == nil {
		stop()
		t.Fatal("serveMetrics on a busy address succeeded")
	}
	var ue usageError
	if !errors.As(err, &ue) {
		t.Errorf("error %T %v, want a usageError", err, err)
	}
	var stderr bytes.Buffer
	if code := exitCode(err, &stderr); code != exitUsage {
		t.Errorf("exit code %d, want %d", code, exitUsage)
	}
	for _, w := range []string{"--metrics", addr, "address already in use"} {
		if !strings.Contains(stderr.String(), w) {
			t.Errorf("message %q does not mention %q", stderr.String(), w)
		}
	}
}

// TestStatsFlags: bad stats command lines exit 2 and say why, in process.
func TestStatsFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{nil, "--metrics ADDR is required"},
		{[]string{"--metrics", "127.0.0.1:1", "--interval", "0s"}, "--interval"},
		{[]string{"--metrics", "127.0.0.1:1", "--interval", "-1s"}, "--interval"},
		{[]string{"--metrics", "127.0.0.1:1", "--count", "-1"}, "--count"},
		{[]string{"--metrics", "ftp://x:1"}, "scheme"},
		{[]string{"--metrics", "127.0.0.1:1", "extra"}, "unexpected argument"},
		{[]string{"--bogus"}, "not defined"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"stats"}, c.args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("stats %q: exit %d, stderr %q; want exit 2 mentioning %q", c.args, code, stderr.String(), c.want)
		}
	}
}

func TestMetricsURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9425":                     "http://127.0.0.1:9425/metrics",
		":9425":                              "http://127.0.0.1:9425/metrics",
		"http://h:1/":                        "http://h:1/metrics",
		"https://h:1/x/metrics":              "https://h:1/x/metrics",
		"[::1]:9425":                         "http://[::1]:9425/metrics",
		"http://daemon.example:9425/metrics": "http://daemon.example:9425/metrics",
	} {
		u, err := metricsURL(in)
		if err != nil || u.String() != want {
			t.Errorf("metricsURL(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
}

// TestStatsUnreachable: stats against a port nothing listens on exits 1
// at once, naming the address and the cause.
func TestStatsUnreachable(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	r := runBin(t, 30*time.Second, nil, "stats", "--metrics", addr, "--count", "1")
	t.Logf("exit %d in %v\nstderr: %s", r.code, r.elapsed.Round(time.Millisecond), r.stderr)
	if r.code != exitFailure {
		t.Errorf("exit %d, want 1", r.code)
	}
	for _, w := range []string{"cannot read the xdpfwd metrics", addr, "connection refused", "xdpfwd run --metrics"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not mention %q", w)
		}
	}
	if r.elapsed > 5*time.Second {
		t.Errorf("took %v to give up", r.elapsed)
	}
	checkNoPanic(t, "stderr", r.stderr)
}

// TestStatsNotXdpfwd: an HTTP server that is not xdpfwd is an error too.
func TestStatsNotXdpfwd(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "# TYPE other_total counter\nother_total 1")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"stats", "--metrics", ln.Addr().String(), "--count", "1"}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "no xdpfwd metrics") {
		t.Errorf("exit %d, stderr %q; want 1 and \"no xdpfwd metrics\"", code, stderr.String())
	}
}

// loggedMetricsAddr is the addr of the metricsLogMsg line in logs, or "".
func loggedMetricsAddr(logs string) string {
	f, _ := logfmt.Find(logs, metricsLogMsg)
	return f["addr"]
}

// waitMetricsAddr reads the bound address from the daemon's log.
func waitMetricsAddr(t *testing.T, pr *proc, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if addr := loggedMetricsAddr(pr.stderr.String()); addr != "" {
			return addr
		}
		if pr.exited() {
			t.Fatalf("xdpfwd exited %d before serving metrics\nstderr:\n%s", pr.cmd.ProcessState.ExitCode(), pr.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q line within %v\nstderr:\n%s", metricsLogMsg, within, pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunMetricsAndStats: `run --metrics 127.0.0.1:0` serves /metrics and
// /healthz on the port it logs; `stats --count 2` against it prints two
// tables naming both links, with the traffic sent meanwhile; SIGINT still
// exits 0 and leaves the links bare.
func TestRunMetricsAndStats(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--metrics", "127.0.0.1:0")
	waitAttached(t, pr, p, 5*time.Second)
	addr := waitMetricsAddr(t, pr, 5*time.Second)
	t.Logf("metrics on %s", addr)

	if code, body := httpGet(t, "http://"+addr+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200 \"ok\\n\"", code, body)
	}
	pingAcross(t, p, pr)
	code, body := httpGet(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, w := range []string{
		fmt.Sprintf(`xdpfwd_rx_packets_total{link=%q,namespace="",pod="",queue="0"}`, p.LinkA),
		fmt.Sprintf(`xdpfwd_tx_packets_total{link=%q,namespace="",pod="",queue="0"}`, p.LinkB),
		`xdpfwd_info{`, `version="`, `xdpfwd_umem_zone_free_units{zone="frames"}`, "go_goroutines",
	} {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}

	// Traffic during the stats run, so the tables show packets.
	done := make(chan error, 1)
	go func() {
		_, err := topo.UDPBurst(p.A, p.B, p.V4B, 20000, 200, 10*time.Second)
		done <- err
	}()
	r := runBin(t, 30*time.Second, nil, "stats", "--metrics", addr, "--interval", "300ms", "--count", "2")
	if err := <-done; err != nil {
		t.Errorf("UDP burst: %v", err)
	}
	t.Logf("xdpfwd stats: exit %d in %v\nstdout:\n%s\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("stats exit %d, want 0", r.code)
	}
	if n := strings.Count(r.stdout, "LINK"); n != 2 {
		t.Errorf("%d tables, want 2 (--count 2)", n)
	}
	for _, w := range []string{p.LinkA, p.LinkB, "PPS", "MBIT/S", "tx paths:", "umem free units:", "frames "} {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("stats output lacks %q", w)
		}
	}
	if !regexp.MustCompile(regexp.QuoteMeta(p.LinkA) + `\s+rx\s+[1-9][0-9]*\s`).MatchString(r.stdout) {
		t.Errorf("no table shows packets received on %s during the burst", p.LinkA)
	}
	checkNoPanic(t, "stats stdout", r.stdout)

	pr.interrupt()
	checkDetached(t, p.LinkA, p.LinkB)
	// The metrics endpoint went with the daemon.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the daemon exited", addr)
	}
}

// TestRunMetricsAddrInUse: `run --metrics` on a busy port exits 2 naming
// the address, and leaves nothing attached.
func TestRunMetricsAddrInUse(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	addr := busyAddr(t)
	r := runBin(t, 30*time.Second, nil, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--metrics", addr)
	t.Logf("exit %d in %v\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stderr)
	if r.code != exitUsage {
		t.Errorf("exit %d, want 2", r.code)
	}
	for _, w := range []string{"--metrics", addr, "address already in use"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr does not mention %q", w)
		}
	}
	checkNoPanic(t, "stderr", r.stderr)
	checkDetached(t, p.LinkA, p.LinkB)
}

// TestWriteTable: rates from two samples; drops non-zero only, on the
// direction they belong to; path shares; a reset counter counts from 0.
func TestWriteTable(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	mk := func(at time.Time, rxA, txB, dropped, kick, inline, frame float64) *sample {
		return &sample{
			at:    at,
			links: []string{"eth1", "eth2"},
			rxP:   map[string]float64{"eth1": rxA}, rxB: map[string]float64{"eth1": rxA * 125},
			txP: map[string]float64{"eth2": txB}, txB: map[string]float64{"eth2": txB * 125},
			drops: map[string]map[string]float64{
				"eth1": {"rx_dropped": dropped, "umem_exhausted": 0},
				"eth2": {"tx_kick_errors": kick},
			},
			paths: map[string]map[string]float64{"eth2": {"inline": inline, "frame": frame, "frag": 0, "chain": 0}},
			zones: []zoneSample{{"frames", 100, 40}},
		}
	}
	prev := mk(t0, 1000, 1000, 5, 0, 100, 100)
	cur := mk(t0.Add(2*time.Second), 3000, 2990, 25, 1, 1600, 600)
	var b bytes.Buffer
	writeTable(&b, prev, cur)
	out := b.String()
	t.Logf("\n%s", out)
	for _, w := range []*regexp.Regexp{
		regexp.MustCompile(`eth1\s+rx\s+1000\s+1\.0\s+rx_dropped 10\n`), // 2000 pkts × 1000 bit / 2 s
		regexp.MustCompile(`eth2\s+tx\s+995\s+1\.0\s+tx_kick_errors 0\.5\n`),
		regexp.MustCompile(`eth1\s+tx\s+0\s+0\.0\s+-\n`),
		regexp.MustCompile(`tx paths: eth1 - \| eth2 inline 75% frame 25% frag 0% chain 0%`),
		regexp.MustCompile(`umem free units: frames 40/100`),
	} {
		if !w.MatchString(out) {
			t.Errorf("table does not match %s", w)
		}
	}
	if strings.Contains(out, "umem_exhausted") {
		t.Errorf("a zero drop reason is shown")
	}
	// A restarted daemon: counters went down, deltas count from zero.
	b.Reset()
	writeTable(&b, cur, mk(t0.Add(3*time.Second), 10, 10, 0, 0, 0, 0))
	if !regexp.MustCompile(`eth1\s+rx\s+10\s`).MatchString(b.String()) {
		t.Errorf("after a reset:\n%s", b.String())
	}
}

// TestServeMetricsStopping: in process, with a real forwarder. /healthz is
// 200 while it runs and 503 once it is stopping (before it is closed);
// scrapes during and after Close are safe; the stop function closes the
// listener.
func TestServeMetricsStopping(t *testing.T) {
	p := newPair(t, topo.Options{})
	f, err := fwd.New(fwd.Config{Links: []string{p.LinkA, p.LinkB}})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	stop, err := serveMetrics("127.0.0.1:0", f, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	defer stop()
	addr := loggedMetricsAddr(logs.String())
	if addr == "" {
		f.Close()
		t.Fatalf("no %q line in the log:\n%s", metricsLogMsg, logs.String())
	}
	base := "http://" + addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	closed := false
	defer func() {
		if !closed {
			cancel()
			<-done
			f.Shutdown()
		}
	}()

	if code, body := httpGet(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("/healthz while running: %d %q", code, body)
	}
	if r, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second); err != nil || r.Received == 0 {
		t.Fatalf("ping across: %d/%d, %v", r.Received, r.Sent, err)
	}
	_, before := httpGet(t, base+"/metrics")

	f.Stop()
	code, body := httpGet(t, base+"/healthz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Errorf("/healthz once stopping: %d %q, want 503 and the reason", code, body)
	}
	cancel()
	<-done
	sum, err := f.Shutdown()
	closed = true
	if err != nil || sum.UMEM.LeakedAddresses != 0 {
		t.Errorf("Shutdown: %v, %d leaked", err, sum.UMEM.LeakedAddresses)
	}
	code, after := httpGet(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics after Close: %d", code)
	}
	rx := regexp.MustCompile(`(?m)^xdpfwd_rx_packets_total\{.*$`)
	if a, b := rx.FindAllString(before, -1), rx.FindAllString(after, -1); len(a) != 2 || strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Errorf("rx after Close %q, want the frozen %q", b, a)
	}
	stop()
	stop() // idempotent
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still listening after stop", addr)
	}
}

// TestMetricsServerLimits: in process, with a real forwarder. A kept-alive
// connection that idles is closed by the server; beyond the connection
// limit (connections in the middle of a request) a client waits, and is
// answered once a slot frees.
func TestMetricsServerLimits(t *testing.T) {
	p := newPair(t, topo.Options{})
	f, err := fwd.New(fwd.Config{Links: []string{p.LinkA, p.LinkB}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	serve := func(lim httpLimits) string {
		t.Helper()
		var logs syncBuffer
		stop, err := serveMetricsWith("127.0.0.1:0", f, slog.New(slog.NewTextHandler(&logs, nil)), lim, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		addr := loggedMetricsAddr(logs.String())
		if addr == "" {
			t.Fatalf("no %q line in the log:\n%s", metricsLogMsg, logs.String())
		}
		return addr
	}
	// request sends one keep-alive GET on c and reads the answer.
	request := func(c net.Conn, br *bufio.Reader, path string) (int, string) {
		t.Helper()
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: xdpfwd\r\n\r\n", path); err != nil {
			t.Fatalf("write request: %v", err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	dial := func(addr string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	t.Run("idle", func(t *testing.T) {
		addr := serve(httpLimits{readHeader: 5 * time.Second, read: 5 * time.Second, write: 5 * time.Second, idle: 200 * time.Millisecond, maxConns: 4})
		c, br := dial(addr)
		if code, _ := request(c, br, "/healthz"); code != 200 {
			t.Fatalf("/healthz: %d", code)
		}
		// Idle now: the server must hang up (EOF), well before our
		// deadline (a timeout).
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := br.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("idle kept-alive connection: read %d bytes, %v; want EOF (closed by the server)", n, err)
		}
	})

	t.Run("limit", func(t *testing.T) {
		addr := serve(httpLimits{readHeader: time.Minute, read: time.Minute, write: time.Minute, idle: time.Minute, maxConns: 2})
		var held []net.Conn
		for range 2 {
			c, _ := dial(addr)
			// In the middle of a request: holds its slot (an idle
			// kept-alive one would give it up, TestHealthzBehindIdleConns).
			if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: xdpfwd\r\n"); err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		c, br := dial(addr) // connects: the kernel's backlog takes it
		if _, err := fmt.Fprint(c, "GET /metrics HTTP/1.1\r\nHost: xdpfwd\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// Not answered while both slots are held. (A slow machine can
		// only make this pass for the wrong reason, never fail it.)
		c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if n, err := br.Peek(1); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a third connection beyond the limit of 2 was answered: %q, %v", n, err)
		}
		held[0].Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("the waiting client, after a slot freed: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "xdpfwd_rx_packets_total") {
			t.Errorf("/metrics for the waiting client: %d\n%.300s", resp.StatusCode, b)
		}
	})
}

// TestQueueRates: sink mode's stats line gives each RX queue's rate.
func TestQueueRates(t *testing.T) {
	got := queueRates([]string{"eth1"}, [][]uint64{{100, 0}}, [][]uint64{{300, 50}}, 2*time.Second)
	if want := " | eth1 rx pps per queue 0:100 1:25"; got != want {
		t.Errorf("queueRates = %q, want %q", got, want)
	}
}

// TestHealthzBehindIdleConns: clients that keep their connections alive
// between scrapes and hold every slot do not keep a liveness probe
// waiting: an idle connection gives its slot to a new one. Connections
// in the middle of a request keep theirs.
func TestHealthzBehindIdleConns(t *testing.T) {
	const slots = 3
	tests := []struct {
		name     string
		partial  int  // of the held connections, in the middle of a request
		answered bool // the probe, within 2 s
	}{
		{"idle", 0, true},
		{"one busy", 1, true},
		{"all busy", slots, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok\n") })
			lim := defaultHTTPLimits
			lim.maxConns = slots
			hs, lln := limitedServer(ln, h, lim, slog.New(slog.DiscardHandler))
			go hs.Serve(lln)
			defer hs.Close()
			addr := ln.Addr().String()
			dial := func() (net.Conn, *bufio.Reader) {
				t.Helper()
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c, bufio.NewReader(c)
			}
			get := func(c net.Conn, br *bufio.Reader, within time.Duration) error {
				t.Helper()
				if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: xdpfwd\r\n\r\n"); err != nil {
					return err
				}
				c.SetReadDeadline(time.Now().Add(within))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return err
				}
				io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					return fmt.Errorf("HTTP %d", resp.StatusCode)
				}
				return nil
			}
			for i := range slots {
				c, br := dial()
				if i < tc.partial {
					// Half a request: the server waits for the rest.
					fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: xdpfwd\r\n")
					continue
				}
				if err := get(c, br, 10*time.Second); err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				// Kept alive, idle: a scraper between two scrapes.
			}
			c, br := dial()
			start := time.Now()
			err = get(c, br, 2*time.Second)
			t.Logf("the probe beyond %d held slots (%d busy): %v after %v", slots, tc.partial, err, time.Since(start))
			if tc.answered && err != nil {
				t.Errorf("/healthz behind %d kept-alive connections: %v", slots, err)
			}
			if !tc.answered && !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("/healthz beyond %d connections in the middle of a request: %v, want no answer yet", slots, err)
			}
		})
	}
}

// TestMetricsXdpfwdFirst: /metrics serves every xdpfwd_* family before the
// Go runtime's and the process's, so `curl | head` shows xdpfwd's, and
// still serves those.
func TestMetricsXdpfwdFirst(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--metrics", "127.0.0.1:0")
	waitAttached(t, pr, p, 10*time.Second)
	addr := waitMetricsAddr(t, pr, 5*time.Second)
	code, body := httpGet(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	var fams []string
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllStringSubmatch(body, -1) {
		fams = append(fams, m[1])
	}
	lastXdpfwd, firstOther, others := -1, -1, 0
	for i, f := range fams {
		if strings.HasPrefix(f, "xdpfwd_") {
			lastXdpfwd = i
		} else {
			others++
			if firstOther < 0 {
				firstOther = i
			}
		}
	}
	t.Logf("%d families, the first %d xdpfwd_*: %v", len(fams), firstOther, fams[:min(len(fams), 5)])
	switch {
	case lastXdpfwd < 0 || others == 0:
		t.Errorf("want xdpfwd_* and Go runtime families, got %v", fams)
	case firstOther < lastXdpfwd:
		t.Errorf("%s (family %d) before %s (family %d): want every xdpfwd_* family first", fams[firstOther], firstOther, fams[lastXdpfwd], lastXdpfwd)
	}
	if !strings.Contains(body, "\ngo_goroutines ") {
		t.Errorf("/metrics lacks go_goroutines")
	}
	pr.interrupt()
}
