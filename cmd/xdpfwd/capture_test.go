package main

import (
	"bytes"
	be "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// capPacket is one packet of a pcapng file as tshark and tcpdump read it.
type capPacket struct {
	iface   string // interface name (the link)
	dir     int    // epb_flags direction: 1 inbound, 2 outbound
	comment string
	len     int // the packet's original length
	data    []byte
}

// requireTool fails (never skips) when a tool the capture tests read
// their files with is missing: .ci/install installs them.
func requireTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not installed (apt-get install %s): the capture tests read their files with it", name, name)
	}
}

// readCapture reads a pcapng file with tshark (interface, direction,
// comment) and tcpdump (the bytes), packet by packet.
func readCapture(t *testing.T, file string) []capPacket {
	t.Helper()
	requireTool(t, "tshark")
	requireTool(t, "tcpdump")
	out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-E", "separator=|",
		"-e", "frame.interface_name", "-e", "frame.packet_flags_direction", "-e", "frame.len", "-e", "frame.comment").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", file, errText(err))
	}
	var pkts []capPacket
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l == "" {
			continue
		}
		f := strings.SplitN(l, "|", 4)
		if len(f) != 4 {
			t.Fatalf("tshark line %q: want 4 fields", l)
		}
		dir, _ := strconv.ParseInt(f[1], 0, 32)
		n, _ := strconv.Atoi(f[2])
		pkts = append(pkts, capPacket{iface: f[0], dir: int(dir), len: n, comment: f[3]})
	}
	raw, err := exec.Command("tcpdump", "-r", file, "-nn", "-xx").Output()
	if err != nil {
		t.Fatalf("tcpdump -r %s: %v", file, errText(err))
	}
	k := -1
	hexLine := regexp.MustCompile(`^\s+0x[0-9a-f]+:\s+(.*)$`)
	for _, l := range strings.Split(string(raw), "\n") {
		if m := hexLine.FindStringSubmatch(l); m != nil {
			if k < 0 || k >= len(pkts) {
				t.Fatalf("tcpdump shows bytes for packet %d of %d", k, len(pkts))
			}
			b, err := hex.DecodeString(strings.ReplaceAll(m[1], " ", ""))
			if err != nil {
				t.Fatalf("tcpdump hex %q: %v", m[1], err)
			}
			pkts[k].data = append(pkts[k].data, b...)
		} else if l != "" {
			k++
		}
	}
	if k+1 != len(pkts) {
		t.Fatalf("tcpdump read %d packets, tshark %d", k+1, len(pkts))
	}
	return pkts
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return fmt.Sprintf("%v: %s", err, ee.Stderr)
	}
	return err.Error()
}

