package main

import (
	"bufio"
	be "encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestSwapMACFlags: --eth-peer without --mode mac, --mode mac without it,
// and an --eth-peer that is not a 6-byte address or names no link are
// refused with exit 2 and a message saying what is wanted, before any
// link is touched (the links here do not exist).
func TestSwapMACFlags(t *testing.T) {
	t.Parallel()
	links := []string{"--link", "nolinkA0", "--link", "nolinkB0"}
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"eth-peer with 5tswap", []string{"--mode", "5tswap", "--eth-peer", "02:00:00:00:00:01"}, []string{"--eth-peer is for --mode mac"}},
		{"eth-peer with xconnect", []string{"--eth-peer", "02:00:00:00:00:01"}, []string{"--eth-peer is for --mode mac"}},
		{"mac without eth-peer", []string{"--mode", "mac"}, []string{"--mode mac needs --eth-peer MAC"}},
		{"eth-peer not a MAC", []string{"--mode", "mac", "--eth-peer", "02:00:00:zz:00:01"}, []string{`--eth-peer "02:00:00:zz:00:01"`, "not an Ethernet address", "XX:XX:XX:XX:XX:XX"}},
		{"eth-peer EUI-64", []string{"--mode", "mac", "--eth-peer", "02:00:00:00:00:00:00:01"}, []string{"not an Ethernet address"}},
		{"eth-peer empty", []string{"--mode", "mac", "--eth-peer", ""}, []string{"not an Ethernet address"}},
		{"eth-peer unknown link", []string{"--mode", "mac", "--eth-peer", "eth9=02:00:00:00:00:01"}, []string{`"eth9" is not one of the links`}},
		{"eth-peer twice", []string{"--mode", "mac", "--eth-peer", "02:00:00:00:00:01", "--eth-peer", "02:00:00:00:00:02"}, []string{"a second address for every link"}},
		{"eth-peer a link short", []string{"--mode", "mac", "--eth-peer", "nolinkA0=02:00:00:00:00:01"}, []string{"no address for link nolinkB0"}},
		{"unknown mode", []string{"--mode", "6tswap"}, []string{"5tswap", "mac"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := runBin(t, 30*time.Second, nil, append(append([]string{"run"}, links...), c.args...)...)
			if r.code != 2 {
				t.Errorf("run %s: exit %d, want 2\nstderr:\n%s", strings.Join(c.args, " "), r.code, r.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("run %s: stderr lacks %q:\n%s", strings.Join(c.args, " "), w, r.stderr)
				}
			}
			checkNoPanic(t, "stderr", r.stderr)
		})
	}
}

// testFlow is one frame the tshark tests send: IPv4 or IPv6, TCP or UDP,
// maybe VLAN-tagged, on ports of its own.
type testFlow struct {
	v6, tcp      bool
	vlan         uint16
	sport, dport uint16
	// truncated: the IPv4 total length claims 100 bytes more than the
	// frame has: the engine drops it (rx_truncated) before any handler.
	truncated bool
	// malformed: the UDP length claims more than the IP payload: 5tswap
	// swaps its MACs only, and counts it.
	malformed bool
}

