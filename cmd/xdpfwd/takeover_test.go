package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// pauseRE reads a successor's pause, and the frames it found waiting on
// the RX rings, from its log.
var pauseRE = regexp.MustCompile(`msg="took over the datapath" from_pid=\d+ pause=(\S+) handovers=\d+ waiting_frames=(\d+)`)

// tookOver waits until successor next took over from prev, which exits
// 0, and returns the pause next logged and the frames it found waiting.
func tookOver(t *testing.T, prev, next *proc) (time.Duration, int) {
	t.Helper()
	waitLog(t, next, "took over the datapath", 30*time.Second)
	if code := prev.wait(10 * time.Second); code != 0 {
		t.Fatalf("the predecessor exited %d after the handover, want 0\nits log:\n%s\nthe successor's:\n%s", code, prev.stderr.String(), next.stderr.String())
	}
	if !strings.Contains(prev.stderr.String(), "handed over: the successor forwards") {
		t.Errorf("the predecessor's log does not say it handed over:\n%s", prev.stderr.String())
	}
	m := pauseRE.FindStringSubmatch(next.stderr.String())
	if m == nil {
		t.Fatalf("no pause in the successor's log:\n%s", next.stderr.String())
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	waiting, _ := strconv.Atoi(m[2])
	return d, waiting
}

// TestDaemonHandover: a cross-connect daemon carries a sequenced UDP
// stream at 100,000 datagrams/s while it is replaced ten times in a row
// by `xdpfwd run --takeover`, each successor taking the datapath over
// from the one before: none lost, duplicated or reordered; no datagram
// held, from the sender's write to the receiving kernel's stamp, longer
// than a pause and twice the stream's normal jitter outside the
// handovers (checkStream); each predecessor exits 0; a capture of the first ends with
// it, exit 0 with its totals, saying why; the last one's summary counts
// every datagram, the handovers and no UMEM address leaked.
func TestDaemonHandover(t *testing.T) {
	p := newTestPair(t)
	dir := t.TempDir()
	ctl, summary := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "summary.json")
	// Rings of 4096: 40 ms of the stream. A pause here is 3-16 ms, and a
	// predecessor may be behind already, its successor's start taking the
	// CPUs it forwards on: rings of 2048 overflowed once in 13 runs.
	args := []string{"run", "--link", p.LinkA, "--link", p.LinkB, "--ring-size", "4096", "--stats-interval", "0", "--control", ctl,
		"--metrics", "127.0.0.1:0", "--summary", summary}
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if res, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || res.Received != 1 {
		t.Fatalf("ping before: %+v %v", res, err)
	}
	kernel := kernelDrops(t, hop{p.A, "eth0"}, hop{nil, p.LinkA}, hop{nil, p.LinkB}, hop{p.B, "eth0"})
	s, err := topo.StartSeqStream(p.A, p.B, p.V4A, p.V4B, 100_000, 64, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// A capture of the first daemon's (of ICMP: none of the stream's,
	// whose writing would load the machine) ends with it, cleanly.
	c := startCapture(t, "--control", ctl, "-w", filepath.Join(dir, "c.pcapng"), "icmp")
	time.Sleep(handoverBaseline) // the stream's normal
	var handovers []window
	var pauses []time.Duration
	waiting := 0
	for i := range 10 {
		begin := time.Now()
		next := startBin(t, append(args, "--takeover", ctl)...)
		pause, w := tookOver(t, d, next)
		pauses, waiting = append(pauses, pause), waiting+w
		handovers = append(handovers, window{begin, time.Now()})
		d = next
		if i == 0 {
			code := c.wait(10 * time.Second)
			if msg := c.stderr.String(); code != 0 || !strings.Contains(msg, "handed its datapath to its successor") || !capturedRE.MatchString(msg) {
				t.Errorf("the predecessor's capture: exit %d, want 0 with its totals and the handover named:\n%s", code, msg)
			}
		}
		time.Sleep(handoverSpacing)
	}
	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		t.Error(err)
	}
	checkStream(t, res, handovers, pauses, kernel)
	// What arrived while a predecessor was frozen waited on the RX ring
	// and the successor forwarded it (none lost, above): at 100,000/s
	// and pauses of a millisecond or more, some every time.
	t.Logf("%d frames waited on the RX rings across the handovers", waiting)
	if waiting == 0 {
		t.Errorf("no frame waited on the RX rings in 10 handovers at 100,000/s: the successors did not say, or did not take the rings as they stood")
	}
	d.interrupt()
	b, err := os.ReadFile(summary)
	var sum fwd.Summary
	if err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary: %v", err)
	}
	if got := sum.Links[p.LinkB].TXPackets; got < res.Received {
		t.Errorf("the last daemon's summary: %d sent on %s, fewer than the %d the stream received: counters not carried over", got, p.LinkB, res.Received)
	}
	if sum.UMEM.LeakedAddresses != 0 || sum.UMEM.OwnershipViolations != 0 {
		t.Errorf("summary: %d UMEM addresses leaked, %d ownership violations", sum.UMEM.LeakedAddresses, sum.UMEM.OwnershipViolations)
	}
}

