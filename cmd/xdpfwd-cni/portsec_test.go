package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// Port security against the real daemon, the plugin driven by cnitool:
// the plugin passes each pod's MAC and IPs with its add, and xdpfwd's
// switch (--port-security on, its default) secures the pod's port.

// podSniffer counts the frames eth0 of a pod receives for one destination
// MAC address: an AF_PACKET socket sees every frame the veth delivers,
// those for another host included.
type podSniffer struct {
	fd int
	// watch is a frame to look out for; seen counts its arrivals. A pod's
	// own stack sends from its MAC at any time (IPv6 MLD, ND), so the
	// spoof is told by its bytes, not its source.
	watch []byte
	seen  int
}

func sniffPod(t *testing.T, p *topo.NS) *podSniffer {
	t.Helper()
	s := &podSniffer{fd: -1}
	err := p.Do(func() error {
		ifi, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return err
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		s.fd = fd
		return nil
	})
	if err != nil {
		t.Fatalf("packet socket in %s: %v", p.Name, err)
	}
	t.Cleanup(func() { unix.Close(s.fd) })
	return s
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// count drains what the socket holds and counts the frames received (not
// sent) by destination and by source MAC address.
func (s *podSniffer) count() (dst, src map[string]int) {
	dst, src = map[string]int{}, map[string]int{}
	buf := make([]byte, 2048)
	for {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING || n < 14 {
			continue
		}
		dst[net.HardwareAddr(buf[0:6]).String()]++
		src[net.HardwareAddr(buf[6:12]).String()]++
		if s.watch != nil && bytes.Equal(buf[:n], s.watch) {
			s.seen++
		}
	}
}

// metricValue reads a Prometheus text line's value from xdpfwd's metrics
// endpoint in node: the sum of the series named name whose labels hold
// every one of labels ("k=v").
func metricValue(t *testing.T, node *topo.NS, name string, labels ...string) float64 {
	t.Helper()
	body := metricsGet(t, node, "/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		series, val, ok := strings.Cut(line, " ")
		if !ok || series != name && !strings.HasPrefix(series, name+"{") {
			continue
		}
		all := true
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			all = all && strings.Contains(series, k+`="`+v+`"`)
		}
		if all {
			var f float64
			fmt.Sscan(val, &f)
			sum += f
		}
	}
	return sum
}

// metricsGet is GET path from xdpfwd's metrics server in node.
func metricsGet(t *testing.T, node *topo.NS, path string) string {
	t.Helper()
	var conn net.Conn
	if err := node.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", metricsAddr, 3*time.Second)
		return err
	}); err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, metricsAddr)
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("metrics %s: %v", path, err)
	}
	_, body, _ := strings.Cut(string(b), "\r\n\r\n")
	return body
}

// fdbDump is xdpfwd's forwarding database: link index by MAC (static
// entries flagged), and its counters.
func fdbDump(t *testing.T, node *topo.NS) (links map[string]int, static map[string]bool, evictions float64) {
	t.Helper()
	var dump struct {
		Stats struct {
			Evictions float64 `json:"evictions"`
		} `json:"stats"`
		Entries []struct {
			MAC    string `json:"mac"`
			Link   int    `json:"link"`
			Static bool   `json:"static"`
		} `json:"entries"`
	}
	body := metricsGet(t, node, "/fdb")
	if err := json.Unmarshal([]byte(body), &dump); err != nil {
		t.Fatalf("/fdb: %v: %.200s", err, body)
	}
	links, static = map[string]int{}, map[string]bool{}
	for _, e := range dump.Entries {
		links[e.MAC], static[e.MAC] = e.Link, e.Static
	}
	return links, static, dump.Stats.Evictions
}

