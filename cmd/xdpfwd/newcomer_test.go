package main

// Tests of what a newcomer meets first (issue 19): run --help, --queues,
// the demo's verdict, the exit summary, /metrics' order.

import (
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestRunHelpGrouped: `run --help` lists every flag of run once, with two
// dashes, under the groups of docs/operating.md's table in its order, and
// --queues says what 0 picks.
func TestRunHelpGrouped(t *testing.T) {
	t.Parallel()
	r := runBin(t, 30*time.Second, nil, "run", "--help")
	if r.code != 0 {
		t.Fatalf("run --help: exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	help := r.stderr
	t.Logf("run --help:\n%s", help)
	last := -1
	for _, g := range []string{"links and mode:", "queues and rings:", "TX paths:", "operations:"} {
		i := strings.Index(help, "\n"+g+"\n")
		if i < 0 {
			t.Errorf("no group heading %q", g)
			continue
		}
		if i < last {
			t.Errorf("group %q out of order", g)
		}
		last = i
	}
	if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindAllString(help, -1); len(m) > 0 {
		t.Errorf("%d flags printed with a single dash: %q", len(m), m)
	}
	newRunFlags().fs.VisitAll(func(f *flag.Flag) {
		if n := len(regexp.MustCompile(`(?m)^  --`+regexp.QuoteMeta(f.Name)+`( |$)`).FindAllString(help, -1)); n != 1 {
			t.Errorf("--%s listed %d times, want once", f.Name, n)
		}
	})
	q := regexp.MustCompile(`(?m)^  --queues.*\n((?:      .*\n)*)`).FindStringSubmatch(help)
	if q == nil {
		t.Fatalf("no --queues entry")
	}
	for _, w := range []string{"0", "auto", "CPUs", "queue count"} {
		if !strings.Contains(q[0], w) {
			t.Errorf("--queues help does not mention %q:\n%s", w, q[0])
		}
	}
}

// TestQueuesFlag: --queues -1 is refused with exit 2 and a message naming
// what is accepted; --queues 0 is the automatic count, accepted.
func TestQueuesFlag(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	r := runBin(t, 30*time.Second, nil, "run", "--link", p.LinkA, "--link", p.LinkB, "--queues", "-1")
	t.Logf("--queues -1: exit %d\n%s", r.code, r.stderr)
	if r.code != 2 {
		t.Errorf("--queues -1: exit %d, want 2", r.code)
	}
	for _, w := range []string{"--queues -1", "0 (auto", "1.."} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("--queues -1: message does not say %q", w)
		}
	}
	checkNoPanic(t, "stderr", r.stderr)
	checkDetached(t, p.LinkA, p.LinkB)

	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--queues", "0", "--stats-interval", "0")
	waitAttached(t, pr, p, 10*time.Second)
	if !strings.Contains(pr.stderr.String(), "workers=1") {
		t.Errorf("--queues 0 on one-queue links: want workers=1 in\n%s", pr.stderr.String())
	}
	pingAcross(t, p, pr)
	pr.interrupt()
}

// TestStopLogsTotals: on SIGTERM the daemon logs, after "stopped", one line
// per link with its rx and tx totals and drops by reason, the same figures
// as the --summary file.
func TestStopLogsTotals(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	path := filepath.Join(t.TempDir(), "s.json")
	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--summary", path)
	waitAttached(t, pr, p, 10*time.Second)
	u, err := topo.UDPBurst(p.A, p.B, p.V4B, 2000, 64, 10*time.Second)
	if err != nil || u.Received == 0 {
		t.Fatalf("UDP burst A→B: %d/%d: %v", u.Received, u.Sent, err)
	}
	pr.signal(syscall.SIGTERM)
	if code := pr.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\nstderr:\n%s", code, pr.stderr.String())
	}
	stderr := pr.stderr.String()
	t.Logf("stderr:\n%s", stderr)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Links map[string]struct {
			RXPackets uint64            `json:"rx_packets"`
			TXPackets uint64            `json:"tx_packets"`
			Drops     map[string]uint64 `json:"drops"`
		} `json:"links"`
	}
	if err := json.Unmarshal(raw, &sum); err != nil {
		t.Fatal(err)
	}
	stopped := strings.Index(stderr, `msg=stopped`)
	if stopped < 0 {
		t.Fatalf("no stopped line")
	}
	re := regexp.MustCompile(`msg="link totals" link=(\S+) rx_packets=(\d+) rx_bytes=\d+ tx_packets=(\d+) tx_bytes=\d+ drops=(\d+) drops_by_reason=(\S+|"[^"]*")`)
	lines := re.FindAllStringSubmatchIndex(stderr, -1)
	if len(lines) != 2 {
		t.Fatalf("%d link totals lines, want 2 (one per link)", len(lines))
	}
	for _, m := range lines {
		if m[0] < stopped {
			t.Errorf("link totals before the stopped line")
		}
		g := func(i int) string { return stderr[m[2*i]:m[2*i+1]] }
		name := g(1)
		s, ok := sum.Links[name]
		if !ok {
			t.Errorf("link totals for %q, not a link of the summary", name)
			continue
		}
		if g(2) != strconv.FormatUint(s.RXPackets, 10) || g(3) != strconv.FormatUint(s.TXPackets, 10) {
			t.Errorf("%s: logged rx %s tx %s, summary rx %d tx %d", name, g(2), g(3), s.RXPackets, s.TXPackets)
		}
		var total uint64
		for k, v := range s.Drops {
			if countedDrop(k) {
				total += v
			}
		}
		if g(4) != strconv.FormatUint(total, 10) {
			t.Errorf("%s: logged drops %s, summary %d", name, g(4), total)
		}
		if name == p.LinkA && s.RXPackets < uint64(u.Received) {
			t.Errorf("%s: rx_packets %d, fewer than the %d datagrams B received", name, s.RXPackets, u.Received)
		}
	}
}