// hop is a link on a stream's way: nil ns is the root namespace.
type hop struct {
	ns   *topo.NS
	link string
}

// kernelDrops snapshots the kernel's drop counters on a stream's way and
// returns what they counted since: a loss report says whether the kernel
// dropped outside the forwarder (a veth's NAPI ring full, a receive buffer).
func kernelDrops(t *testing.T, way ...hop) func() string {
	t.Helper()
	read := func() []topo.KernelDrops {
		var ds []topo.KernelDrops
		for _, h := range way {
			d, err := topo.Drops(h.ns, h.link)
			if err != nil {
				t.Errorf("kernel drops: %v", err)
			}
			ds = append(ds, d)
		}
		return ds
	}
	before := read()
	return func() string {
		var b strings.Builder
		for i, d := range read() {
			name := way[i].link
			if way[i].ns != nil {
				name = way[i].ns.Name + "/" + name
			}
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s: %v", name, topo.KernelDrops{
				RX: d.RX - before[i].RX, TX: d.TX - before[i].TX, UDPRcvbuf: d.UDPRcvbuf - before[i].UDPRcvbuf})
		}
		return b.String()
	}
}

// The handover tests measure the stream's normal over handoverBaseline
// before the first handover and handoverSpacing after each (checkStream).
const (
	handoverBaseline = 2 * time.Second
	handoverSpacing  = 300 * time.Millisecond
)

// window is a stretch of a test's time: a handover's.
type window struct{ from, to time.Time }