// startDaemon starts xdpfwd run on p's links with a control socket in a
// directory of the test's, and returns it and the socket.
func startDaemon(t *testing.T, p *topo.Pair, extra ...string) (*proc, string) {
	t.Helper()
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	args := append([]string{"run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl}, extra...)
	pr := startBin(t, args...)
	waitAttached(t, pr, p, 10*time.Second)
	waitSocket(t, pr, ctl)
	return pr, ctl
}

// waitSocket waits for the daemon's control socket (made once the
// forwarder is ready) and checks it is a socket of mode 0600.
func waitSocket(t *testing.T, pr *proc, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(path)
		if err == nil {
			if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
				t.Fatalf("control socket %s: mode %v; want a socket of mode 0600", path, fi.Mode())
			}
			return
		}
		if pr.exited() || time.Now().After(deadline) {
			t.Fatalf("control socket %s: %v\nstderr:\n%s", path, err, pr.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startCapture starts xdpfwd capture and waits until it listens.
func startCapture(t *testing.T, args ...string) *proc {
	t.Helper()
	pr := startBin(t, append([]string{"capture"}, args...)...)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(pr.stderr.String(), "listening on") {
		if pr.exited() || time.Now().After(deadline) {
			t.Fatalf("xdpfwd capture %q not listening (exited %v)\nstderr:\n%s", args, pr.exited(), pr.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return pr
}

var capturedRE = regexp.MustCompile(`(\d+) packets captured\n(\d+) packets lost`)

// endCapture stops a capture with SIGINT (unless it ended by itself) and
// returns what it says it captured and lost.
func endCapture(t *testing.T, pr *proc) (captured, lost uint64) {
	t.Helper()
	if !pr.exited() {
		pr.signal(os.Interrupt)
	}
	if code := pr.wait(20 * time.Second); code != 0 {
		t.Fatalf("xdpfwd capture exited %d\nstderr:\n%s", code, pr.stderr.String())
	}
	checkNoPanic(t, "capture stderr", pr.stderr.String())
	m := capturedRE.FindStringSubmatch(pr.stderr.String())
	if m == nil {
		t.Fatalf("xdpfwd capture did not report captured and lost packets:\n%s", pr.stderr.String())
	}
	captured, _ = strconv.ParseUint(m[1], 10, 64)
	lost, _ = strconv.ParseUint(m[2], 10, 64)
	return captured, lost
}

// flowFrames builds count UDP frames per flow from src to dst, sport
// flows[i], sizes cycling through sizes, each with its flow and sequence
// number in the payload.
func flowFrames(dst, src net.HardwareAddr, from, to netip.Addr, dport uint16, sports []uint16, count int, sizes []int) [][]byte {
	return flowFramesFrom(dst, src, from, to, dport, sports, 0, count, sizes)
}

// flowFramesFrom is flowFrames from sequence number start on.
func flowFramesFrom(dst, src net.HardwareAddr, from, to netip.Addr, dport uint16, sports []uint16, start, count int, sizes []int) [][]byte {
	var frames [][]byte
	for k := start; k < start+count; k++ {
		for i, sp := range sports {
			f := topo.UDPFrame(dst, src, from, to, sp, dport, sizes[(k+i)%len(sizes)])
			be.BigEndian.PutUint32(f[42:], uint32(k))
			for j := 46; j < len(f); j++ {
				f[j] = byte(j + k + i)
			}
			frames = append(frames, f)
		}
	}
	return frames
}

func macs(t *testing.T, p *topo.Pair) (a, b net.HardwareAddr) {
	t.Helper()
	a, err := p.A.HardwareAddr(p.PeerA)
	if err != nil {
		t.Fatal(err)
	}
	if b, err = p.B.HardwareAddr(p.PeerB); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// udpFlowKey is a UDP frame's (sport, dport) and sequence number, ok
// false for another frame.
func udpFlowKey(f []byte) (sport, dport uint16, seq uint32, ok bool) {
	if len(f) < 46 || be.BigEndian.Uint16(f[12:]) != 0x0800 || f[23] != 17 {
		return 0, 0, 0, false
	}
	return be.BigEndian.Uint16(f[34:]), be.BigEndian.Uint16(f[36:]), be.BigEndian.Uint32(f[42:]), true
}

// checkSeen checks that every frame sent appears, byte for byte, as rx on
// the link it entered and tx on the link it left, each flow in order.
func checkSeen(t *testing.T, pkts []capPacket, sent [][]byte, in, out string) {
	t.Helper()
	type key struct {
		iface string
		dir   int
	}
	want := map[string]bool{}
	for _, f := range sent {
		want[string(f)] = true
	}
	seen := map[key]map[string]int{}
	last := map[string]uint32{} // per (link, direction, flow)
	for _, p := range pkts {
		if !want[string(p.data)] {
			continue
		}
		k := key{p.iface, p.dir}
		if seen[k] == nil {
			seen[k] = map[string]int{}
		}
		seen[k][string(p.data)]++
		sp, dp, seq, _ := udpFlowKey(p.data)
		fk := fmt.Sprintf("%s/%d/%d>%d", p.iface, p.dir, sp, dp)
		if prev, ok := last[fk]; ok && seq <= prev {
			t.Errorf("%s: sequence %d after %d: out of order", fk, seq, prev)
		}
		last[fk] = seq
		wantComment := "rx queue="
		if p.dir == 2 {
			wantComment = "tx queue="
		}
		if !strings.HasPrefix(p.comment, wantComment) {
			t.Errorf("%s direction %d: comment %q, want %q…", p.iface, p.dir, p.comment, wantComment)
		}
	}
	for _, k := range []key{{in, 1}, {out, 2}} {
		missing := 0
		for _, f := range sent {
			if seen[k][string(f)] != 1 {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("%s %s: %d of %d frames sent not seen exactly once, byte for byte", k.iface, map[int]string{1: "inbound", 2: "outbound"}[k.dir], missing, len(sent))
		}
	}
}

// TestCaptureFrames: a known sequence of frames crosses both ways (two
// queues, so two workers) while xdpfwd capture -w FILE runs; tshark and
// tcpdump read FILE and find every frame, byte for byte, received on the
// link it entered and sent on the other, each flow in order. --count ends
// the capture.
func TestCaptureFrames(t *testing.T) {
	p := newPair(t, topo.Options{Queues: 2})
	d, ctl := startDaemon(t, p)
	macA, macB := macs(t, p)
	sizes := []int{60, 128, 300, 1000, 1514}
	ab := flowFrames(macB, macA, p.V4A, p.V4B, 7001, []uint16{1001, 1002, 1003}, 20, sizes)
	ba := flowFrames(macA, macB, p.V4B, p.V4A, 7002, []uint16{2001, 2002}, 15, sizes)
	file := filepath.Join(t.TempDir(), "frames.pcapng")
	total := 2 * (len(ab) + len(ba))
	c := startCapture(t, "--control", ctl, "-w", file, "--count", strconv.Itoa(total), "udp portrange 7001-7002")
	if err := topo.SendRaw(p.A, ab, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := topo.SendRaw(p.B, ba, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	captured, lost := endCaptureAt(t, c, 15*time.Second)
	t.Logf("captured %d, lost %d", captured, lost)
	if captured != uint64(total) || lost != 0 {
		t.Errorf("captured %d, lost %d; want %d, 0", captured, lost, total)
	}
	pkts := readCapture(t, file)
	if len(pkts) != total {
		t.Errorf("the file holds %d packets, want %d", len(pkts), total)
	}
	checkSeen(t, pkts, ab, p.LinkA, p.LinkB)
	checkSeen(t, pkts, ba, p.LinkB, p.LinkA)
	d.interrupt()
	if _, err := os.Stat(ctl); !os.IsNotExist(err) {
		t.Errorf("control socket %s still there after the daemon exited: %v", ctl, err)
	}
}

// endCaptureAt waits up to within for a capture to end by itself (its
// --count), then ends it.
func endCaptureAt(t *testing.T, pr *proc, within time.Duration) (uint64, uint64) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !pr.exited() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !pr.exited() {
		t.Errorf("capture still running after %v (its --count not reached)", within)
	}
	return endCapture(t, pr)
}

// tcpFrame is an IPv4/TCP frame (a bare header, no payload) from sport to
// dport: what a UDP filter must not take for its port.
func tcpFrame(dst, src net.HardwareAddr, from, to netip.Addr, sport, dport uint16) []byte {
	f := topo.UDPFrame(dst, src, from, to, sport, dport, 14+20+20)
	ip := f[14:34]
	ip[9] = 6
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(be.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	be.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	tcp := f[34:]
	clear(tcp[4:])
	tcp[12] = 5 << 4
	tcp[13] = 0x02 // SYN
	return f
}

// TestCaptureFilter: among mixed traffic (UDP to and from port 9, UDP to
// port 90 and 19, TCP port 9, pings), the filter "udp port 9" keeps
// exactly the UDP frames of port 9, both ways, each once on the link it
// entered and once on the other.
func TestCaptureFilter(t *testing.T) {
	p := newPair(t, topo.Options{})
	d, ctl := startDaemon(t, p)
	macA, macB := macs(t, p)
	var other [][]byte
	keep := flowFrames(macB, macA, p.V4A, p.V4B, 4000, []uint16{9}, 10, []int{200, 300, 1514})
	for k := range 10 {
		keep = append(keep, flowFrames(macB, macA, p.V4A, p.V4B, 9, []uint16{uint16(3000 + k)}, 1, []int{100 + k})...)
		other = append(other, flowFrames(macB, macA, p.V4A, p.V4B, 90, []uint16{uint16(3000 + k)}, 1, []int{100 + k})...)
		other = append(other, flowFrames(macB, macA, p.V4A, p.V4B, 19, []uint16{99}, 1, []int{100 + k})...)
		other = append(other, tcpFrame(macB, macA, p.V4A, p.V4B, uint16(5000+k), 9))
	}
	var mixed [][]byte
	for i := range keep {
		mixed = append(mixed, other[i%len(other)], keep[i])
	}
	mixed = append(mixed, other...)
	file := filepath.Join(t.TempDir(), "filter.pcapng")
	c := startCapture(t, "--control", ctl, "-w", file, "udp", "port", "9")
	if err := topo.SendRaw(p.A, mixed, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if res, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second); err != nil || res.Received == 0 {
		t.Fatalf("ping across while capturing: %+v, %v", res, err)
	}
	// Every frame sent crossed before the pings' replies came back: the
	// capture holds them all once it stops.
	captured, lost := endCapture(t, c)
	pkts := readCapture(t, file)
	t.Logf("captured %d, lost %d, file %d packets", captured, lost, len(pkts))
	if captured != uint64(2*len(keep)) || lost != 0 || len(pkts) != 2*len(keep) {
		t.Errorf("captured %d (file %d), lost %d; want %d (the port 9 UDP frames, rx and tx), 0", captured, len(pkts), lost, 2*len(keep))
	}
	for _, p := range pkts {
		sp, dp, _, ok := udpFlowKey(p.data)
		if !ok || sp != 9 && dp != 9 {
			t.Errorf("the filter kept %d bytes on %s that are not UDP port 9: % x", len(p.data), p.iface, p.data[:min(len(p.data), 40)])
		}
	}
	checkSeen(t, pkts, keep, p.LinkA, p.LinkB)
	d.interrupt()
}

// TestCaptureDrops: what xdpfwd drops on purpose appears with its reason
// (the counter's name) in the packet's comment, on the link that counted
// it: every frame in sink mode (handler_drops), a frame of more
// buffers than a TX ring takes (rx_too_many_frags, its original length
// kept), and a frame shorter than its IP length says (rx_truncated).
func TestCaptureDrops(t *testing.T) {
	t.Run("sink", func(t *testing.T) {
		p := newPair(t, topo.Options{})
		ctl := filepath.Join(t.TempDir(), "ctl.sock")
		d := startBin(t, "run", "--mode", "sink", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl)
		waitAttached(t, d, p, 10*time.Second)
		waitSocket(t, d, ctl)
		macA, macB := macs(t, p)
		frames := flowFrames(macB, macA, p.V4A, p.V4B, 7300, []uint16{1, 2}, 10, []int{60, 700, 1514})
		file := filepath.Join(t.TempDir(), "sink.pcapng")
		c := startCapture(t, "--control", ctl, "-w", file, "--direction", "drop", "--count", strconv.Itoa(len(frames)), "udp port 7300")
		if err := topo.SendRaw(p.A, frames, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		captured, lost := endCaptureAt(t, c, 15*time.Second)
		pkts := readCapture(t, file)
		if captured != uint64(len(frames)) || lost != 0 || len(pkts) != len(frames) {
			t.Errorf("captured %d (file %d), lost %d; want %d, 0", captured, len(pkts), lost, len(frames))
		}
		for i, pk := range pkts {
			if i < len(frames) && !bytes.Equal(pk.data, frames[i]) {
				t.Errorf("drop %d: not the frame sent", i)
			}
			if pk.iface != p.LinkA || pk.dir != 1 || !strings.HasPrefix(pk.comment, "drop queue=0 reason=handler_drops") {
				t.Errorf("drop %d: %s direction %d comment %q; want %s inbound, drop … reason=handler_drops", i, pk.iface, pk.dir, pk.comment, p.LinkA)
			}
		}
		d.interrupt()
	})
	t.Run("too-many-frags", func(t *testing.T) {
		p := newPair(t, topo.Options{MTU: 9000, TxChecksum: true})
		d, ctl := startDaemon(t, p, "--multi-buffer", "on", "--frame-size", "2048")
		const mtu = 40000
		if err := p.SetMTU(mtu); err != nil {
			t.Fatalf("raise the MTU to %d: %v", mtu, err)
		}
		macA, macB := macs(t, p)
		big := make([]byte, mtu+14)
		copy(big, macB)
		copy(big[6:], macA)
		big[12], big[13] = 0x88, 0xb5 // local experimental
		for i := 14; i < len(big); i++ {
			big[i] = byte(i)
		}
		file := filepath.Join(t.TempDir(), "frags.pcapng")
		c := startCapture(t, "--control", ctl, "-w", file, "--direction", "drop", "--count", "1", "--snaplen", "5000")
		if err := topo.SendRaw(p.A, [][]byte{big}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		captured, lost := endCaptureAt(t, c, 15*time.Second)
		pkts := readCapture(t, file)
		if captured != 1 || lost != 0 || len(pkts) != 1 {
			t.Fatalf("captured %d (file %d), lost %d; want 1, 0", captured, len(pkts), lost)
		}
		pk := pkts[0]
		t.Logf("%s direction %d, %d of %d bytes, %q", pk.iface, pk.dir, len(pk.data), pk.len, pk.comment)
		if pk.iface != p.LinkA || pk.dir != 1 || !strings.Contains(pk.comment, "reason=rx_too_many_frags") {
			t.Errorf("%s direction %d comment %q; want %s inbound, reason=rx_too_many_frags", pk.iface, pk.dir, pk.comment, p.LinkA)
		}
		if pk.len != len(big) || len(pk.data) != 5000 || !bytes.Equal(pk.data, big[:5000]) {
			t.Errorf("kept %d bytes of %d, want the first 5000 of the %d sent", len(pk.data), pk.len, len(big))
		}
		if err := p.SetMTU(9000); err != nil {
			t.Fatal(err)
		}
		d.interrupt()
	})
	t.Run("truncated", func(t *testing.T) {
		p := newPair(t, topo.Options{})
		d, ctl := startDaemon(t, p)
		macA, macB := macs(t, p)
		// 1024 bytes of a 1514-byte frame, as igb cuts it with 2048-byte
		// zero-copy frames.
		cut := topo.UDPFrame(macB, macA, p.V4A, p.V4B, 7301, 7302, 1514)[:1024]
		file := filepath.Join(t.TempDir(), "cut.pcapng")
		c := startCapture(t, "--control", ctl, "-w", file, "--direction", "drop", "--count", "1")
		if err := topo.SendRaw(p.A, [][]byte{cut}, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		captured, lost := endCaptureAt(t, c, 15*time.Second)
		pkts := readCapture(t, file)
		if captured != 1 || lost != 0 || len(pkts) != 1 {
			t.Fatalf("captured %d (file %d), lost %d; want 1, 0", captured, len(pkts), lost)
		}
		pk := pkts[0]
		if pk.iface != p.LinkA || pk.dir != 1 || !strings.Contains(pk.comment, "reason=rx_truncated") || !bytes.Equal(pk.data, cut) {
			t.Errorf("%s direction %d comment %q, %d bytes; want %s inbound, reason=rx_truncated, the %d bytes sent", pk.iface, pk.dir, pk.comment, len(pk.data), p.LinkA, len(cut))
		}
		d.interrupt()
	})
}

// flood sends UDP frames from A to B on dport, flows sports, in bursts of
// burst frames every gap, until stop is closed or max frames are sent;
// done receives how many it sent.
func flood(t *testing.T, p *topo.Pair, dport uint16, sports []uint16, burst int, gap time.Duration, max int, stop <-chan struct{}) <-chan int {
	macA, macB := macs(t, p)
	done := make(chan int, 1)
	go func() {
		sent := 0
		defer func() { done <- sent }()
		for seq := 0; sent < max; seq += burst {
			select {
			case <-stop:
				return
			default:
			}
			fs := flowFramesFrom(macB, macA, p.V4A, p.V4B, dport, sports, seq, burst, []int{100, 1000})
			if err := topo.SendRaw(p.A, fs, 5*time.Second); err != nil {
				t.Errorf("flood: %v", err)
				return
			}
			sent += len(fs)
			if gap > 0 {
				time.Sleep(gap)
			}
		}
	}()
	return done
}

// checkContiguous checks that in pkts, every flow on each (link,
// direction) has consecutive sequence numbers (a capture that lost
// nothing), only on the (link, direction) pairs allowed, and returns the
// packets per pair.
func checkContiguous(t *testing.T, what string, pkts []capPacket, allowed ...string) map[string]int {
	t.Helper()
	per := map[string]int{}
	last := map[string]uint32{}
	for _, p := range pkts {
		sp, dp, seq, ok := udpFlowKey(p.data)
		if !ok {
			t.Errorf("%s: a packet that is not ours: % x", what, p.data[:min(40, len(p.data))])
			continue
		}
		ld := fmt.Sprintf("%s/%d", p.iface, p.dir)
		if !slicesContains(allowed, ld) {
			t.Errorf("%s: a packet on %s (link/direction), want only %v", what, ld, allowed)
		}
		per[ld]++
		fk := fmt.Sprintf("%s/%d>%d", ld, sp, dp)
		if prev, ok := last[fk]; ok && seq != prev+1 {
			t.Errorf("%s: %s: sequence %d after %d", what, fk, seq, prev)
		}
		last[fk] = seq
	}
	return per
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// captureSummary is the part of run's --summary the capture tests read.
type captureSummary struct {
	Links map[string]struct {
		RXPackets uint64            `json:"rx_packets"`
		TXPackets uint64            `json:"tx_packets"`
		Drops     map[string]uint64 `json:"drops"`
	} `json:"links"`
}

func readSummary(t *testing.T, path string) captureSummary {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	var s captureSummary
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("summary: %v", err)
	}
	return s
}

// TestCaptureConcurrent: two captures at once, one of everything and one
// of what leaves link B, and three more started and stopped while traffic
// flows: each file holds what its capture selected, every flow without a
// gap (nothing lost), and the forwarder delivers everything throughout.
func TestCaptureConcurrent(t *testing.T) {
	p := newPair(t, topo.Options{Queues: 2})
	sum := filepath.Join(t.TempDir(), "summary.json")
	d, ctl := startDaemon(t, p, "--summary", sum)
	stop := make(chan struct{})
	done := flood(t, p, 7400, []uint16{1, 2, 3, 4}, 8, 2*time.Millisecond, 1<<30, stop)
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
	}()
	dir := t.TempDir()
	time.Sleep(100 * time.Millisecond)
	all := startCapture(t, "--control", ctl, "-w", filepath.Join(dir, "all.pcapng"), "udp port 7400")
	outB := startCapture(t, "--control", ctl, "-w", filepath.Join(dir, "outB.pcapng"), "--link", p.LinkB, "--direction", "tx", "udp port 7400")
	time.Sleep(300 * time.Millisecond)
	check := func(name string, pr *proc, allowed ...string) map[string]int {
		t.Helper()
		captured, lost := endCapture(t, pr)
		pkts := readCapture(t, filepath.Join(dir, name))
		per := checkContiguous(t, name, pkts, allowed...)
		t.Logf("%s: captured %d, lost %d, per link/direction %v", name, captured, lost, per)
		if captured != uint64(len(pkts)) || lost != 0 || len(pkts) == 0 {
			t.Errorf("%s: captured %d (file %d), lost %d; want some, all in the file, none lost", name, captured, len(pkts), lost)
		}
		return per
	}
	per := check("all.pcapng", all, p.LinkA+"/1", p.LinkB+"/2")
	// As many received as sent, but for the packets in the handoff rings
	// between the two workers as each took the capture up and let it go,
	// at its own batch boundary (fwd.Forwarder.Capture): a batch's worth
	// at each end at most.
	if rx, tx := per[p.LinkA+"/1"], per[p.LinkB+"/2"]; rx-tx > 64 || tx-rx > 64 {
		t.Errorf("all.pcapng: %d received on %s, %d sent on %s: want as many, give or take the packets handed between workers as the capture started and ended", rx, p.LinkA, tx, p.LinkB)
	}
	for i := range 3 {
		name := fmt.Sprintf("short%d.pcapng", i)
		c := startCapture(t, "--control", ctl, "-w", filepath.Join(dir, name), "--link", p.LinkA, "--direction", "rx", "udp port 7400")
		time.Sleep(100 * time.Millisecond)
		check(name, c, p.LinkA+"/1")
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	sent := <-done
	if res, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second); err != nil || res.Received == 0 {
		t.Errorf("ping across after the captures: %+v, %v", res, err)
	}
	check("outB.pcapng", outB, p.LinkB+"/2")
	d.interrupt()
	s := readSummary(t, sum)
	a, b := s.Links[p.LinkA], s.Links[p.LinkB]
	t.Logf("flood: %d frames sent; %s rx %d drops %v; %s tx %d", sent, p.LinkA, a.RXPackets, a.Drops, p.LinkB, b.TXPackets)
	if a.RXPackets < uint64(sent) || b.TXPackets != a.RXPackets {
		t.Errorf("%s received %d, %s sent %d, of %d flooded: want everything received and forwarded", p.LinkA, a.RXPackets, p.LinkB, b.TXPackets, sent)
	}
}

// TestCaptureLoss: a capture with a tiny buffer under a flood loses
// records, and counts them: captured plus lost is exactly what xdpfwd
// received of the flood, while the forwarder forwards every frame.
func TestCaptureLoss(t *testing.T) {
	p := newPair(t, topo.Options{})
	sum := filepath.Join(t.TempDir(), "summary.json")
	d, ctl := startDaemon(t, p, "--summary", sum)
	file := filepath.Join(t.TempDir(), "loss.pcapng")
	c := startCapture(t, "--control", ctl, "-w", file, "--buffer", "4096", "--snaplen", "1514", "--direction", "rx", "--link", p.LinkA, "udp port 7500")
	const n = 20000
	sent := <-flood(t, p, 7500, []uint16{1, 2}, 250, 0, n, nil)
	if res, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second); err != nil || res.Received == 0 {
		t.Errorf("ping across after the flood: %+v, %v", res, err)
	}
	captured, lost := endCapture(t, c)
	pkts := readCapture(t, file)
	d.interrupt()
	s := readSummary(t, sum)
	a, b := s.Links[p.LinkA], s.Links[p.LinkB]
	kernel := a.Drops["rx_dropped"] + a.Drops["rx_ring_full"]
	t.Logf("flood of %d: captured %d (file %d), lost %d; %s rx %d, kernel drops %d; %s tx %d", sent, captured, len(pkts), lost, p.LinkA, a.RXPackets, kernel, p.LinkB, b.TXPackets)
	if lost == 0 {
		t.Errorf("a 4 KiB buffer lost nothing of a %d-frame flood: the test does not test loss", sent)
	}
	if captured != uint64(len(pkts)) {
		t.Errorf("captured %d, the file holds %d", captured, len(pkts))
	}
	if captured+lost != uint64(sent)-kernel {
		t.Errorf("captured %d + lost %d = %d, want the %d frames xdpfwd received (%d sent, %d dropped by the kernel)", captured, lost, captured+lost, uint64(sent)-kernel, sent, kernel)
	}
	if b.TXPackets != a.RXPackets || a.RXPackets < uint64(sent)-kernel {
		t.Errorf("%s received %d, %s sent %d: the capture slowed or stopped forwarding", p.LinkA, a.RXPackets, p.LinkB, b.TXPackets)
	}
}

// TestCaptureBadInput: bad flags, a bad filter, an unknown link and an
// unreachable daemon each give a clear message; bad input exits 2.
func TestCaptureBadInput(t *testing.T) {
	requireTool(t, "tcpdump")
	missing := filepath.Join(t.TempDir(), "none.sock")
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"capture"}, 2, "-w FILE"},
		{[]string{"capture", "-w", "-", "--direction", "up"}, 2, "--direction"},
		{[]string{"capture", "-w", "-", "--snaplen", "0"}, 2, "--snaplen"},
		{[]string{"capture", "-w", "-", "--buffer", "10"}, 2, "--buffer"},
		{[]string{"capture", "-w", "-", "--bogus"}, 2, "bogus"},
		{[]string{"capture", "-w", "-", "--control", missing, "udp", "port"}, 2, "syntax error"},
		{[]string{"capture", "-w", "-", "--control", missing}, 1, "control socket " + missing},
	}
	for _, tc := range tests {
		r := runBin(t, 20*time.Second, nil, tc.args...)
		t.Logf("%q: exit %d: %s", tc.args, r.code, strings.TrimSpace(r.stderr))
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d naming %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
		checkNoPanic(t, "stderr", r.stderr)
	}
	p := newPair(t, topo.Options{})
	d, ctl := startDaemon(t, p)
	r := runBin(t, 20*time.Second, nil, "capture", "-w", "-", "--control", ctl, "--link", "nosuch0")
	if r.code != 2 || !strings.Contains(r.stderr, `link "nosuch0"`) {
		t.Errorf("unknown link: exit %d, stderr %q; want 2 naming the link", r.code, r.stderr)
	}
	// A second daemon may not take a live control socket.
	q := newPair(t, topo.Options{})
	r = runBin(t, 20*time.Second, nil, "run", "--link", q.LinkA, "--link", q.LinkB, "--control", ctl)
	if r.code != 2 || !strings.Contains(r.stderr, "another process is listening") {
		t.Errorf("run on a live control socket: exit %d, stderr %q; want 2", r.code, r.stderr)
	}
	d.interrupt()
}

// TestCaptureDefaultSocket: without --control, the daemon listens on
// /run/xdpfwd/FIRST-LINK.sock, capture finds it by --link, and the socket
// is gone when the daemon exits; -w - streams pcapng that tcpdump reads
// from a pipe.
func TestCaptureDefaultSocket(t *testing.T) {
	requireTool(t, "tcpdump")
	p := newPair(t, topo.Options{})
	d := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0")
	waitAttached(t, d, p, 10*time.Second)
	sock := "/run/xdpfwd/" + p.LinkA + ".sock"
	waitSocket(t, d, sock)
	cmd := exec.Command("sh", "-c", fmt.Sprintf("%s capture -w - --link %s --count 6 icmp | tcpdump -nn -r -", binary(t), p.LinkB))
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(errb.String(), "listening on") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if res, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second); err != nil || res.Received != 3 {
		t.Errorf("ping: %+v, %v", res, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("capture | tcpdump: %v\n%s", err, errb.String())
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("capture | tcpdump did not end\n%s", errb.String())
	}
	t.Logf("tcpdump -r -:\n%s%s", out.String(), errb.String())
	if n := strings.Count(out.String(), "ICMP echo"); n != 6 {
		t.Errorf("tcpdump read %d ICMP echoes from the pipe, want 6 (3 requests in, 3 replies out of %s)", n, p.LinkB)
	}
	d.interrupt()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("%s still there after the daemon exited: %v", sock, err)
	}
}

// TestCaptureReflect: with a Handler (reflect mode), what comes in and
// what goes back out of the same link are both captured, the reflected
// copy with its MACs swapped, on the same queue.
func TestCaptureReflect(t *testing.T) {
	p := newPair(t, topo.Options{})
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "reflect", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl)
	waitAttached(t, d, p, 10*time.Second)
	waitSocket(t, d, ctl)
	macA, macB := macs(t, p)
	frames := flowFrames(macB, macA, p.V4A, p.V4B, 7600, []uint16{1}, 10, []int{60, 1514})
	file := filepath.Join(t.TempDir(), "reflect.pcapng")
	c := startCapture(t, "--control", ctl, "-w", file, "--link", p.LinkA, "--count", strconv.Itoa(2*len(frames)), "udp port 7600")
	if err := topo.SendRaw(p.A, frames, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	captured, lost := endCaptureAt(t, c, 15*time.Second)
	pkts := readCapture(t, file)
	if captured != uint64(2*len(frames)) || lost != 0 || len(pkts) != 2*len(frames) {
		t.Fatalf("captured %d (file %d), lost %d; want %d, 0", captured, len(pkts), lost, 2*len(frames))
	}
	var rx, tx int
	for _, pk := range pkts {
		switch {
		case pk.iface != p.LinkA:
			t.Errorf("a packet on %s", pk.iface)
		case pk.dir == 1 && rx < len(frames):
			if !bytes.Equal(pk.data, frames[rx]) {
				t.Errorf("rx %d: not the frame sent", rx)
			}
			rx++
		case pk.dir == 2 && tx < len(frames):
			want := bytes.Clone(frames[tx])
			copy(want[0:6], frames[tx][6:12])
			copy(want[6:12], frames[tx][0:6])
			if !bytes.Equal(pk.data, want) {
				t.Errorf("tx %d: not the frame sent with its MACs swapped", tx)
			}
			tx++
		default:
			t.Errorf("direction %d, comment %q", pk.dir, pk.comment)
		}
	}
	if rx != len(frames) || tx != len(frames) {
		t.Errorf("%d in, %d out; want %d each", rx, tx, len(frames))
	}
	d.interrupt()
}

// fakeDaemon answers capture requests on a unix socket of the test's as a
// daemon would, then streams 64-byte records of links[0] without end,
// deaf to the client's stop (a daemon that does not stop: an old one, or
// one whose rings never empty). It returns the socket and the requests.
func fakeDaemon(t *testing.T, links []string) (string, <-chan capture.Request) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	reqs := make(chan capture.Request, 4)
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var req capture.Request
				if err := json.NewDecoder(c).Decode(&req); err != nil {
					return
				}
				reqs <- req
				hello, _ := json.Marshal(capture.Hello{Links: links, Reasons: capture.ReasonNames(), Snaplen: 1500, Workers: 1})
				if _, err := c.Write(append(hello, '\n')); err != nil {
					return
				}
				rec := make([]byte, 24+64)
				be.LittleEndian.PutUint32(rec[0:], uint32(len(rec)))
				be.LittleEndian.PutUint32(rec[4:], 64)
				rec[12] = byte(capture.RX)
				for i := 0; ; i++ {
					select {
					case <-done:
						return
					default:
					}
					if i%16 == 0 {
						time.Sleep(time.Millisecond) // a few thousand a second
					}
					be.LittleEndian.PutUint64(rec[16:], uint64(time.Now().UnixNano()))
					if _, err := c.Write(rec); err != nil {
						return
					}
				}
			}()
		}
	}()
	return path, reqs
}

// TestCaptureSecondSignal: a capture whose daemon does not end the stream
// on the first SIGINT ends at once on the second, with what it wrote.
func TestCaptureSecondSignal(t *testing.T) {
	path, _ := fakeDaemon(t, []string{"a1", "b1"})
	file := filepath.Join(t.TempDir(), "c.pcapng")
	pr := startCapture(t, "--control", path, "-w", file)
	pr.signal(os.Interrupt)
	// The first one asks the daemon to stop, which this one ignores.
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) && !pr.exited() {
		time.Sleep(10 * time.Millisecond)
	}
	if pr.exited() {
		t.Fatalf("ended on the first SIGINT while the daemon streams on\nstderr:\n%s", pr.stderr.String())
	}
	pr.signal(os.Interrupt)
	start := time.Now()
	code := pr.wait(5 * time.Second)
	t.Logf("exited %d %v after the second SIGINT\nstderr:\n%s", code, time.Since(start), pr.stderr.String())
	if code != 1 {
		t.Errorf("exit code %d after a second SIGINT, want 1 (no totals from the daemon)", code)
	}
	checkNoPanic(t, "capture stderr", pr.stderr.String())
	if !strings.Contains(pr.stderr.String(), "interrupted") {
		t.Errorf("stderr does not say the capture was interrupted:\n%s", pr.stderr.String())
	}
	m := regexp.MustCompile(`(\d+) packets captured`).FindStringSubmatch(pr.stderr.String())
	if m == nil {
		t.Fatalf("stderr does not say how many packets were captured:\n%s", pr.stderr.String())
	}
	requireTool(t, "tshark")
	out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-e", "frame.number").Output()
	if err != nil {
		t.Fatalf("tshark -r %s: %v", file, errText(err))
	}
	if n := strings.Count(string(out), "\n"); n == 0 || strconv.Itoa(n) != m[1] {
		t.Errorf("%s holds %d packets, the capture says %s: want what was captured before the second SIGINT", file, n, m[1])
	}
}

// TestCaptureListeningOn: the "listening on" line names the links the
// capture was asked for, not every link of the daemon.
func TestCaptureListeningOn(t *testing.T) {
	tests := []struct {
		links []string // --link
		want  string
	}{
		{nil, "listening on a1, b1 ("},
		{[]string{"a1"}, "listening on a1 ("},
		{[]string{"b1", "a1"}, "listening on b1, a1 ("},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.links, ","), func(t *testing.T) {
			path, reqs := fakeDaemon(t, []string{"a1", "b1"})
			args := []string{"--control", path, "-w", filepath.Join(t.TempDir(), "c.pcapng"), "--count", "1"}
			for _, l := range tc.links {
				args = append(args, "--link", l)
			}
			pr := startCapture(t, args...)
			pr.cmd.Process.Kill() // the fake daemon never sends totals
			pr.wait(5 * time.Second)
			if req := <-reqs; !slices.Equal(req.Links, tc.links) {
				t.Errorf("request for links %q, want %q", req.Links, tc.links)
			}
			if !strings.Contains(pr.stderr.String(), tc.want) {
				t.Errorf("stderr does not say %q:\n%s", tc.want, pr.stderr.String())
			}
		})
	}
}