var (
	flowSrcMAC = net.HardwareAddr{0x02, 0x5e, 0, 0, 0, 0x01}
	flowDstMAC = net.HardwareAddr{0x02, 0x5e, 0, 0, 0, 0x02}
	// Documentation addresses, none a namespace's own: no stack answers
	// the frames, whichever way they come back.
	flowV4 = [2]netip.Addr{netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2")}
	flowV6 = [2]netip.Addr{netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:0:7::2")}
)

func testFlows() []testFlow {
	return []testFlow{
		{sport: 40001, dport: 7001},
		{tcp: true, sport: 40002, dport: 80},
		{v6: true, sport: 40003, dport: 53},
		{v6: true, tcp: true, sport: 40004, dport: 443},
		{vlan: 100, sport: 40005, dport: 7005},
		{vlan: 200, v6: true, tcp: true, sport: 40006, dport: 7006},
	}
}

func (f testFlow) addrs() (src, dst netip.Addr) {
	if f.v6 {
		return flowV6[0], flowV6[1]
	}
	return flowV4[0], flowV4[1]
}

// inetSum is the folded ones'-complement sum of b on top of s.
func inetSum(b []byte, s uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(be.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// frame builds f's frame with correct IPv4, TCP and UDP checksums and a
// 32-byte payload.
func (f testFlow) frame() []byte {
	b := append(append([]byte{}, flowDstMAC...), flowSrcMAC...)
	if f.vlan != 0 {
		b = be.BigEndian.AppendUint16(b, 0x8100)
		b = be.BigEndian.AppendUint16(b, f.vlan)
	}
	src, dst := f.addrs()
	proto := byte(17)
	seg := make([]byte, 8+32)
	if f.tcp {
		proto = 6
		seg = make([]byte, 20+32)
		be.BigEndian.PutUint32(seg[4:], 1000)
		seg[12] = 5 << 4
		seg[13] = 0x18
		be.BigEndian.PutUint16(seg[14:], 1024)
	} else {
		be.BigEndian.PutUint16(seg[4:], uint16(len(seg)))
		if f.malformed {
			be.BigEndian.PutUint16(seg[4:], uint16(len(seg)+1))
		}
	}
	be.BigEndian.PutUint16(seg[0:], f.sport)
	be.BigEndian.PutUint16(seg[2:], f.dport)
	for i := len(seg) - 32; i < len(seg); i++ {
		seg[i] = byte(i)
	}
	var ps uint32
	for _, a := range [][]byte{src.AsSlice(), dst.AsSlice()} {
		for i := 0; i < len(a); i += 2 {
			ps += uint32(be.BigEndian.Uint16(a[i:]))
		}
	}
	ps += uint32(proto) + uint32(len(seg))
	off := 6
	if f.tcp {
		off = 16
	}
	be.BigEndian.PutUint16(seg[off:], ^inetSum(seg, ps))
	if f.v6 {
		b = be.BigEndian.AppendUint16(b, 0x86dd)
		h := make([]byte, 40)
		h[0] = 0x60
		be.BigEndian.PutUint16(h[4:], uint16(len(seg)))
		h[6], h[7] = proto, 64
		copy(h[8:], src.AsSlice())
		copy(h[24:], dst.AsSlice())
		return append(append(b, h...), seg...)
	}
	b = be.BigEndian.AppendUint16(b, 0x0800)
	h := make([]byte, 20)
	h[0] = 0x45
	total := 20 + len(seg)
	if f.truncated {
		total += 100
	}
	be.BigEndian.PutUint16(h[2:], uint16(total))
	h[8], h[9] = 64, proto
	copy(h[12:], src.AsSlice())
	copy(h[16:], dst.AsSlice())
	be.BigEndian.PutUint16(h[10:], ^inetSum(h, 0))
	return append(append(b, h...), seg...)
}

// tsharkFields are the fields the tests read from a capture.
var tsharkFields = []string{"eth.src", "eth.dst", "vlan.id", "ip.src", "ip.dst", "ipv6.src", "ipv6.dst",
	"udp.srcport", "udp.dstport", "tcp.srcport", "tcp.dstport",
	"ip.checksum.status", "udp.checksum.status", "tcp.checksum.status"}

// want is what tshark must show of f once it came back: with the MACs
// given, and, with swapped, the addresses and ports swapped.
func (f testFlow) want(src, dst net.HardwareAddr, swapped bool) map[string]string {
	a, b := f.addrs()
	sp, dp := f.sport, f.dport
	if swapped {
		a, b, sp, dp = b, a, dp, sp
	}
	w := map[string]string{"eth.src": src.String(), "eth.dst": dst.String(), "vlan.id": "", "ip.src": "", "ip.dst": "", "ipv6.src": "", "ipv6.dst": "",
		"udp.srcport": "", "udp.dstport": "", "tcp.srcport": "", "tcp.dstport": ""}
	if f.vlan != 0 {
		w["vlan.id"] = fmt.Sprint(f.vlan)
	}
	ip, l4 := "ip", "udp"
	if f.v6 {
		ip = "ipv6"
	} else {
		w["ip.checksum.status"] = "Good"
	}
	if f.tcp {
		l4 = "tcp"
	}
	w[ip+".src"], w[ip+".dst"] = a.String(), b.String()
	w[l4+".srcport"], w[l4+".dstport"] = fmt.Sprint(sp), fmt.Sprint(dp)
	if !f.malformed {
		w[l4+".checksum.status"] = "Good"
	}
	return w
}

// tcpdumpIn captures, in ns, the first n TCP, UDP or VLAN-tagged frames
// eth0 receives, to a pcap file; wait returns its path once n came or
// within passed.
func tcpdumpIn(t *testing.T, ns *topo.NS, n int) (wait func(within time.Duration) string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.pcap")
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "tcpdump", "-i", "eth0", "-Q", "in", "-n", "-U",
		"-c", fmt.Sprint(n), "-w", path, "udp or tcp or vlan")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("tcpdump: %v", err)
	}
	// done is closed once tcpdump exited, so that every waiter sees it.
	done := make(chan struct{})
	var waitErr error
	listening := make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if !once && strings.Contains(sc.Text(), "listening on") {
				once = true
				close(listening)
			}
		}
		waitErr = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			cmd.Process.Kill()
			<-done
		}
	})
	select {
	case <-listening:
	case <-done:
		t.Fatalf("tcpdump in %s exited before listening: %v\n%s", ns.Name, waitErr, log.String())
	case <-time.After(10 * time.Second):
		t.Fatalf("tcpdump in %s not listening after 10s", ns.Name)
	}
	return func(within time.Duration) string {
		select {
		case <-done:
		case <-time.After(within):
			// Fewer than n came: stop it, keep what it has.
			cmd.Process.Signal(syscall.SIGINT)
			<-done
		}
		return path
	}
}