// checkStream holds a sequenced stream across handovers (windows) to
// nothing lost, duplicated or reordered, and no datagram held during a
// handover longer than twice the longest pause (the predecessor frozen
// to the successor forwarding: one to wait it out, one for the successor
// to work off what arrived meanwhile while more arrives, which on this
// machine near its limit takes about as long) and twice the stream's
// normal jitter: the longest silence at the receiver, or wait of a
// datagram, outside them (at least 5 ms: the sender's 1 ms tick on a
// loaded 2-core machine). It logs the silences, the pauses and where
// each loss was written.
//
// The normal is measured over more of the stream's time than the
// handovers take (handoverBaseline before them, handoverSpacing between):
// on this 2-core machine a handover's holds, the successor's start
// competing with the workers and the pause (3-25 ms), are 15-55 ms, and
// the stream's stalls with no handover 5-40 ms; a normal taken over one
// second was 6 ms once, and a 13 ms hold failed it.
func checkStream(t *testing.T, res topo.SeqResult, handovers []window, pauses []time.Duration, kernel func() string) {
	t.Helper()
	in := func(at time.Time, d time.Duration) bool {
		for _, h := range handovers {
			if at.Add(d).After(h.from) && at.Before(h.to) {
				return true
			}
		}
		return false
	}
	var silence, outside, held, waited time.Duration
	for _, g := range res.Gaps {
		if in(g.At, g.Len) {
			silence = max(silence, g.Len)
		} else {
			outside = max(outside, g.Len)
		}
	}
	for _, g := range res.Delays {
		if in(g.At.Add(-g.Len), g.Len) {
			held = max(held, g.Len)
		} else {
			waited = max(waited, g.Len)
		}
	}
	t.Logf("%d sent (%d forgiven: due while the sender was descheduled), %d received; during the handovers a datagram was held %v at most and the receiver heard nothing for %v at most; outside them %v and %v; pauses %v; the kernel's drops on the way: %s",
		res.Sent, res.Forgiven, res.Received, held, silence, waited, outside, pauses, kernel())
	normal := max(outside, waited)
	if len(res.LostRuns) > 0 {
		t.Logf("the losses, each placed against the handover that began last before it was written: %s", placeLosses(res.LostRuns, handovers))
	}
	if res.Lost != 0 || res.Reordered != 0 || res.Duplicates != 0 || res.Received == 0 {
		t.Errorf("across %d handovers: %d sent, %d lost, %d reordered, %d duplicated; want none", len(handovers), res.Sent, res.Lost, res.Reordered, res.Duplicates)
	}
	// A datagram that arrives as a predecessor freezes waits the pause
	// out, and then its turn behind what arrived meanwhile: the bound is
	// the normal's, plus the longest pause twice.
	pause := slices.Max(pauses)
	if bound := max(2*normal, 5*time.Millisecond) + 2*pause; held > bound {
		t.Errorf("a datagram was held %v during a handover, beyond %v (twice the stream's longest silence or wait outside them, %v, at least 5 ms, and twice the longest pause, %v)", held, bound, normal, pause)
	}
}

