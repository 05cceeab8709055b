package ethtool_test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// randName returns a root-namespace link name "et<n><8 hex digits>" that no
// other test run uses.
func randName(t *testing.T, n int) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "et" + strconv.Itoa(n) + hex.EncodeToString(b[:])
}

// newVeth creates a veth pair with the given queue count in the root
// namespace, left down so it carries no traffic, and deletes it (both ends)
// when the test ends. It returns the names of the two ends.
func newVeth(t *testing.T, queues int) (string, string) {
	t.Helper()
	a, b := randName(t, 0), randName(t, 1)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = a
	attrs.NumTxQueues = queues
	attrs.NumRxQueues = queues
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: b}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("create veth %s/%s: %v", a, b, err)
	}
	t.Cleanup(func() {
		// LinkAdd recorded the new link's index; deleting by index leaves
		// alone a link that might take the name later.
		if err := netlink.LinkDel(veth); err != nil {
			t.Errorf("delete veth %s: %v", a, err)
		}
		for _, name := range []string{a, b} {
			var nf netlink.LinkNotFoundError
			if _, err := netlink.LinkByName(name); !errors.As(err, &nf) {
				t.Errorf("link %s still there after delete (lookup: %v)", name, err)
			}
		}
	})
	if veth.Attrs().Index == 0 {
		t.Fatalf("veth %s: no index after creation", a)
	}
	return a, b
}

func TestTxChecksumRoundTrip(t *testing.T) {
	topo.RequireRoot(t)
	a, b := newVeth(t, 1)
	check := func(name string, want bool) {
		t.Helper()
		got, err := ethtool.TxChecksum(name)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("TxChecksum(%s) = %v, want %v", name, got, want)
		}
	}
	check(a, true) // veth default
	for _, on := range []bool{false, false, true, false} {
		if err := ethtool.SetTxChecksum(a, on); err != nil {
			t.Fatalf("SetTxChecksum(%s, %v): %v", a, on, err)
		}
		check(a, on)
		check(b, true) // per device: the peer is untouched
	}
}

func TestVLANOffloadRoundTrip(t *testing.T) {
	topo.RequireRoot(t)
	a, b := newVeth(t, 1)
	check := func(name string, want bool) {
		t.Helper()
		tx, rx, err := ethtool.VLANOffload(name)
		if err != nil {
			t.Fatal(err)
		}
		if tx != want || rx != want {
			t.Fatalf("VLANOffload(%s) = tx %v rx %v, want both %v", name, tx, rx, want)
		}
	}
	check(a, true) // veth default
	before, err := ethtool.Flags(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, false, true, true, false} {
		if err := ethtool.SetVLANOffload(a, on); err != nil {
			t.Fatalf("SetVLANOffload(%s, %v): %v", a, on, err)
		}
		check(a, on)
		check(b, true)
		flags, err := ethtool.Flags(a)
		if err != nil {
			t.Fatal(err)
		}
		if flags&^ethtool.FlagsVLAN != before&^ethtool.FlagsVLAN {
			t.Fatalf("SetVLANOffload(%s, %v) changed other flags: %#x -> %#x", a, on, before, flags)
		}
	}
	// TX checksum is a separate feature and stays as it was.
	if on, err := ethtool.TxChecksum(a); err != nil || !on {
		t.Fatalf("TxChecksum(%s) after VLAN changes = %v, %v; want true", a, on, err)
	}
}

func TestGetChannels(t *testing.T) {
	topo.RequireRoot(t)
	const queues = 2
	a, b := newVeth(t, queues)
	for _, name := range []string{a, b} {
		c, err := ethtool.GetChannels(name)
		if err != nil {
			t.Fatalf("GetChannels(%s): %v", name, err)
		}
		t.Logf("%s: %+v", name, c)
		if c.RX+c.Combined < 1 || c.TX+c.Combined < 1 {
			t.Errorf("%s: %+v: no RX or TX queue in use", name, c)
		}
		if c.MaxRX+c.MaxCombined < queues || c.MaxTX+c.MaxCombined < queues {
			t.Errorf("%s: %+v: maxima below the %d queues it was created with", name, c, queues)
		}
		if c.RX > c.MaxRX || c.TX > c.MaxTX || c.Combined > c.MaxCombined || c.Other > c.MaxOther {
			t.Errorf("%s: %+v: a current count exceeds its maximum", name, c)
		}
	}
}

