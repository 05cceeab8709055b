package topo

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/rps"
)

func testID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newTestPair(t *testing.T, opt Options) *Pair {
	t.Helper()
	p, err := NewPair(opt)
	if err != nil {
		t.Fatalf("NewPair(%+v): %v", opt, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close %s: %v", p.Name, err)
		}
	})
	return p
}

// bridge joins the pair's root-side ends with a Linux bridge, standing in for
// a forwarder, and returns a function that removes it.
func bridge(t *testing.T, p *Pair) (remove func()) {
	t.Helper()
	name := bridgeName(p)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	br := &netlink.Bridge{LinkAttrs: attrs}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatalf("create bridge %s: %v", name, err)
	}
	var once sync.Once
	remove = func() {
		once.Do(func() {
			if err := netlink.LinkDel(br); err != nil {
				t.Errorf("delete bridge %s: %v", name, err)
			}
		})
	}
	t.Cleanup(remove)
	if err := disableIPv6(name); err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{p.LinkA, p.LinkB} {
		l, err := netlink.LinkByName(port)
		if err != nil {
			t.Fatalf("look up %s: %v", port, err)
		}
		if err := netlink.LinkSetMaster(l, br); err != nil {
			t.Fatalf("enslave %s to %s: %v", port, name, err)
		}
	}
	if err := netlink.LinkSetUp(br); err != nil {
		t.Fatalf("set bridge %s up: %v", name, err)
	}
	return remove
}

func bridgeName(p *Pair) string { return "xf" + strings.TrimPrefix(p.Name, "xdpfwd-") + "br" }

// leftovers lists /run/netns entries and root links that carry prefix.
func leftovers(t *testing.T, nsPrefix string, links ...string) []string {
	t.Helper()
	var left []string
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), nsPrefix) {
			left = append(left, netnsDir+"/"+e.Name())
		}
	}
	for _, name := range links {
		_, err := netlink.LinkByName(name)
		var nf netlink.LinkNotFoundError
		if !errors.As(err, &nf) {
			left = append(left, "link "+name)
		}
	}
	return left
}

func ping(t *testing.T, src *NS, addr netip.Addr) {
	t.Helper()
	res, err := Ping(src, addr, 3, 5*time.Second)
	if err != nil {
		t.Fatalf("ping %s from %s: %v", addr, src.Name, err)
	}
	if res.Received != res.Sent || res.Sent != 3 {
		t.Fatalf("ping %s from %s: %+v, want 3 of 3", addr, src.Name, res)
	}
	t.Logf("ping %s from %s: %d/%d, median rtt %v", addr, src.Name, res.Received, res.Sent, res.RTT)
}

func TestPairBridged(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	removeBridge := bridge(t, p)

	ping(t, p.A, p.V4B)
	ping(t, p.B, p.V4A)
	ping(t, p.A, p.V6B)

	const n = 8 << 20
	for _, tc := range []struct {
		src, dst *NS
		addr     netip.Addr
	}{{p.A, p.B, p.V4B}, {p.B, p.A, p.V6A}} {
		res, err := TCPTransfer(tc.src, tc.dst, tc.addr, n, 30*time.Second)
		if err != nil {
			t.Fatalf("TCPTransfer to %s: %v", tc.addr, err)
		}
		if res.Bytes != n {
			t.Fatalf("TCPTransfer to %s: %d bytes, want %d", tc.addr, res.Bytes, n)
		}
		t.Logf("tcp to %s: %d bytes in %v (%.2f Gbit/s)", tc.addr, res.Bytes, res.Elapsed, res.Gbps)
	}

	for _, addr := range []netip.Addr{p.V4B, p.V6B} {
		const count = 10000
		res, err := UDPBurst(p.A, p.B, addr, count, 64, 20*time.Second)
		if err != nil {
			t.Fatalf("UDPBurst to %s: %v", addr, err)
		}
		t.Logf("udp to %s: %+v", addr, res)
		if res.Sent != count || res.Received < count*9/10 {
			t.Fatalf("UDPBurst to %s: sent %d, received %d; want %d sent, >= 99%% received", addr, res.Sent, res.Received, count)
		}
	}

	// Offloads on the namespace-side ends must be off by default.
	for _, ns := range []*NS{p.A, p.B} {
		checkOffloads(t, ns, false)
	}

	removeBridge()
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if left := leftovers(t, p.Name, p.LinkA, p.LinkB); len(left) > 0 {
		t.Fatalf("left behind after Close: %v", left)
	}
}