// placeLosses says where each run of lost datagrams was written relative
// to the handovers: "N at +D into handover K (which took L)", or "N at
// D before the first".
func placeLosses(runs []topo.LostRun, handovers []window) string {
	var b strings.Builder
	for i, r := range runs {
		if i == 20 {
			fmt.Fprintf(&b, "; %d runs more", len(runs)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		k := -1
		for j, h := range handovers {
			if !r.At.Before(h.from) {
				k = j
			}
		}
		switch {
		case len(handovers) == 0: // a stream that failed before the first
			fmt.Fprintf(&b, "%d", r.Count)
		case k < 0:
			fmt.Fprintf(&b, "%d at %v before the first", r.Count, handovers[0].from.Sub(r.At).Round(100*time.Microsecond))
		default:
			h := handovers[k]
			fmt.Fprintf(&b, "%d at +%v into handover %d (which took %v)", r.Count, r.At.Sub(h.from).Round(100*time.Microsecond), k+1, h.to.Sub(h.from).Round(100*time.Microsecond))
		}
	}
	return b.String()
}

// newTestPair is a pair of namespaces joined by two veths whose root ends
// are a cross-connect's links; removed at cleanup.
func newTestPair(t *testing.T) *topo.Pair {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestDaemonHandoverSwitch: a switch with an uplink and four pods added as
// the CNI plugin adds them (port security on, pod 4 policed to 1 Mbit/s
// in), on rings of 4096 entries (--max-links 8 would size them 512, which
// this 2-core machine overflows at this load whether or not a handover
// happens: 356 to 2,621 of 230,000 datagrams lost to rx_ring_full in 2 s
// without one; and it stalls a worker now and then for 35 ms, with five
// namespaces' traffic generated on its two cores: 1,414 lost once in ten
// runs on rings of 2048), replaced ten times in a row by --takeover
// while it carries a sequenced UDP stream at 50,000 datagrams/s from pod
// 1 to pod 2 (half the cross-connect's: with the TCP stream, the spoofed
// frames and two daemons on this machine's two cores, a predecessor fell
// up to 20 ms behind while its successor built, and a freeze of 15-25 ms
// on top of that filled rings of 4096 at 100,000/s in 2 of 13 runs and
// once in CI; some 1,000 frames still wait on the rings each handover), a
// paced TCP stream from pod 1 to pod 3, and, from pod 2, a frame claiming pod
// 1's MAC every 2 ms: the UDP stream loses, reorders and duplicates
// nothing; the TCP stream arrives whole with no burst of retransmissions
// (at most two a handover: tail-loss probes, not losses); no
// spoofed frame reaches the uplink's host, every one is counted as
// spoofed_source across the daemons; pod 4's limit holds after the last
// handover; link list shows the pods, secured and policed, as before.
func TestDaemonHandoverSwitch(t *testing.T) {
	h := newHosts(t, 5)
	dir := t.TempDir()
	ctl, summary := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "summary.json")
	args := []string{"run", "--mode", "switch", "--link", h.Links[0], "--max-links", "8", "--ring-size", "4096", "--added-ring-size", "4096", "--stats-interval", "0",
		"--control", ctl, "--summary", summary}
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	macs := make([]net.HardwareAddr, 5)
	for i := range macs {
		m, err := h.NS[i].HardwareAddr("eth0")
		if err != nil {
			t.Fatal(err)
		}
		macs[i] = m
		if i == 0 {
			continue
		}
		a := []string{"link", "add", h.Links[i], "--mac", m.String(), "--ip", h.V4[i].String(), "--ip", h.V6[i].String(),
			"--pod", fmt.Sprintf("default/pod-%d", i), "--control", ctl}
		if i == 4 {
			a = append(a, "--ingress-rate", "1M", "--ingress-burst", "64KiB")
		}
		if r := runBin(t, 10*time.Second, nil, a...); r.code != 0 {
			t.Fatalf("link add %s: exit %d, %s", h.Links[i], r.code, r.stderr)
		}
	}
	for _, i := range []int{0, 2, 3, 4} {
		if res, err := topo.Ping(h.NS[1], h.V4[i], 1, 3*time.Second); err != nil || res.Received != 1 {
			t.Fatalf("ping pod 1 → %d: %+v %v", i, res, err)
		}
	}
	before := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl).stdout

	kernel := kernelDrops(t, hop{h.NS[1], "eth0"}, hop{nil, h.Links[1]}, hop{nil, h.Links[2]}, hop{h.NS[2], "eth0"})
	s, err := topo.StartSeqStream(h.NS[1], h.NS[2], h.V4[1], h.V4[2], 50_000, 64, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	const tcpBytes = 16 << 20
	deadline := time.Now().Add(60 * time.Second)
	l, err := topo.ListenStream(h.NS[3], h.V4[3], tcpBytes, deadline)
	if err != nil {
		t.Fatal(err)
	}
	var tc net.Conn
	if err := h.NS[1].Do(func() (err error) { tc, err = topo.DialStream(l.Addr(), deadline); return err }); err != nil {
		t.Fatal(err)
	}
	tcpDone := make(chan error, 1)
	go func() { tcpDone <- topo.SendStreamPaced(tc, tcpBytes, 2<<20, deadline) }() // 2 MB/s: eight seconds, past the last handover
	// Pod 2 claims pod 1's MAC every 2 ms, each frame marked.
	uplink, err := topo.ListenRaw(h.NS[0])
	if err != nil {
		t.Fatal(err)
	}
	defer uplink.Close()
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	spoof := append(topo.UDPFrame(bcast, macs[1], h.V4[2], h.V4[0], 9, 9, 60), "SPOOF39!"...)
	var spoofs atomic.Int64
	stopSpoof := make(chan struct{})
	spoofed := make(chan struct{})
	go func() {
		defer close(spoofed)
		for {
			select {
			case <-stopSpoof:
				return
			case <-time.After(2 * time.Millisecond):
			}
			if topo.SendRaw(h.NS[2], [][]byte{spoof}, time.Second) == nil {
				spoofs.Add(1)
			}
		}
	}()
	heard := make(chan int, 1)
	go func() {
		n := 0
		for {
			f, err := uplink.Next(time.Now().Add(6 * time.Second))
			if err != nil {
				heard <- n
				return
			}
			if bytes.Contains(f, []byte("SPOOF39!")) {
				n++
			}
		}
	}()

	time.Sleep(handoverBaseline) // the stream's normal
	var pauses []time.Duration
	var handovers []window
	for range 10 {
		begin := time.Now()
		next := startBin(t, append(args, "--takeover", ctl)...)
		pause, _ := tookOver(t, d, next)
		pauses = append(pauses, pause)
		handovers = append(handovers, window{begin, time.Now()})
		d = next
		time.Sleep(handoverSpacing)
	}
	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		t.Error(err)
	}
	close(stopSpoof)
	<-spoofed
	if err := <-tcpDone; err != nil {
		t.Errorf("TCP pod 1 → 3: %v", err)
	}
	retrans, rerr := topo.Retransmits(tc)
	tc.Close()
	tr, terr := l.Wait()
	checkStream(t, res, handovers, pauses, kernel)
	t.Logf("TCP %d bytes, %d retransmissions; %d spoofed frames sent", tr.Bytes, retrans, spoofs.Load())
	// A pause may fire a tail loss probe (a retransmission of the
	// last segment, after twice the round trip), and so may a stall of
	// this machine's outside the handovers (10-20 ms ones are common,
	// above): no burst, which a loss would start (a window's worth at
	// a retransmission timeout), means at most two a handover.
	if terr != nil || tr.Bytes != tcpBytes || rerr != nil || retrans > 20 {
		t.Errorf("TCP across 10 handovers: %d of %d bytes (%v), %d retransmissions (%v); want all, at most two a handover", tr.Bytes, tcpBytes, terr, retrans, rerr)
	}
	if n := <-heard; n != 0 {
		t.Errorf("the uplink's host heard %d frames claiming pod 1's MAC from pod 2", n)
	}
	if !strings.Contains(before, "default/pod-4") {
		t.Errorf("link list before the handovers does not show the pods:\n%s", before)
	}
	if after := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl).stdout; policyColumn(after) != policyColumn(before) {
		t.Errorf("link list after the handovers:\n%s\nbefore:\n%s", after, before)
	}
	// Pod 4's limit holds: 300 datagrams of 1000 bytes from the uplink's
	// host, at most the burst and the rate's worth arrive.
	if r, err := topo.UDPBurst(h.NS[0], h.NS[4], h.V4[4], 300, 1000, 3*time.Second); err != nil || r.Received > 90 {
		t.Errorf("300 datagrams to the 1 Mbit/s pod after the handovers: %+v, %v; want at most 90 (64 KiB of burst)", r, err)
	}
	d.interrupt()
	b, err := os.ReadFile(summary)
	var sum fwd.Summary
	if err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary: %v", err)
	}
	for _, l := range h.Links {
		t.Logf("%s: rx %d tx %d, drops %s", l, sum.Links[l].RXPackets, sum.Links[l].TXPackets, dropReasons(sum.Links[l]))
	}
	if got := sum.Links[h.Links[2]].Drops[fwd.DropSpoofedSource]; got != uint64(spoofs.Load()) {
		t.Errorf("spoofed_source on pod 2's link across the daemons: %d, want the %d sent", got, spoofs.Load())
	}
	if sum.UMEM.LeakedAddresses != 0 {
		t.Errorf("%d UMEM addresses leaked", sum.UMEM.LeakedAddresses)
	}
}