// TestStats: a veth's driver statistics, as `ethtool -S` prints them:
// its peer's ifindex and, per RX queue, its XDP counters (0 with no
// program).
func TestStats(t *testing.T) {
	topo.RequireRoot(t)
	a, _ := newVeth(t, 2)
	st, err := ethtool.Stats(a)
	if err != nil {
		t.Fatalf("Stats(%s): %v", a, err)
	}
	for _, k := range []string{"peer_ifindex", "rx_queue_0_xdp_packets", "rx_queue_1_xdp_redirect"} {
		if _, ok := st[k]; !ok {
			t.Errorf("Stats(%s) has no %s: %v", a, k, st)
		}
	}
	if st["peer_ifindex"] == 0 || st["rx_queue_0_xdp_packets"] != 0 {
		t.Errorf("Stats(%s): peer_ifindex %d, rx_queue_0_xdp_packets %d; want a peer, no XDP packets", a, st["peer_ifindex"], st["rx_queue_0_xdp_packets"])
	}
	if _, err := ethtool.Stats(randName(t, 9)); !errors.Is(err, unix.ENODEV) {
		t.Errorf("Stats of a missing link: %v, want ENODEV", err)
	}
}

// TestGetRings: a veth has no descriptor ring to report (no
// get_ringparam): the error says so, which callers take as "no hardware
// ring". NICs report theirs in internal/vmtest (igb, virtio-net).
func TestGetRings(t *testing.T) {
	topo.RequireRoot(t)
	a, _ := newVeth(t, 1)
	if r, err := ethtool.GetRings(a); !errors.Is(err, unix.EOPNOTSUPP) || !strings.Contains(fmt.Sprint(err), a) {
		t.Errorf("GetRings(%s) = %+v, %v; want EOPNOTSUPP naming the link", a, r, err)
	}
}

// A missing interface is ENODEV from every call. Looking a name up needs no
// privilege, so this runs without root too.
func TestMissingInterface(t *testing.T) {
	name := randName(t, 9)
	calls := map[string]func() error{
		"TxChecksum":     func() error { _, err := ethtool.TxChecksum(name); return err },
		"SetTxChecksum":  func() error { return ethtool.SetTxChecksum(name, false) },
		"VLANOffload":    func() error { _, _, err := ethtool.VLANOffload(name); return err },
		"SetVLANOffload": func() error { return ethtool.SetVLANOffload(name, false) },
		"GetChannels":    func() error { _, err := ethtool.GetChannels(name); return err },
		"GetRings":       func() error { _, err := ethtool.GetRings(name); return err },
	}
	for fn, call := range calls {
		err := call()
		if !errors.Is(err, unix.ENODEV) {
			t.Errorf("%s(%s) = %v, want ENODEV", fn, name, err)
			continue
		}
		if !strings.Contains(err.Error(), name) {
			t.Errorf("%s(%s): error %q does not name the interface", fn, name, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", unix.IFNAMSIZ)} {
		if _, err := ethtool.TxChecksum(bad); err == nil {
			t.Errorf("TxChecksum(%q) succeeded", bad)
		}
	}
}

// TestDriver: a veth says "veth"; a missing link is an error naming it.
func TestDriver(t *testing.T) {
	topo.RequireRoot(t)
	a, _ := newVeth(t, 1)
	if d, err := ethtool.Driver(a); err != nil || d != "veth" {
		t.Fatalf("Driver(%s) = %q, %v; want veth", a, d, err)
	}
	if _, err := ethtool.Driver("nosuchlink0"); err == nil || !strings.Contains(err.Error(), "nosuchlink0") {
		t.Fatalf("Driver(missing) = %v, want an error naming it", err)
	}
}
