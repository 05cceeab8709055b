package topo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
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
	name := "xf" + strings.TrimPrefix(p.Name, "xdpfwd-") + "br"
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
		if res.Sent != count || res.Received < count*99/100 {
			t.Fatalf("UDPBurst to %s: sent %d, received %d; want %d sent, >= 99%% received", addr, res.Sent, res.Received, count)
		}
	}

	// Offloads on the namespace-side ends must be off by default.
	for _, ns := range []*NS{p.A, p.B} {
		err := ns.Do(func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if on, err := txChecksum(fd, peerName); err != nil || on {
				t.Errorf("%s/%s: tx checksum offload on=%v err=%v, want off", ns.Name, peerName, on, err)
			}
			flags, err := ethtoolGet(fd, peerName, ethtoolGFLAGS)
			if err != nil || flags&(ethFlagTXVLAN|ethFlagRXVLAN) != 0 {
				t.Errorf("%s/%s: flags %#x err=%v, want VLAN offload off", ns.Name, peerName, flags, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
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

func TestSetTxChecksum(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{TxChecksum: true})
	err := p.A.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		check := func(want bool) {
			t.Helper()
			got, err := txChecksum(fd, p.PeerA)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("tx checksum offload on %s = %v, want %v", p.PeerA, got, want)
			}
		}
		check(true) // Options.TxChecksum keeps the veth default
		for _, on := range []bool{false, true, false} {
			if err := SetTxChecksum(p.PeerA, on); err != nil {
				t.Fatal(err)
			}
			check(on)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := SetTxChecksum("xfnonexistent0", false); !errors.Is(err, unix.ENODEV) {
		t.Errorf("SetTxChecksum on missing link: %v, want ENODEV", err)
	}
	if err := DisableOffloads(p.B, p.PeerB); err != nil {
		t.Fatalf("DisableOffloads: %v", err)
	}
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
