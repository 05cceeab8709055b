package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// rxPackets is what pod p's eth0 received, by the kernel's count.
func rxPackets(t *testing.T, p *wirePod) uint64 {
	t.Helper()
	var n uint64
	if err := p.ns.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		n = l.Attrs().Statistics.RxPackets
		return nil
	}); err != nil {
		t.Fatalf("%s: eth0's counters: %v", p.ns.Name, err)
	}
	return n
}

// vlanFrame is frame f with an 802.1Q tag of vid after its addresses.
func vlanFrame(f []byte, vid uint16) []byte {
	out := append([]byte(nil), f[:12]...)
	out = binary.BigEndian.AppendUint16(out, 0x8100)
	out = binary.BigEndian.AppendUint16(out, vid)
	return append(out, f[12:]...)
}

// TestCNIVLANNetworks: two networks on the same two switch nodes, as two
// NetworkAttachmentDefinitions of ovs-cni's shape would give them: "red"
// ("vlan": 100) and "blue" ("vlan": 200), both in one subnet
// (10.29.0.0/16, each network and node its own range, so that only the
// VLANs keep them apart), each node's uplink a trunk of both (--trunk
// n29up=100,200). Within each network every pod reaches every other,
// across the wire too (a ping and 64 KiB of TCP each). Between them:
// no ping from a red pod reaches a blue one; while the red pods send
// broadcasts (ARP for every blue address), unknown unicast and frames
// tagged for VLAN 200 (spoofed), the blue pods receive none of them (a
// packet socket on each sees no frame from a red pod's MAC or to the
// unknown one), and every spoofed frame is counted spoofed_vlan on its
// link. link list shows each pod's access
// port; a DEL leaves each switch its uplink alone.
func TestCNIVLANNetworks(t *testing.T) {
	const (
		uplink   = "n29up"
		subnet   = "10.29.0.0/16"
		perNet   = 2 // pods per network per node
		spoofed  = 50
		flooding = 50
	)
	begin := time.Now()
	r := newTwoNodes(t, "n29", uplink, "--trunk", uplink+"=100,200", "--metrics", metricsAddr)
	nets := []struct {
		name string
		vlan int
		base int // the host part's third byte: red 1x, blue 2x
	}{{"red", 100, 10}, {"blue", 200, 20}}
	pods := map[string][]*wirePod{}
	nodeOf := map[*wirePod]*wireNode{}
	for i, n := range r.nodes {
		for _, nw := range nets {
			third := nw.base + i + 1 // red: 10.29.11.x on node1, 10.29.12.x on node2; blue 21, 22
			r.conflist(n, nw.name, map[string]any{
				"type":    "host-local",
				"dataDir": filepath.Join(r.dir, n.name+"-ipam"),
				"ranges": []any{[]any{map[string]any{"subnet": subnet,
					"rangeStart": fmt.Sprintf("10.29.%d.2", third), "rangeEnd": fmt.Sprintf("10.29.%d.254", third)}}},
			}, map[string]any{"vlan": nw.vlan})
			for k := range perNet {
				p := newPod(t, fmt.Sprintf("n29%s%d%d", nw.name[:1], i+1, k), net.HardwareAddr{0x02, 0x29, byte(nw.vlan >> 8), byte(nw.vlan), byte(i + 1), byte(k + 1)})
				r.add(n, nw.name, p)
				pods[nw.name] = append(pods[nw.name], p)
				nodeOf[p] = n
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, n := range r.nodes {
		for _, k := range n.d.list().Links {
			if k.Name == uplink {
				if k.VLAN == nil || len(k.VLAN.Trunk) != 2 {
					t.Errorf("%s: the uplink's VLANs %+v, want a trunk of 100 and 200", n.name, k.VLAN)
				}
				continue
			}
			if k.VLAN == nil || k.VLAN.Access != 100 && k.VLAN.Access != 200 {
				t.Errorf("%s: link %s's VLANs %+v, want an access port of 100 or 200", n.name, k.Name, k.VLAN)
			}
		}
	}
	setup := time.Since(begin)

	// Within each network: every pod to every other.
	pairs := 0
	for _, nw := range nets {
		for _, a := range pods[nw.name] {
			for _, b := range pods[nw.name] {
				if a == b {
					continue
				}
				pairs++
				if pr, err := topo.Ping(a.ns, b.addr, 1, 3*time.Second); err != nil || pr.Received != 1 {
					t.Errorf("%s: ping %s (%s) → %s (%s, %s): %+v, %v", nw.name, a.ns.Name, nodeOf[a].name, b.ns.Name, b.addr, nodeOf[b].name, pr, err)
					continue
				}
				if tr, err := topo.TCPTransfer(a.ns, b.ns, b.addr, 64<<10, 10*time.Second); err != nil || tr.Bytes != 64<<10 {
					t.Errorf("%s: TCP %s → %s: %d of %d bytes, %v", nw.name, a.ns.Name, b.ns.Name, tr.Bytes, 64<<10, err)
				}
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Between them: nothing. The blue pods' counters first, then the red
	// pods' broadcasts, unknown unicast and spoofed tags.
	var hosts []string
	for _, n := range r.nodes {
		for _, p := range pods["red"] {
			if nodeOf[p] == n {
				hosts = append(hosts, p.host)
			}
		}
	}
	before := [2]map[string]float64{drops(t, r.nodes[0].ns, hosts), drops(t, r.nodes[1].ns, hosts)}
	heard := map[*wirePod]uint64{}
	listeners := map[*wirePod]*topo.RawReceiver{}
	for _, b := range pods["blue"] {
		heard[b] = rxPackets(t, b)
		l, err := topo.ListenRaw(b.ns)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		listeners[b] = l
	}
	red := map[string]bool{}
	for _, a := range pods["red"] {
		red[a.mac.String()] = true
	}
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	nobody := net.HardwareAddr{0x02, 0x29, 0xee, 0xee, 0xee, 0xee}
	for _, a := range pods["red"] {
		for _, b := range pods["blue"] {
			// An ARP broadcast for the blue pod's address, unanswered.
			if pr, err := topo.Ping(a.ns, b.addr, 1, 300*time.Millisecond); err == nil && pr.Received != 0 {
				t.Errorf("red %s → blue %s (%s): %d replies, want none", a.ns.Name, b.ns.Name, b.addr, pr.Received)
			}
		}
		var frames [][]byte
		for i := range flooding {
			frames = append(frames, topo.UDPFrame(nobody, a.mac, a.addr, netip.MustParseAddr("10.29.21.2"), 9, uint16(1000+i), 80))
		}
		for i := range spoofed {
			frames = append(frames, vlanFrame(topo.UDPFrame(bcast, a.mac, a.addr, netip.MustParseAddr("10.29.21.2"), 9, uint16(2000+i), 80), 200))
		}
		if err := topo.SendRaw(a.ns, frames, 5*time.Second); err != nil {
			t.Fatalf("%s: send: %v", a.ns.Name, err)
		}
	}
	// The spoofed frames counted are the sign the red pods' frames were
	// all handled: then the blue pods' counters are read.
	want := float64(spoofed * perNet)
	deadline := time.Now().Add(5 * time.Second)
	var got [2]float64
	for i, n := range r.nodes {
		for {
			after := drops(t, n.ns, hosts)
			got[i] = 0
			for k, v := range after {
				if strings.HasSuffix(k, " spoofed_vlan") {
					got[i] += v - before[i][k]
				}
			}
			if got[i] >= want || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if got[i] != want {
			t.Errorf("%s: %.0f frames counted spoofed_vlan on the red pods' links, want %.0f", n.name, got[i], want)
		}
	}
	// What each blue pod saw meanwhile: nothing of red's (the last
	// copies in flight given 200 ms).
	seen, others := 0, 0
	for _, b := range pods["blue"] {
		other := 0
		deadline := time.Now().Add(200 * time.Millisecond)
		for {
			f, err := listeners[b].Next(deadline)
			if err != nil {
				break
			}
			if len(f) >= 14 && (red[net.HardwareAddr(f[6:12]).String()] || net.HardwareAddr(f[0:6]).String() == nobody.String()) {
				seen++
				t.Errorf("blue %s (%s) received red's frame % x…", b.ns.Name, nodeOf[b].name, f[:min(len(f), 24)])
				continue
			}
			other++
		}
		if n := rxPackets(t, b) - heard[b]; n != 0 {
			t.Logf("blue %s: rx_packets grew by %d while red spoke (frames of blue's own: %d seen)", b.ns.Name, n, other)
		}
		others += other
	}
	// And blue, after all that, still reaches blue across the wire.
	if a, b := pods["blue"][0], pods["blue"][len(pods["blue"])-1]; !t.Failed() {
		if pr, err := topo.Ping(a.ns, b.addr, 1, 3*time.Second); err != nil || pr.Received != 1 {
			t.Errorf("blue: ping %s → %s after: %+v, %v", a.ns.Name, b.ns.Name, pr, err)
		}
	}

	for _, nw := range nets {
		for _, p := range pods[nw.name] {
			r.del(nodeOf[p], nw.name, p)
		}
	}
	for _, n := range r.nodes {
		deadline := time.Now().Add(5 * time.Second)
		for len(n.d.links()) != 1 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if got := n.d.links(); len(got) != 1 || got[0] != uplink {
			t.Errorf("%s: xdpfwd's links after every DEL: %q, want %s alone", n.name, got, uplink)
		}
		n.d.running()
	}
	t.Logf("two VLAN networks on two nodes: setup %v; %d pairs within them reached (ping, 64 KiB TCP); red sent %d ARP broadcasts for blue, %d unknown unicast and %d tagged for VLAN 200 (counted spoofed_vlan %.0f and %.0f): the blue pods received %d of them (%d frames of blue's own); whole test %v",
		setup.Round(time.Millisecond), pairs, len(pods["red"])*len(pods["blue"]), len(pods["red"])*flooding, len(pods["red"])*spoofed, got[0], got[1], seen, others, time.Since(begin).Round(time.Millisecond))
}