// TestDropReasons: the reasons sum to the total, largest first, those left
// out of the total in parentheses, every reason has a meaning.
func TestDropReasons(t *testing.T) {
	for _, c := range []struct {
		drops map[string]uint64
		want  string
	}{
		{map[string]uint64{fwd.DropTXFull: 0, fwd.DropXDPPass: 0}, "none"},
		{map[string]uint64{fwd.DropXDPPass: 2, fwd.DropTXFull: 19, fwd.DropHandoffFull: 0}, "tx_full=19 xdp_pass=2"},
		{map[string]uint64{fwd.DropRXDropped: 5, fwd.DropFillRingEmpty: 5, fwd.DropRXRingFull: 5}, "rx_dropped=5 rx_ring_full=5 (rx_fill_ring_empty_descs=5)"},
	} {
		if got := dropReasons(fwd.LinkStats{Drops: c.drops}); got != c.want {
			t.Errorf("dropReasons(%v) = %q, want %q", c.drops, got, c.want)
		}
	}
	for _, r := range []string{fwd.DropRXDropped, fwd.DropRXRingFull, fwd.DropFillRingEmpty, fwd.DropRXInvalid, fwd.DropTXInvalid,
		fwd.DropUMEMExhausted, fwd.DropRXBadDesc, fwd.DropTXNoRoom, fwd.DropHandoffFull, fwd.DropRXTooLong, fwd.DropAtStop,
		fwd.DropHandler, fwd.DropTXFull, fwd.DropXDPPass, fwd.DropSpoofedSource, fwd.DropSpoofedIP} {
		if dropMeaning[r] == "" {
			t.Errorf("drop reason %s has no meaning to print", r)
		}
	}
}