// checksumStatus names the values of tshark's *.checksum.status fields,
// which -T fields prints as numbers (epan/proto.h, PROTO_CHECKSUM_E_*).
var checksumStatus = map[string]string{"0": "Bad", "1": "Good", "2": "Unverified", "3": "Not present", "4": "Illegal"}

// tsharkRead reads the capture at path, checksums verified, one map of
// tsharkFields per frame.
func tsharkRead(t *testing.T, path string) []map[string]string {
	t.Helper()
	args := []string{"-r", path, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=f",
		"-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE"}
	for _, f := range tsharkFields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command("tshark", args...).Output()
	if err != nil {
		t.Fatalf("tshark %s: %v", strings.Join(args, " "), err)
	}
	var rows []map[string]string
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		vals := strings.Split(line, "\t")
		row := map[string]string{}
		for i, f := range tsharkFields {
			if i < len(vals) {
				row[f] = vals[i]
			}
			if strings.HasSuffix(f, ".checksum.status") && row[f] != "" {
				row[f] = checksumStatus[row[f]]
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// checkFrames: every flow came back once, each field as want says.
func checkFrames(t *testing.T, rows []map[string]string, flows []testFlow, want func(testFlow) map[string]string) {
	t.Helper()
	for _, r := range rows {
		t.Logf("captured %v", r)
	}
	if len(rows) != len(flows) {
		t.Errorf("captured %d frames, want %d", len(rows), len(flows))
	}
	for _, f := range flows {
		w := want(f)
		key := func(r map[string]string) string { return r["udp.srcport"] + "/" + r["tcp.srcport"] }
		var got map[string]string
		for _, r := range rows {
			if key(r) == key(w) {
				got = r
			}
		}
		if got == nil {
			t.Errorf("flow %+v: no frame with source port %s came back", f, key(w))
			continue
		}
		for _, k := range tsharkFields {
			if wv, ok := w[k]; ok && got[k] != wv {
				t.Errorf("flow %+v: %s = %q, want %q", f, k, got[k], wv)
			}
		}
	}
}

// linkMAC is the address of root-namespace link name.
func linkMAC(t *testing.T, name string) net.HardwareAddr {
	t.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return ifi.HardwareAddr
}

// startMode starts xdpfwd with args on links and waits until its program
// is on each of them.
func startMode(t *testing.T, links []string, args ...string) *proc {
	t.Helper()
	a := []string{"run", "--stats-interval", "0", "--control", "off"}
	for _, l := range links {
		a = append(a, "--link", l)
	}
	pr := startBin(t, append(a, args...)...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok := strings.Contains(pr.stderr.String(), readyMsg)
		for _, l := range links {
			if id, name := xdpProg(t, l); id == 0 || !strings.HasPrefix(name, ourProgName) {
				ok = false
			}
		}
		if ok {
			break
		}
		if pr.exited() || time.Now().After(deadline) {
			t.Fatalf("xdpfwd %s not ready (exited %v)\nstderr:\n%s", strings.Join(a, " "), pr.exited(), pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(pr.stderr.String(), "promiscuous=true") {
		t.Errorf("xdpfwd %s: the links are not promiscuous under --promisc auto:\n%s", strings.Join(args, " "), pr.stderr.String())
	}
	return pr
}

// TestFiveTupleSwapTshark: IPv4 and IPv6, TCP and UDP frames, two of them
// VLAN-tagged, sent into xdpfwd --mode 5tswap come back with MAC and IP
// addresses and ports swapped, field by field as tshark reads them from a
// capture in the sender's namespace, with every checksum Good. A frame
// whose UDP length is more than its IP payload comes back with only its
// MACs swapped, counted as malformed in the exit log; one shorter than its
// IPv4 total length does not come back, counted as rx_truncated.
func TestFiveTupleSwapTshark(t *testing.T) {
	p := newPair(t, topo.Options{})
	pr := startMode(t, []string{p.LinkA}, "--mode", "5tswap")
	flows := append(testFlows(), testFlow{malformed: true, sport: 40098, dport: 7098})
	wait := tcpdumpIn(t, p.A, len(flows))
	var frames [][]byte
	for _, f := range append(flows, testFlow{truncated: true, sport: 40099, dport: 7099}) {
		frames = append(frames, f.frame())
	}
	if err := topo.SendRaw(p.A, frames, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	rows := tsharkRead(t, wait(10*time.Second))
	checkFrames(t, rows, flows, func(f testFlow) map[string]string {
		return f.want(flowDstMAC, flowSrcMAC, !f.malformed)
	})
	pr.signal(syscall.SIGTERM)
	if code := pr.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM\n%s", code, pr.stderr.String())
	}
	s := pr.stderr.String()
	for _, w := range []string{"truncated=0 malformed=1", "rx_truncated=1"} {
		if !strings.Contains(s, w) {
			t.Errorf("exit log lacks %s:\n%s", w, s)
		}
	}
}

// TestMACModeTshark: xdpfwd --mode mac sends each frame out of the paired
// link (two links: the other one; one link: back out of it) with its
// source MAC that link's own and its destination the link's --eth-peer,
// IP addresses, ports and checksums unchanged and Good, as tshark reads
// them in the receiving namespace.
func TestMACModeTshark(t *testing.T) {
	peer := net.HardwareAddr{0x02, 0x9e, 0xe7, 0, 0, 0x01}
	peerB := net.HardwareAddr{0x02, 0x9e, 0xe7, 0, 0, 0x0b}
	for _, c := range []struct {
		name  string
		two   bool
		peers func(p *topo.Pair) []string
		// out is the link the frames leave by, and what they leave for.
		out func(p *topo.Pair) (link string, ns *topo.NS, dst net.HardwareAddr)
	}{
		{"one link", false,
			func(p *topo.Pair) []string { return []string{"--eth-peer", peer.String()} },
			func(p *topo.Pair) (string, *topo.NS, net.HardwareAddr) { return p.LinkA, p.A, peer }},
		{"two links", true,
			func(p *topo.Pair) []string {
				return []string{"--eth-peer", peer.String(), "--eth-peer", p.LinkB + "=" + peerB.String()}
			},
			func(p *topo.Pair) (string, *topo.NS, net.HardwareAddr) { return p.LinkB, p.B, peerB }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, topo.Options{})
			links := []string{p.LinkA}
			if c.two {
				links = append(links, p.LinkB)
			}
			pr := startMode(t, links, append([]string{"--mode", "mac"}, c.peers(p)...)...)
			out, ns, dst := c.out(p)
			flows := testFlows()
			wait := tcpdumpIn(t, ns, len(flows))
			var frames [][]byte
			for _, f := range flows {
				frames = append(frames, f.frame())
			}
			if err := topo.SendRaw(p.A, frames, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			rows := tsharkRead(t, wait(10*time.Second))
			src := linkMAC(t, out)
			checkFrames(t, rows, flows, func(f testFlow) map[string]string { return f.want(src, dst, false) })
			pr.interrupt()
		})
	}
}