// policyColumn is link list's links and POD and POLICY columns, without
// counters.
func policyColumn(list string) string {
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			out = append(out, f[0]+" "+strings.Join(f[min(len(f), 6):], " "))
		}
	}
	return strings.Join(out, "\n")
}

// killBinary is the daemon built with the xdpfwdtest tag: it SIGKILLs
// itself after the handover step XDPFWD_KILL_AFTER names (killpoint_hook.go).
func killBinary(t *testing.T) string {
	t.Helper()
	killBin.once.Do(func() {
		killBin.path = filepath.Join(filepath.Dir(binary(t)), "xdpfwd-killpoints")
		out, err := exec.Command("go", "build", "-tags", "xdpfwdtest", "-o", killBin.path, ".").CombinedOutput()
		if err != nil {
			killBin.err = fmt.Errorf("go build -tags xdpfwdtest: %v\n%s", err, out)
		}
	})
	if killBin.err != nil {
		t.Fatal(killBin.err)
	}
	return killBin.path
}

var killBin struct {
	once sync.Once
	path string
	err  error
}

// preHandoverCommit is the last commit of xdpfwd before the handover: its
// daemon knows no handover op.
const preHandoverCommit = "5bafb0b"

// oldBinary builds the daemon of preHandoverCommit from this repository's
// history.
func oldBinary(t *testing.T) string { return binaryAt(t, preHandoverCommit) }