// TestDemoVerdict: the demo, in both of its modes, ends with one PASS line
// and exit 0, prints every link's drops by reason and says once what each
// reason means. --max-loss 100 leaves the UDP loss, which depends on the
// machine's load, out of the verdict; TestDemoVerdictLine judges it.
func TestDemoVerdict(t *testing.T) {
	topo.RequireRoot(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"xconnect", []string{"demo", "--duration", "1s", "--tcp-mib", "8", "--udp-count", "20000", "--max-loss", "100"}},
		{"switch", []string{"demo", "--mode", "switch", "--tcp-mib", "4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBin(t, 2*time.Minute, nil, c.args...)
			t.Logf("xdpfwd %s: exit %d in %v\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "PASS: ") || r.code != 0 {
				t.Errorf("last line %q, exit %d; want a PASS line and exit 0", last, r.code)
			}
			if n := strings.Count(r.stdout, "PASS") + strings.Count(r.stdout, "FAIL"); n != 1 {
				t.Errorf("%d verdicts, want one", n)
			}
			links := regexp.MustCompile(`(?m)^  (xf\S+): rx .* drops (\d+): (.*)$`).FindAllStringSubmatch(r.stdout, -1)
			if len(links) < 2 {
				t.Fatalf("%d link lines with drops by reason, want one per link", len(links))
			}
			for _, l := range links {
				if l[2] == "0" && l[3] != "none" || l[2] != "0" && l[3] == "none" {
					t.Errorf("%s: drops %s but reasons %q", l[1], l[2], l[3])
				}
				for _, kv := range regexp.MustCompile(`([a-z_]+)=\d+`).FindAllStringSubmatch(l[3], -1) {
					if n := strings.Count(r.stdout, "\n    "+kv[1]+": "); n != 1 {
						t.Errorf("drop reason %s explained %d times, want once", kv[1], n)
					}
				}
			}
		})
	}
}

// TestDemoVerdictLine: the verdict fails on a failed check, a direction
// that delivered nothing, loss above the bound and a leaked address, names
// each, and passes otherwise.
func TestDemoVerdictLine(t *testing.T) {
	ok := demoResult{burst: topo.UDPResult{Sent: 1000, Received: 990}, dirSent: [2]int{100, 100}, dirGot: [2]int{90, 100}, bothWays: true, maxLoss: 50}
	for _, c := range []struct {
		name string
		edit func(r *demoResult)
		want string // "" for PASS
	}{
		{"all good", func(*demoResult) {}, ""},
		{"no both-ways phase", func(r *demoResult) { r.bothWays, r.dirSent, r.dirGot = false, [2]int{}, [2]int{} }, ""},
		{"check failed", func(r *demoResult) { r.checkErr = errors.New("ping6 A→B: 0/3 replies") }, "ping6 A→B: 0/3 replies"},
		{"B→A delivered nothing", func(r *demoResult) { r.dirGot[1] = 0 }, "udp B→A: nothing delivered of 100 sent"},
		{"loss above bound", func(r *demoResult) { r.dirGot[0] = 40 }, "udp loss 60.0% > 50%"},
		{"burst loss above bound", func(r *demoResult) { r.burst.Received = 100 }, "udp loss 90.0% > 50%"},
		{"leak", func(r *demoResult) { r.leaked = 3 }, "3 UMEM addresses leaked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			c.edit(&r)
			line, err := r.verdict()
			switch {
			case c.want == "" && (err != nil || !strings.HasPrefix(line, "PASS: ")):
				t.Errorf("verdict %q, %v; want PASS and no error", line, err)
			case c.want != "" && (err == nil || !strings.HasPrefix(line, "FAIL: ") || !strings.Contains(line, c.want)):
				t.Errorf("verdict %q, %v; want FAIL naming %q and an error", line, err, c.want)
			case c.want != "" && exitCode(err, io.Discard) != exitFailure:
				t.Errorf("exit code %d on FAIL, want %d", exitCode(err, io.Discard), exitFailure)
			}
			if !strings.Contains(line, "at most 50% lost") {
				t.Errorf("verdict %q does not state the loss bound", line)
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
