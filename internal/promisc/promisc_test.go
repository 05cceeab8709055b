package promisc_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/promisc"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// newVeth creates an up veth pair in the root namespace with names no
// other run uses, deleted when the test ends.
func newVeth(t *testing.T) (a, b netlink.Link) {
	t.Helper()
	topo.RequireRoot(t)
	var r [4]byte
	rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "pm0" + id
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: "pm1" + id}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatalf("create veth: %v", err)
	}
	t.Cleanup(func() {
		if err := netlink.LinkDel(veth); err != nil {
			t.Errorf("delete veth %s: %v", attrs.Name, err)
		}
	})
	for _, n := range []string{"pm0" + id, "pm1" + id} {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		if a == nil {
			a = l
		} else {
			b = l
		}
	}
	return a, b
}

// TestJoinCountsUntilClose: each membership raises the promiscuity count
// by one, Close lowers it, a second Close does nothing.
func TestJoinCountsUntilClose(t *testing.T) {
	a, _ := newVeth(t)
	if n := topo.Promiscuity(t, a.Attrs().Name); n != 0 {
		t.Fatalf("new veth: promiscuity %d, want 0", n)
	}
	m1, err := promisc.Join(a.Attrs().Name, a.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := promisc.Join(a.Attrs().Name, a.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		do   func() error
		want int
	}{
		{func() error { return nil }, 2},
		{m1.Close, 1},
		{m1.Close, 1}, // again: nothing
		{m2.Close, 0},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if n := topo.Promiscuity(t, a.Attrs().Name); n != step.want {
			t.Errorf("step %d: promiscuity %d, want %d", i, n, step.want)
		}
	}
}

// TestJoinUnknownLink: a bad ifindex is an error naming the link.
func TestJoinUnknownLink(t *testing.T) {
	topo.RequireRoot(t)
	_, err := promisc.Join("nosuchlink", 1<<30)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("nosuchlink")) {
		t.Fatalf("Join of a missing link: %v, want an error naming it", err)
	}
}

// TestMembershipReceivesNothing: frames that reach the link (a control
// ETH_P_ALL socket sees them) are not queued to the membership's socket,
// whose protocol is 0.
func TestMembershipReceivesNothing(t *testing.T) {
	a, b := newVeth(t)
	m, err := promisc.Join(a.Attrs().Name, a.Attrs().Index)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const ethPAll = 0x0300 // htons(ETH_P_ALL)
	ctl, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, ethPAll)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ctl)
	if err := unix.Bind(ctl, &unix.SockaddrLinklayer{Protocol: ethPAll, Ifindex: a.Attrs().Index}); err != nil {
		t.Fatal(err)
	}
	tx, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(tx)
	// A unicast frame to a MAC that is not a's, with a marker.
	frame := make([]byte, 60)
	copy(frame, []byte{0x02, 0, 0, 0, 0, 0x42})
	copy(frame[6:], b.Attrs().HardwareAddr)
	frame[12], frame[13] = 0x88, 0xb5 // local experimental EtherType
	copy(frame[14:], "promisc-test")
	to := &unix.SockaddrLinklayer{Ifindex: b.Attrs().Index, Halen: 6}
	seen := 0
	buf := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	for seen < 10 && time.Now().Before(deadline) {
		if err := unix.Sendto(tx, frame, 0, to); err != nil {
			t.Fatalf("send on %s: %v", b.Attrs().Name, err)
		}
		pfd := []unix.PollFd{{Fd: int32(ctl), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, 100); n == 0 {
			continue
		}
		n, _, err := unix.Recvfrom(ctl, buf, unix.MSG_DONTWAIT)
		if err == nil && bytes.Contains(buf[:n], []byte("promisc-test")) {
			seen++
		}
	}
	if seen < 10 {
		t.Fatalf("the control socket saw %d of our frames on %s within 5s; want 10", seen, a.Attrs().Name)
	}
	n, _, err := unix.Recvfrom(m.FD(), buf, unix.MSG_DONTWAIT)
	if !errors.Is(err, unix.EAGAIN) {
		t.Fatalf("membership socket: recvfrom gave %d bytes, err %v; want EAGAIN (it must receive nothing)", n, err)
	}
	t.Logf("%d frames reached %s; the membership socket received none", seen, a.Attrs().Name)
}