// binaryAt builds the daemon of commit from this repository's history.
func binaryAt(t *testing.T, commit string) string {
	t.Helper()
	dir := t.TempDir()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git: %v (the old binary is built from the repository's history)", err)
	}
	archive := exec.Command("git", "-C", strings.TrimSpace(string(top)), "archive", commit)
	untar := exec.Command("tar", "-x", "-C", dir)
	untar.Stdin, _ = archive.StdoutPipe()
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	if err := untar.Wait(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "xdpfwd-"+commit)
	build := exec.Command("go", "build", "-o", path, "./cmd/xdpfwd")
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", commit, err, out)
	}
	return path
}

// TestDaemonHandoverPause: the pause a successor logs (and serves as
// xdpfwd_handover_pause_seconds, the same value) runs from the predecessor's freeze, not
// from when the frozen state reached it: a predecessor that stalls 300 ms
// once frozen, before it sends its state (as a starved CPU, or a large
// switch's state, would make it), is a pause of 300 ms or more.
func TestDaemonHandoverPause(t *testing.T) {
	p := newTestPair(t)
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	args := []string{"run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl}
	const stall = 300 * time.Millisecond
	d := startPath(t, killBinary(t), []string{"XDPFWD_STALL_AFTER=predecessor-frozen:" + stall.String()}, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	next := startBin(t, append(args, "--takeover", ctl)...)
	pause, _ := tookOver(t, d, next)
	if pause < stall {
		t.Errorf("the successor reports a pause of %v; the predecessor was frozen %v before it sent its state", pause, stall)
	}
	if res, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || res.Received != 1 {
		t.Errorf("ping through the successor: %+v %v", res, err)
	}
	next.interrupt()
}

// TestDaemonHandoverRollback: a cross-connect carries a stream at 20,000
// datagrams/s while successors fail to take over, each in its own way: one
// SIGKILLed after each step of the handover before it says the rings are
// its own (the offer, its forwarder built, the frozen state received, the
// state taken, go received), one whose settings change the layout
// (refused, exit 2, naming what differs), one of another mode (refused);
// after each the predecessor thaws or goes on and says why, and its
// control socket still answers. Last, a successor takes over as it
// should. Across all of it the stream loses, reorders and duplicates
// nothing. Then a predecessor SIGKILLed once frozen: the successor exits 1
// saying so, and nothing of the datapath is left attached. And one of the
// commit before the handover answers the request as an unknown op: the
// successor exits 2 telling to restart instead, and the old daemon goes
// on.
func TestDaemonHandoverRollback(t *testing.T) {
	p := newTestPair(t)
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	args := []string{"run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl}
	kb := killBinary(t)
	d := startPath(t, kb, nil, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if res, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || res.Received != 1 {
		t.Fatalf("ping before: %+v %v", res, err)
	}
	s, err := topo.StartSeqStream(p.A, p.B, p.V4A, p.V4B, 20_000, 64, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(0)
	for _, c := range []struct {
		name     string
		env      []string
		extra    []string
		code     int    // the successor's exit code; -1: killed
		says     string // in the predecessor's log
		explains string // in the successor's
	}{
		{"killed after the offer", []string{"XDPFWD_KILL_AFTER=offer"}, nil, -1, "the successor did not take over; going on", ""},
		{"killed once built", []string{"XDPFWD_KILL_AFTER=adopted"}, nil, -1, "the successor did not take over; going on", ""},
		{"killed with the frozen state", []string{"XDPFWD_KILL_AFTER=frozen"}, nil, -1, "thawed, going on", ""},
		{"killed once it took it", []string{"XDPFWD_KILL_AFTER=inherited"}, nil, -1, "thawed, going on", ""},
		{"killed once told to go", []string{"XDPFWD_KILL_AFTER=go"}, nil, -1, "died before it took the rings; thawed, going on", ""},
		{"another ring size", nil, []string{"--ring-size", "1024"}, exitUsage, "the successor did not take over; going on", "ring_size"},
		{"another mode", nil, []string{"--mode", "reflect"}, exitUsage, "the successor did not take over; going on", "mode"},
	} {
		mark := len(d.stderr.String())
		next := startPath(t, kb, c.env, append(append(slices.Clone(args), c.extra...), "--takeover", ctl)...)
		code := next.wait(30 * time.Second)
		if c.code >= 0 && code != c.code || c.code < 0 && code >= 0 {
			t.Errorf("%s: the successor exited %d, want %d\n%s", c.name, code, c.code, next.stderr.String())
		}
		if c.explains != "" && !strings.Contains(next.stderr.String(), c.explains) {
			t.Errorf("%s: the successor's log does not say %q:\n%s", c.name, c.explains, next.stderr.String())
		}
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(d.stderr.String()[mark:], c.says); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the predecessor's log does not say %q:\n%s", c.name, c.says, d.stderr.String()[mark:])
			}
		}
		if d.exited() {
			t.Fatalf("%s: the predecessor exited:\n%s", c.name, d.stderr.String())
		}
		if r := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl); r.code != 0 || !strings.Contains(r.stdout, p.LinkA) {
			t.Fatalf("%s: link list: exit %d, %s%s", c.name, r.code, r.stdout, r.stderr)
		}
	}
	next := startBin(t, append(args, "--takeover", ctl)...)
	tookOver(t, d, next)
	d = next
	// Let what the stream sent last arrive before it is counted.
	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("across 7 failed handovers and one that took: %d sent, %d received, %d lost, %d reordered, %d duplicated",
		res.Sent, res.Received, res.Lost, res.Reordered, res.Duplicates)
	if res.Received == 0 || res.Lost != 0 || res.Reordered != 0 || res.Duplicates != 0 {
		t.Errorf("the stream lost %d, reordered %d, duplicated %d of %d; want none", res.Lost, res.Reordered, res.Duplicates, res.Sent)
	}
	d.interrupt()

	// A predecessor killed once frozen: its datapath goes with it.
	d = startPath(t, kb, []string{"XDPFWD_KILL_AFTER=predecessor-frozen"}, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	next = startBin(t, append(args, "--takeover", ctl)...)
	if code := next.wait(30 * time.Second); code != exitFailure || !strings.Contains(next.stderr.String(), "went away before it froze") {
		t.Errorf("the successor of a predecessor killed once frozen: exit %d, want %d saying the running daemon went away:\n%s", code, exitFailure, next.stderr.String())
	}
	if code := d.wait(10 * time.Second); code >= 0 {
		t.Errorf("the predecessor exited %d, want killed", code)
	}
	waitDetached(t, 5*time.Second, p.LinkA, p.LinkB)

	// A predecessor from before the handover.
	old := startPath(t, oldBinary(t), nil, args...)
	waitLog(t, old, readyMsg, 30*time.Second)
	waitSocket(t, old, ctl)
	next = startBin(t, append(args, "--takeover", ctl)...)
	if code := next.wait(30 * time.Second); code != exitUsage || !strings.Contains(next.stderr.String(), "restart it instead") {
		t.Errorf("a successor of an old daemon: exit %d, want %d and a word to restart instead:\n%s", code, exitUsage, next.stderr.String())
	}
	if old.exited() {
		t.Errorf("the old daemon exited:\n%s", old.stderr.String())
	}
	if res, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || res.Received != 1 {
		t.Errorf("ping through the old daemon after the refusal: %+v %v", res, err)
	}
	old.interrupt()
}