func macOf(t *testing.T, p *topo.NS) net.HardwareAddr {
	t.Helper()
	m, err := p.HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCNIPortSecurity: three pods added through the plugin (cnitool)
// to a running xdpfwd switch. Pod B sends one broadcast with pod A's
// source MAC, then pod C pings A: A answers every ping, B receives none
// of the frames for A, and xdpfwd counts B's frame as spoofed_source
// (metrics). Then B sends 90,000 frames from random source MACs: the FDB
// evicts nothing, A's and C's entries stay on their links (A's static),
// and of 20 pings C sends A every one is answered and B sees none.
// Against main (no port security) B got A's pings after the one
// broadcast, and the flood evicted tens of thousands of entries, A's
// among them, so A's frames were flooded to B.
func TestCNIPortSecurity(t *testing.T) {
	r := newRig(t, 3)
	r.daemon.srv.Close(time.Second) // the stand-in makes way for xdpfwd
	ipIn(t, r.node,
		[]string{"link", "add", "up0", "type", "veth", "peer", "name", "up0p"},
		[]string{"link", "set", "up0", "up"}, []string{"link", "set", "up0p", "up"})
	d := startXdpfwd(t, buildXdpfwd(t, r.dir), r.node, r.ctl, "--mode", "switch", "--link", "up0", "--max-links", "8", "--metrics", metricsAddr)
	r.forwards = d.forwards
	pa, pb, pc := r.pods[0], r.pods[1], r.pods[2]
	addrA, addrB, addrC := r.add(pa), r.add(pb), r.add(pc)
	for p, a := range map[*topo.NS]netip.Addr{pa: addrA, pb: addrB, pc: addrC} {
		r.attached(p, a)
	}
	macA, macB, macC := macOf(t, pa), macOf(t, pb), macOf(t, pc)
	// Every pod known to the others (ARP) and to the switch (learned, or
	// pinned): C→A and C→B answered.
	for _, c := range []struct {
		to   *topo.NS
		addr netip.Addr
	}{{pa, addrA}, {pb, addrB}} {
		if err := r.reach(pc, c.to, c.addr, 0); err != nil {
			t.Fatalf("before: %v", err)
		}
	}
	hostB := r.hostName(pb)
	linkIndex := func(p *topo.NS) int { return slices.Index(d.links(), r.hostName(p)) }

	// One broadcast from B with A's source, then one of B's own: once C
	// has B's own, the switch has handled the first (one queue, in order).
	snifB, snifC := sniffPod(t, pb), sniffPod(t, pc)
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	spoof := topo.UDPFrame(bcast, macA, addrA, netip.MustParseAddr("10.99.0.255"), 9, 9, 60)
	marker := topo.UDPFrame(bcast, macB, addrB, netip.MustParseAddr("10.99.0.255"), 9, 10, 60)
	if err := topo.SendRaw(pb, [][]byte{spoof, marker}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	snifC.watch = spoof
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, src := snifC.count(); src[macB.String()] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("C never got B's marker broadcast")
		}
	}
	snifB.count()
	pr, err := topo.Ping(pc, addrA, 3, 6*time.Second)
	got, _ := snifB.count()
	snifC.count() // the spoof, had it come by another worker than the marker
	spoofSeen := snifC.seen
	toA := got[macA.String()]
	spoofed := metricValue(t, r.node, "xdpfwd_drops_total", "link="+hostB, "reason=spoofed_source")
	t.Logf("after B's broadcast as A: C→A pings %d of %d answered (%v); B received %d frames for A; the spoofed broadcast reached C %d times; xdpfwd's spoofed_source on B's link: %.0f",
		pr.Received, pr.Sent, err, toA, spoofSeen, spoofed)
	if pr.Received != 3 || toA != 0 || spoofSeen != 0 || spoofed < 1 {
		t.Errorf("B claimed A's MAC: A answered %d of 3 pings, B got %d frames for A, C got the spoof %d times, spoofed_source %.0f; want 3, 0, 0, ≥1",
			pr.Received, toA, spoofSeen, spoofed)
	}

	// The flood: 90,000 frames from B, each from a random unicast source.
	_, _, evBefore := fdbDump(t, r.node)
	rng := rand.New(rand.NewPCG(28, 90))
	frames := make([][]byte, 90_000)
	for i := range frames {
		src := net.HardwareAddr{byte(rng.IntN(256))&^1 | 2, byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))}
		frames[i] = topo.UDPFrame(bcast, src, addrB, netip.MustParseAddr("10.99.0.255"), 9, 11, 60)
	}
	spoofedBefore := metricValue(t, r.node, "xdpfwd_drops_total", "link="+hostB, "reason=spoofed_source")
	start := time.Now()
	if err := topo.SendRaw(pb, frames, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	snifC.count() // what the flood left there (without port security: all of it, flooded)
	if err := topo.SendRaw(pb, [][]byte{marker}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, src := snifC.count(); src[macB.String()] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("C never got B's marker broadcast after the flood")
		}
	}
	sent := time.Since(start)
	links, static, evAfter := fdbDump(t, r.node)
	spoofedFlood := metricValue(t, r.node, "xdpfwd_drops_total", "link="+hostB, "reason=spoofed_source") - spoofedBefore
	rxB := metricValue(t, r.node, "xdpfwd_rx_packets_total", "link="+hostB)
	snifB.count()
	pr, err = topo.Ping(pc, addrA, 20, 10*time.Second)
	got, _ = snifB.count()
	toA = got[macA.String()]
	t.Logf("flood of 90000 frames from B in %v: xdpfwd received %.0f on B's link in all, %.0f spoofed_source; FDB evictions %.0f → %.0f, %d entries; A on link %d (static %v), C on link %d; then C→A pings %d of 20 answered (%v), B received %d frames for A",
		sent, rxB, spoofedFlood, evBefore, evAfter, len(links), links[macA.String()], static[macA.String()], links[macC.String()], pr.Received, err, toA)
	la, okA := links[macA.String()]
	lc, okC := links[macC.String()]
	if evAfter != evBefore || !okA || la != linkIndex(pa) || !static[macA.String()] || !okC || lc != linkIndex(pc) {
		t.Errorf("after B's flood: evictions %.0f → %.0f, A's entry %v on link %d (static %v), C's %v on link %d; want no eviction, A static on %d, C on %d",
			evBefore, evAfter, okA, la, static[macA.String()], okC, lc, linkIndex(pa), linkIndex(pc))
	}
	if pr.Received != 20 || toA != 0 || spoofedFlood < 1 {
		t.Errorf("after B's flood: A answered %d of 20 pings, B got %d frames for A, spoofed_source grew %.0f; want 20, 0, ≥1", pr.Received, toA, spoofedFlood)
	}

	// A fourth pod asks for A's MAC (CNI_ARGS MAC=, as a pod annotation
	// gives it): ADD fails, the daemon's refusal named (mac_in_use, the
	// plugin's 100), and nothing of it is left; A still answers.
	pd := r.newPod("s39dup")
	out, err := r.cnitoolEnv("add", pd, "CNI_ARGS=IgnoreUnknown=1;MAC="+macA.String())
	if err == nil || !strings.Contains(out, "xdpfwd refused") || !strings.Contains(out, "is link "+r.hostName(pa)+"'s") {
		t.Errorf("ADD of a pod with A's MAC: %v\n%s\nwant the daemon's refusal naming A's link", err, out)
	}
	r.gone(pd, netip.Addr{})
	if pr, err := topo.Ping(pc, addrA, 3, 6*time.Second); err != nil || pr.Received != 3 {
		t.Errorf("after the refused ADD: C→A %+v, %v; want 3 of 3", pr, err)
	}
	d.running()
}