// Without a forwarder A and B must not reach each other; otherwise a test
// could pass while its forwarder forwards nothing.
func TestPairIsolatedWithoutForwarder(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	res, err := Ping(p.A, p.V4B, 1, 300*time.Millisecond)
	if err == nil || res.Received != 0 {
		t.Fatalf("ping across unjoined pair: %+v, err %v; want no reply", res, err)
	}
}

func TestTwoPairsAndIdempotentClose(t *testing.T) {
	RequireRoot(t)
	var (
		wg    sync.WaitGroup
		pairs [2]*Pair
		errs  [2]error
	)
	for i := range pairs {
		wg.Go(func() { pairs[i], errs[i] = NewPair(Options{}) })
	}
	wg.Wait()
	for i, p := range pairs {
		if errs[i] != nil {
			t.Fatalf("NewPair %d: %v", i, errs[i])
		}
		t.Cleanup(func() { p.Close() })
	}
	a, b := pairs[0], pairs[1]
	if a.Name == b.Name || a.LinkA == b.LinkA || a.A.Name == b.A.Name {
		t.Fatalf("names collide: %q/%q/%q and %q/%q/%q", a.Name, a.LinkA, a.A.Name, b.Name, b.LinkA, b.A.Name)
	}
	for _, p := range pairs {
		for _, l := range []string{p.LinkA, p.LinkB} {
			if len(l) > 15 {
				t.Errorf("link name %q longer than IFNAMSIZ-1", l)
			}
		}
		for i := 0; i < 2; i++ {
			if err := p.Close(); err != nil {
				t.Fatalf("Close #%d of %s: %v", i+1, p.Name, err)
			}
		}
		if left := leftovers(t, p.Name, p.LinkA, p.LinkB); len(left) > 0 {
			t.Fatalf("left behind after Close: %v", left)
		}
		if err := p.A.Do(func() error { return nil }); err == nil {
			t.Errorf("Do on closed namespace %s succeeded", p.A.Name)
		}
	}
	if err := (&Pair{}).Close(); err != nil {
		t.Errorf("Close of zero Pair: %v", err)
	}
	if err := (*Pair)(nil).Close(); err != nil {
		t.Errorf("Close of nil Pair: %v", err)
	}
}

// A failure half-way must remove what was built and leave alone the link
// that caused it, which is not ours.
func TestNewPairCleansUpOnError(t *testing.T) {
	RequireRoot(t)
	id := testID()

	attrs := netlink.NewLinkAttrs()
	attrs.Name = "xf" + id + "b" // the name newPair wants for LinkB
	// ifb: this kernel may lack dummy, and any link type will do.
	foreign := &netlink.Ifb{LinkAttrs: attrs}
	if err := netlink.LinkAdd(foreign); err != nil {
		t.Fatalf("create dummy %s: %v", attrs.Name, err)
	}
	t.Cleanup(func() { netlink.LinkDel(foreign) })
	before, err := netlink.LinkByName(attrs.Name)
	if err != nil {
		t.Fatal(err)
	}

	p, err := newPair(Options{}, id)
	if err == nil {
		p.Close()
		t.Fatal("newPair succeeded despite a link named like its LinkB")
	}
	t.Logf("expected error: %v", err)
	if !errors.Is(err, unix.EEXIST) {
		t.Errorf("error %v does not wrap EEXIST", err)
	}
	if left := leftovers(t, "xdpfwd-"+id, "xf"+id+"a"); len(left) > 0 {
		t.Fatalf("left behind after failed NewPair: %v", left)
	}
	after, err := netlink.LinkByName(attrs.Name)
	if err != nil || after.Attrs().Index != before.Attrs().Index {
		t.Fatalf("foreign link %s touched: %v", attrs.Name, err)
	}
}

