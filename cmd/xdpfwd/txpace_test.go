package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestTxOnlyBadRate: a rate that cannot pace (not a number, infinite,
// negative, or so small that one packet's interval overflows
// time.Duration) is a usage error: exit 2 naming --rate, at once.
func TestTxOnlyBadRate(t *testing.T) {
	p := newPair(t, topo.Options{})
	binary(t)
	for _, rate := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "-1", "-5k", "1e-300", "1e-11", "0x1p-1000"} {
		t.Run(rate, func(t *testing.T) {
			// --count 2: the second packet is the one an overflowing
			// pacer never reaches.
			r := runBin(t, 10*time.Second, nil, "run", "--mode", "txonly", "--link", p.LinkA, "--rate", rate,
				"--count", "2", "--control", "off", "--stats-interval", "0")
			checkNoPanic(t, "stderr", r.stderr)
			if r.timedOut || r.code != 2 || !strings.Contains(r.stderr, "--rate") {
				t.Fatalf("--rate %s: exit %d after %v (timed out %v), want 2 at once with a message naming --rate\nstderr:\n%s",
					rate, r.code, r.elapsed.Round(time.Millisecond), r.timedOut, r.stderr)
			}
		})
	}
}

// txLinkPackets is what a link has transmitted.
func txLinkPackets(t *testing.T, link string) uint64 {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatalf("link %s: %v", link, err)
	}
	return l.Attrs().Statistics.TxPackets
}

// TestTxOnlySIGTERM: `--rate 1` waits a second between packets; a SIGTERM
// in that wait ends the run promptly, exit 0, with its summary written.
func TestTxOnlySIGTERM(t *testing.T) {
	p := newPair(t, topo.Options{})
	sumFile := filepath.Join(t.TempDir(), "tx.json")
	before := txLinkPackets(t, p.LinkA)
	pr := startBin(t, "run", "--mode", "txonly", "--link", p.LinkA, "--rate", "1", "--summary", sumFile,
		"--stats-interval", "0", "--control", "off")
	// The first packet is due at once; after it the pacer waits.
	for deadline := time.Now().Add(10 * time.Second); txLinkPackets(t, p.LinkA) == before; {
		if pr.exited() || time.Now().After(deadline) {
			t.Fatalf("txonly sent nothing within 10 s\nstderr:\n%s", pr.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	pr.signal(syscall.SIGTERM)
	code := pr.wait(10 * time.Second)
	took := time.Since(start)
	t.Logf("exit %d %v after SIGTERM", code, took.Round(time.Millisecond))
	checkNoPanic(t, "stderr", pr.stderr.String())
	if code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\nstderr:\n%s", code, pr.stderr.String())
	}
	// The wait is answered within ~100 ms; the rest is the process's
	// teardown (sockets, the region), on a shared machine.
	if took > 750*time.Millisecond {
		t.Errorf("SIGTERM took %v to end the run: the pacer's wait is not interruptible", took)
	}
	b, err := os.ReadFile(sumFile)
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	var s struct {
		Sent      uint64 `json:"sent"`
		Completed uint64 `json:"completed"`
	}
	if err := json.Unmarshal(b, &s); err != nil || s.Sent < 1 || s.Completed != s.Sent {
		t.Fatalf("summary %s (%v): want sent ≥ 1, all completed", b, err)
	}
}

// TestTxOnlySpaced: `--rate 10 --count 70` sends one packet every 100 ms
// (the pacer's burst at 10 pps is one packet), as a capture on the far
// end shows: no two packets closer than a quarter of the interval, and the
// run lasts the 6.9 s it should.
func TestTxOnlySpaced(t *testing.T) {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("tcpdump not installed")
		}
		t.Skip("tcpdump not installed")
	}
	p := newPair(t, topo.Options{})
	binary(t)
	const count, rate = 70, 10.0
	file := filepath.Join(t.TempDir(), "tx.pcap")
	cap := exec.Command("ip", "netns", "exec", p.A.Name, "tcpdump", "-i", p.PeerA, "-nn", "-U", "-w", file,
		"-c", strconv.Itoa(count), "udp and dst port 9")
	var capErr syncBuffer
	cap.Stderr = &capErr
	if err := cap.Start(); err != nil {
		t.Fatal(err)
	}
	var capWait error
	capDone := make(chan struct{})
	go func() { capWait = cap.Wait(); close(capDone) }()
	t.Cleanup(func() {
		cap.Process.Kill() // ours, by PID (ip netns exec execs tcpdump); harmless once exited
		<-capDone
	})
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(capErr.String(), "listening on"); {
		if time.Now().After(deadline) {
			t.Fatalf("tcpdump not listening within 10 s\n%s", capErr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := runBin(t, 30*time.Second, nil, "run", "--mode", "txonly", "--link", p.LinkA, "--rate", "10",
		"--count", strconv.Itoa(count), "--control", "off", "--stats-interval", "0")
	if r.code != 0 {
		t.Fatalf("txonly: exit %d after %v\n%s", r.code, r.elapsed, r.stderr)
	}
	select {
	case <-capDone:
		if capWait != nil {
			t.Fatalf("tcpdump: %v\n%s", capWait, capErr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("tcpdump saw fewer than %d frames\n%s", count, capErr.String())
	}
	out, err := exec.Command("tcpdump", "-r", file, "-tt", "-nn").Output()
	if err != nil {
		t.Fatalf("tcpdump -r: %v", err)
	}
	var at []float64
	for _, ln := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(ln)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			t.Fatalf("capture line %q: %v", ln, err)
		}
		at = append(at, v)
	}
	if len(at) != count {
		t.Fatalf("%d frames in the capture, want %d", len(at), count)
	}
	gaps := make([]float64, 0, count-1)
	for i := 1; i < len(at); i++ {
		gaps = append(gaps, at[i]-at[i-1])
	}
	sorted := append([]float64(nil), gaps...)
	sort.Float64s(sorted)
	span := at[len(at)-1] - at[0]
	t.Logf("%d frames over %.3f s; gaps min %.1f ms, median %.1f ms, max %.1f ms", len(at), span,
		sorted[0]*1e3, sorted[len(sorted)/2]*1e3, sorted[len(sorted)-1]*1e3)
	// A quarter of the interval: a frame the scheduler held back a little
	// is not a burst; back to back (the old pacer's 63) is.
	interval := 1 / rate
	for i, g := range gaps {
		if g < interval/4 {
			t.Fatalf("frames %d and %d %.3f ms apart: a burst, want one frame every %.0f ms", i, i+1, g*1e3, interval*1e3)
		}
	}
	if want := float64(count-1) * interval; span < want*0.95 || span > want*1.1 {
		t.Fatalf("the frames span %.3f s, want %.1f s (%d intervals of %.0f ms)", span, want, count-1, interval*1e3)
	}
}