// checkOffloads fails t unless eth0 in ns has TX checksum offload as
// wantTxCsum and TX/RX VLAN offload off.
func checkOffloads(t *testing.T, ns *NS, wantTxCsum bool) {
	t.Helper()
	err := ns.Do(func() error {
		if on, err := ethtool.TxChecksum(peerName); err != nil || on != wantTxCsum {
			t.Errorf("%s/%s: tx checksum offload on=%v err=%v, want %v", ns.Name, peerName, on, err, wantTxCsum)
		}
		// The kernel's default, as in a container.
		if tx, rx, err := ethtool.VLANOffload(peerName); err != nil || !tx || !rx {
			t.Errorf("%s/%s: VLAN offload tx=%v rx=%v err=%v, want on (the default)", ns.Name, peerName, tx, rx, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Options.TxChecksum keeps the veth default on the namespace-side ends; VLAN
// offload keeps its default regardless; and package ethtool, called through
// Do, reaches the link inside the namespace.
func TestTxChecksumOption(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{TxChecksum: true})
	checkOffloads(t, p.A, true)
	checkOffloads(t, p.B, true)
	err := p.A.Do(func() error {
		for _, on := range []bool{false, true, false} {
			if err := ethtool.SetTxChecksum(p.PeerA, on); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkOffloads(t, p.A, false)
	checkOffloads(t, p.B, true)
}

func TestOptionsAndSetMTU(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{Queues: 2, MTU: 9000})
	names := []string{peerName}
	checkMTU := func(want int) {
		t.Helper()
		for _, name := range []string{p.LinkA, p.LinkB} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			if a := l.Attrs(); a.MTU != want || a.NumTxQueues != 2 || a.NumRxQueues != 2 {
				t.Errorf("%s: mtu %d, queues %d/%d; want mtu %d, 2 queues", name, a.MTU, a.NumTxQueues, a.NumRxQueues, want)
			}
		}
		for _, ns := range []*NS{p.A, p.B} {
			h, err := ns.handle()
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				l, err := h.LinkByName(name)
				if err != nil {
					t.Fatalf("%s in %s: %v", name, ns.Name, err)
				}
				if a := l.Attrs(); a.MTU != want {
					t.Errorf("%s in %s: mtu %d, want %d", name, ns.Name, a.MTU, want)
				}
			}
			h.Close()
		}
	}
	checkMTU(9000)
	if err := p.SetMTU(1500); err != nil {
		t.Fatal(err)
	}
	checkMTU(1500)
	if err := p.SetMTU(4000); err != nil {
		t.Fatal(err)
	}
	checkMTU(4000)

	if _, err := NewPair(Options{VLAN: 4095}); err == nil {
		t.Error("NewPair accepted VLAN 4095")
	}
}

func TestVLANBridged(t *testing.T) {
	RequireRoot(t)
	id := testID()
	p, err := newPair(Options{VLAN: 300, MTU: 9000}, id)
	if errors.Is(err, ErrVLANUnsupported) {
		// The failure came late in NewPair; it must still clean up.
		if left := leftovers(t, "xdpfwd-"+id, "xf"+id+"a", "xf"+id+"b"); len(left) > 0 {
			t.Fatalf("left behind after failed NewPair: %v", left)
		}
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if want := netip.MustParseAddr("198.19.44.2"); p.VLANv4B != want {
		t.Errorf("VLANv4B = %s, want %s", p.VLANv4B, want)
	}
	bridge(t, p)
	ping(t, p.A, p.VLANv4B)
	if err := p.SetMTU(1500); err != nil {
		t.Fatal(err)
	}
	h, err := p.B.handle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(vlanName(300))
	if err != nil || l.Attrs().MTU != 1500 {
		t.Fatalf("VLAN link after SetMTU(1500): %v, err %v", l, err)
	}
	ping(t, p.B, p.VLANv4A)
}

func TestDo(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	inode := func() uint64 {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	var root, inA uint64
	if err := p.A.Do(func() error { inA = inode(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := p.A.Do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	root = inode()
	if root == inA {
		t.Fatal("Do did not switch namespaces")
	}
	sentinel := errors.New("sentinel")
	if err := p.B.Do(func() error { return sentinel }); err != sentinel {
		t.Errorf("Do returned %v, want fn's error unchanged", err)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		p.B.Do(func() error { panic("boom") })
	}()
	// Threads that ran Do go back to the pool; none may still be in A.
	for i := 0; i < 50; i++ {
		p.A.Do(func() error { return nil })
	}
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if got := inode(); got != root {
				t.Errorf("pool thread in namespace inode %d, root is %d", got, root)
			}
		})
	}
	wg.Wait()
}

func vlanFramesOK(t *testing.T, src, dst *NS, vid uint16, count int) {
	t.Helper()
	res, err := vlanFrames(src, dst, vid, count, 10*time.Second)
	t.Logf("VLAN %d %s -> %s: %+v", vid, src.Name, dst.Name, res)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != count || res.Matched != count {
		t.Fatalf("VLAN %d %s -> %s: sent %d, %d arrived unchanged; want all %d", vid, src.Name, dst.Name, res.Sent, res.Matched, count)
	}
}

// Without 8021q no VLAN sub-interface exists, but tagged frames sent with
// packet sockets must still cross a forwarder with their tag and bytes
// intact, and must not cross when nothing forwards.
func TestVLANFramesBridged(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	checkOffloads(t, p.A, false)
	checkOffloads(t, p.B, false)
	const count = 100

	n, err := VLANFrames(p.A, p.B, 300, count, time.Second)
	if err != nil || n != 0 {
		t.Fatalf("VLANFrames across unjoined pair: %d arrived, err %v; want 0, nil", n, err)
	}

	bridge(t, p)
	n, err = VLANFrames(p.A, p.B, 300, count, 10*time.Second)
	if err != nil || n != count {
		t.Fatalf("VLANFrames across bridge: %d of %d arrived, err %v", n, count, err)
	}
	vlanFramesOK(t, p.B, p.A, 4094, count)
	vlanFramesOK(t, p.A, p.B, 1, count)

	// A packet socket writes the tag into the frame data itself, so the
	// sender's TX VLAN offload makes no difference.
	setVLANOffload := func(ns *NS, on bool) {
		t.Helper()
		if err := ns.Do(func() error { return ethtool.SetVLANOffload(peerName, on) }); err != nil {
			t.Fatal(err)
		}
	}
	setVLANOffload(p.A, false)
	vlanFramesOK(t, p.A, p.B, 300, count)
	setVLANOffload(p.A, true)

	// With TX VLAN offload off on the bridge's egress port the tag goes back
	// into the frame data on the way to B; B's kernel strips it again.
	if err := ethtool.SetVLANOffload(p.LinkB, false); err != nil {
		t.Fatal(err)
	}
	vlanFramesOK(t, p.A, p.B, 300, count)
}

// A tag the sender offloaded (skb metadata, put there by a TC program)
// crosses a bridge, which keeps the metadata, and arrives as if it had been
// in the frame; across an unjoined pair nothing arrives, and the TC program
// is gone afterwards.
func TestOffloadedVLANFramesBridged(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	const count = 100
	n, err := OffloadedVLANFrames(p.A, p.B, 300, count, time.Second)
	if err != nil || n != 0 {
		t.Fatalf("OffloadedVLANFrames across unjoined pair: %d arrived, err %v; want 0, nil", n, err)
	}
	bridge(t, p)
	for _, c := range []struct {
		src, dst *NS
		vid      uint16
	}{{p.A, p.B, 300}, {p.B, p.A, 4094}, {p.A, p.B, 1}} {
		res, err := offloadedVLANFrames(c.src, c.dst, c.vid, count, 10*time.Second)
		t.Logf("VLAN %d %s -> %s: %+v", c.vid, c.src.Name, c.dst.Name, res)
		if err != nil || res.Matched != count {
			t.Fatalf("VLAN %d %s -> %s: %d of %d arrived tagged and intact: %v", c.vid, c.src.Name, c.dst.Name, res.Matched, count, err)
		}
	}
	// Every call removed its TC program.
	for _, ns := range []*NS{p.A, p.B} {
		err := ns.Do(func() error {
			ifi, err := net.InterfaceByName(peerName)
			if err != nil {
				return err
			}
			progs, err := link.QueryPrograms(link.QueryOptions{Target: ifi.Index, Attach: ebpf.AttachTCXEgress})
			if err != nil {
				return err
			}
			if len(progs.Programs) != 0 {
				return fmt.Errorf("%d TCX egress programs left on %s", len(progs.Programs), peerName)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", ns.Name, err)
		}
	}
}

func TestVLANFramesArgs(t *testing.T) {
	ns := &NS{Name: "unused", fd: -1}
	for _, tc := range []struct {
		vid   uint16
		count int
	}{{0, 1}, {4095, 1}, {1, -1}} {
		if _, err := VLANFrames(ns, ns, tc.vid, tc.count, time.Second); err == nil || !strings.Contains(err.Error(), "range") && !strings.Contains(err.Error(), "negative") {
			t.Errorf("VLANFrames(vid %d, count %d): %v, want an argument error", tc.vid, tc.count, err)
		}
	}
	if _, err := VLANFrames(ns, ns, 5, 1, time.Second); err == nil {
		t.Error("VLANFrames on a closed namespace succeeded")
	}
}

// match accepts a frame whose tag comes back in PACKET_AUXDATA or in the data,
// ignores strangers and reports every alteration of its own frames.
func TestVLANMatch(t *testing.T) {
	spec := vlanSpec{
		dst:    net.HardwareAddr{2, 0, 0, 0, 0, 2},
		src:    net.HardwareAddr{2, 0, 0, 0, 0, 1},
		vid:    300,
		count:  10,
		marker: [vlanMarkerLen]byte{1, 2, 3, 4, 5, 6, 7, 8},
	}
	sent := spec.frame(7)
	// untag is what the receiving kernel does: the tag into metadata.
	untag := func(f []byte) ([]byte, *unix.TpacketAuxdata) {
		aux := &unix.TpacketAuxdata{
			Status:    unix.TP_STATUS_VLAN_VALID | unix.TP_STATUS_VLAN_TPID_VALID,
			Vlan_tpid: binary.BigEndian.Uint16(f[12:]),
			Vlan_tci:  binary.BigEndian.Uint16(f[14:]),
		}
		return append(slices.Clone(f[:12]), f[16:]...), aux
	}
	edit := func(i int, v byte) []byte {
		f := slices.Clone(sent)
		f[i] = v
		return f
	}
	foreign := slices.Clone(sent)
	foreign[vlanHdrLen] ^= 0xff // another call's marker

	for _, tc := range []struct {
		name    string
		data    []byte
		aux     *unix.TpacketAuxdata
		ours    bool
		how     tagSource
		wantErr string
	}{
		{name: "auxdata", ours: true, how: tagAuxdata},
		{name: "in data", data: sent, ours: true, how: tagInData},
		{name: "in data, empty auxdata", data: sent, aux: &unix.TpacketAuxdata{}, ours: true, how: tagInData},
		{name: "tag lost", data: append(slices.Clone(sent[:12]), sent[16:]...), aux: &unix.TpacketAuxdata{}, ours: true, wantErr: "without a VLAN tag"},
		{name: "other VLAN", data: edit(15, 45), ours: true, how: tagInData, wantErr: "VLAN id 301"},
		{name: "802.1ad", data: edit(13, 0xa8), ours: true, wantErr: "without a VLAN tag"},
		{name: "payload changed", data: edit(len(sent)-1, 0), ours: true, how: tagInData, wantErr: "byte 81"},
		{name: "address changed", data: edit(0, 9), ours: true, how: tagInData, wantErr: "byte 0"},
		{name: "too long", data: append(slices.Clone(sent), 0), ours: true, how: tagInData, wantErr: "83 bytes"},
		{name: "bad sequence", data: edit(vlanHdrLen+vlanMarkerLen, 1), ours: true, wantErr: "out of range"},
		{name: "foreign", data: foreign},
		{name: "short", data: sent[:20]},
	} {
		data, aux := tc.data, tc.aux
		if data == nil {
			data, aux = untag(sent)
		}
		ours, seq, how, err := spec.match(data, aux)
		if ours != tc.ours || how != tc.how || (err == nil) != (tc.wantErr == "") ||
			err != nil && !strings.Contains(err.Error(), tc.wantErr) || ours && tc.wantErr == "" && seq != 7 {
			t.Errorf("%s: ours %v seq %d how %v err %v; want ours %v seq 7 how %v err containing %q",
				tc.name, ours, seq, how, err, tc.ours, tc.how, tc.wantErr)
		}
	}
	// A TPID other than 802.1Q reported through auxdata is a change too.
	data, aux := untag(sent)
	aux.Vlan_tpid = 0x88a8
	if _, _, _, err := spec.match(data, aux); err == nil || !strings.Contains(err.Error(), "TPID 0x88a8") {
		t.Errorf("802.1ad in auxdata: %v, want a TPID error", err)
	}
	// Older kernels set no TPID; 802.1Q is assumed.
	aux.Status, aux.Vlan_tpid = unix.TP_STATUS_VLAN_VALID, 0
	if _, _, how, err := spec.match(data, aux); err != nil || how != tagAuxdata {
		t.Errorf("auxdata without TPID: %v %v, want a match", how, err)
	}
}

func frameSizes(from, to int) []int {
	s := make([]int, 0, to-from+1)
	for n := from; n <= to; n++ {
		s = append(s, n)
	}
	return s
}

// sendFramesOK sends sizes from src to dst and fails t unless all arrive
// unchanged.
func sendFramesOK(t *testing.T, src, dst *NS, sizes []int) {
	t.Helper()
	start := time.Now()
	res, err := SendFrames(src, dst, sizes, 20*time.Second)
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("SendFrames %s -> %s: %v (%+v)", src.Name, dst.Name, err, res)
	}
	n := len(sizes)
	if res.Sent != n || res.Matched != n || len(res.Missing) != 0 || len(res.Mismatch) != 0 {
		t.Fatalf("SendFrames %s -> %s: %+v; want all %d sent and matched", src.Name, dst.Name, res, n)
	}
	t.Logf("SendFrames %s -> %s: %d frames (%d..%d bytes) matched in %v",
		src.Name, dst.Name, n, slices.Min(sizes), slices.Max(sizes), elapsed.Round(time.Millisecond))
}

// Frames of every standard size, and jumbo frames once the MTU allows them,
// cross a bridge byte for byte, in both directions; without a forwarder none
// arrives; a frame too large for the sending link is an error, not a loss.
func TestSendFramesBridged(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	all := frameSizes(60, 1514) // 1455 sizes

	// Not joined: nothing arrives, every size is missing (the first 50 of
	// a longer list).
	few := []int{60, 61, 64, 128, 512, 1000, 1513, 1514}
	for _, tc := range []struct {
		sizes, missing []int
	}{{few, few}, {all, all[:50]}} {
		start := time.Now()
		res, err := SendFrames(p.A, p.B, tc.sizes, 5*time.Second)
		t.Logf("unjoined, %d sizes: sent %d, matched %d, %d listed missing, in %v",
			len(tc.sizes), res.Sent, res.Matched, len(res.Missing), time.Since(start).Round(time.Millisecond))
		if err != nil || res.Sent != len(tc.sizes) || res.Matched != 0 || !slices.Equal(res.Missing, tc.missing) || len(res.Mismatch) != 0 {
			t.Fatalf("SendFrames across unjoined pair: %+v, err %v; want all %d sent, none matched, missing %v",
				res, err, len(tc.sizes), tc.missing)
		}
	}

	bridge(t, p)
	sendFramesOK(t, p.A, p.B, all)
	sendFramesOK(t, p.B, p.A, all)

	// 1515 bytes need an MTU of 1501: refused before anything is sent.
	res, err := SendFrames(p.A, p.B, []int{60, 1515, 1000}, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "1515-byte") || !strings.Contains(err.Error(), "MTU 1500") || res.Sent != 0 {
		t.Fatalf("SendFrames of 1515 bytes at MTU 1500: %+v, err %v; want an error naming the size and the MTU", res, err)
	}
	t.Logf("expected error: %v", err)

	if err := p.SetMTU(9000); err != nil {
		t.Fatal(err)
	}
	br, err := netlink.LinkByName(bridgeName(p))
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMTU(br, 9000); err != nil {
		t.Fatalf("set MTU 9000 on bridge %s: %v", br.Attrs().Name, err)
	}
	if br, err = netlink.LinkByName(bridgeName(p)); err != nil || br.Attrs().MTU != 9000 {
		t.Fatalf("bridge %s after setting MTU 9000: %v, err %v", bridgeName(p), br, err)
	}
	jumbo := []int{1515, 2048, 4096, 4097, 8192, 9014}
	sendFramesOK(t, p.A, p.B, jumbo)
	sendFramesOK(t, p.B, p.A, jumbo)
	if _, err := SendFrames(p.A, p.B, []int{9015}, 5*time.Second); err == nil || !strings.Contains(err.Error(), "9015-byte") || !strings.Contains(err.Error(), "MTU 9000") {
		t.Fatalf("SendFrames of 9015 bytes at MTU 9000: %v, want an error naming the size and the MTU", err)
	}
}

func TestSendFramesArgs(t *testing.T) {
	ns := &NS{Name: "unused", fd: -1}
	for _, sizes := range [][]int{{59}, {60, 65536}, {-1}} {
		if _, err := SendFrames(ns, ns, sizes, time.Second); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("SendFrames(%v): %v, want a size error", sizes, err)
		}
	}
	if _, err := SendFrames(ns, ns, []int{60}, time.Second); err == nil {
		t.Error("SendFrames on a closed namespace succeeded")
	}
}

// check recognizes this call's frames, ignores strangers and describes what
// changed in an altered frame: size and first differing offset.
func TestRawSpecCheck(t *testing.T) {
	spec := rawSpec{
		dst:    net.HardwareAddr{2, 0, 0, 0, 0, 2},
		src:    net.HardwareAddr{2, 0, 0, 0, 0, 1},
		sizes:  []int{60, 1514, 9014, 65535},
		marker: [markerLen]byte{1, 2, 3, 4, 5, 6, 7, 8},
	}
	for seq, n := range spec.sizes {
		f := spec.appendFrame(nil, seq)
		if len(f) != n || etherType(f) != localEtherType || !slices.Equal(f[:12], append(slices.Clone(spec.dst), spec.src...)) {
			t.Fatalf("frame %d: %d bytes, EtherType %#04x, header % x; want %d bytes", seq, len(f), etherType(f), f[:14], n)
		}
	}
	// The fill is deterministic, and differs between sequence numbers.
	sent := spec.appendFrame(nil, 1)
	if again := spec.appendFrame(make([]byte, 0, 10), 1); !slices.Equal(sent, again) {
		t.Fatal("appendFrame is not deterministic")
	}
	if other := spec.appendFrame(nil, 2); slices.Equal(sent[26:100], other[26:100]) {
		t.Fatal("frames 1 and 2 have the same fill")
	}
	edit := func(i int, v byte) []byte {
		f := slices.Clone(sent)
		f[i] = v
		return f
	}
	foreign := slices.Clone(sent)
	foreign[ethHdrLen] ^= 0xff

	for _, tc := range []struct {
		name    string
		data    []byte
		aux     *unix.TpacketAuxdata
		ours    bool
		seq     int
		wantErr string
	}{
		{name: "intact", data: sent, ours: true, seq: 1},
		{name: "intact, empty auxdata", data: sent, aux: &unix.TpacketAuxdata{}, ours: true, seq: 1},
		{name: "last byte", data: edit(1513, sent[1513]^1), ours: true, seq: 1, wantErr: "frame 1 (1514 bytes): first difference at offset 1513"},
		{name: "address", data: edit(3, 9), ours: true, seq: 1, wantErr: "offset 3"},
		{name: "longer", data: append(slices.Clone(sent), 0), ours: true, seq: 1, wantErr: "1515 bytes arrived, identical up to offset 1514"},
		{name: "shorter", data: sent[:1000], ours: true, seq: 1, wantErr: "1000 bytes arrived, identical up to offset 1000"},
		{name: "tag in metadata", data: sent, aux: &unix.TpacketAuxdata{Status: unix.TP_STATUS_VLAN_VALID, Vlan_tci: 7}, ours: true, seq: 1, wantErr: "VLAN id 7"},
		{name: "bad sequence", data: edit(ethHdrLen+markerLen, 1), ours: true, seq: -1, wantErr: "out of range"},
		{name: "truncated", data: sent[:ethHdrLen+markerLen+2], ours: true, seq: -1, wantErr: "truncated"},
		{name: "foreign", data: foreign, seq: -1},
		{name: "short", data: sent[:ethHdrLen+4], seq: -1},
	} {
		ours, seq, _, err := spec.check(tc.data, tc.aux, nil)
		if ours != tc.ours || seq != tc.seq || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: ours %v seq %d err %v; want ours %v seq %d err containing %q", tc.name, ours, seq, err, tc.ours, tc.seq, tc.wantErr)
		}
	}
}

// TestRPSOption: both namespace-side ends steer every receive queue to
// the CPUs asked for.
func TestRPSOption(t *testing.T) {
	p := newTestPair(t, Options{Queues: 2, RPSCPUs: []int{0}})
	for _, ns := range []*NS{p.A, p.B} {
		got, err := rps.Get(ns.Path(), peerName)
		if err != nil {
			t.Fatal(err)
		}
		if want := [][]int{{0}, {0}}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("%s: RPS CPUs per queue %v, want %v", ns.Name, got, want)
		}
	}
}
