package xsk

import (
	"golang.org/x/sys/unix"

	"testing"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// loadUnattached builds a Program with its maps and the plain redirect
// program, attached nowhere, for BPF_PROG_TEST_RUN.
func loadUnattached(t *testing.T) *Program {
	t.Helper()
	topo.RequireRoot(t)
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := &Program{ifname: "test", xsks: xsks}
	t.Cleanup(func() { p.Close() })
	if p.passed, err = newPassedMap(); err != nil {
		t.Fatal(err)
	}
	// Several queues, as links have: the program indexes the stamps by
	// queue, which the verifier must accept.
	if p.stamps, err = newLastStamps(4); err != nil {
		t.Fatal(err)
	}
	if p.prog, err = loadRedirect(xsks, p.passed, p.stamps, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPassedCounts: with no socket in the XSKMAP every run passes the frame
// to the stack, and Passed rises by exactly the number of runs.
func TestPassedCounts(t *testing.T) {
	p := loadUnattached(t)
	frame := make([]byte, 64)
	copy(frame, []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x88, 0xb5})
	if n, err := p.Passed(); err != nil || n != 0 {
		t.Fatalf("Passed before any run: %d, %v; want 0", n, err)
	}
	var want uint64
	for _, repeat := range []uint32{1, 7, 1000} {
		ret, err := p.prog.Run(&ebpf.RunOptions{Data: frame, Repeat: repeat})
		if err != nil {
			t.Fatalf("test run ×%d: %v", repeat, err)
		}
		if ret != xdpPass {
			t.Fatalf("test run ×%d returned action %d, want XDP_PASS (%d)", repeat, ret, xdpPass)
		}
		want += uint64(repeat)
		if n, err := p.Passed(); err != nil || n != want {
			t.Fatalf("after %d runs Passed = %d, %v; want %d", want, n, err, want)
		}
	}
	p.Close()
	if _, err := p.Passed(); err == nil {
		t.Error("Passed on a closed program succeeded")
	}
}

// TestLastStampFollowsRuns: every run that stamps a packet records the
// stamp as its queue's newest, readable through the mapped array without a
// syscall; runs come one after another, so the newest only grows.
func TestLastStampFollowsRuns(t *testing.T) {
	p := loadUnattached(t)
	if v := p.stamps.Load(0); v != 0 {
		t.Fatalf("newest stamp before any run: %d, want 0", v)
	}
	// Room for the metadata in front of the frame, as a driver leaves it.
	frame := make([]byte, 64)
	prev := int64(0)
	for i := range 3 {
		before := monoNS()
		if _, err := p.prog.Run(&ebpf.RunOptions{Data: frame}); err != nil {
			t.Fatal(err)
		}
		after := monoNS()
		v := p.stamps.Load(0)
		if v < before || v > after || v <= prev {
			t.Fatalf("run %d: newest stamp %d, want in [%d, %d] and above the last (%d)", i, v, before, after, prev)
		}
		prev = v
	}
	for q := 1; q < 5; q++ {
		if v := p.stamps.Load(q); v != 0 {
			t.Errorf("queue %d, which no run came in on, reads %d, want 0", q, v)
		}
	}
}

func monoNS() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// TestLoadVLANProgram: on veth, this kernel takes the device-bound program
// that calls the VLAN metadata kfunc, and Attach in native mode uses it.
func TestLoadVLANProgram(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := netlink.LinkByName(p.LinkA)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Attach(p.LinkA, l.Attrs().Index, 1, XDPNative, false)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	if ok, err := prog.VLAN(); !ok {
		t.Fatalf("native program on veth does not recover VLAN tags: %v", err)
	}
	info, err := prog.prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("program %s, VLAN recovery on", info.Name)
	// Loopback has no XDP RX metadata at all.
	if ok, err := rxVLANMetadata(1); ok || err != nil {
		t.Errorf("rxVLANMetadata(lo) = %v, %v; want false, nil", ok, err)
	}
	if err := prog.Close(); err != nil {
		t.Fatal(err)
	}
	gen, err := Attach(p.LinkA, l.Attrs().Index, 1, XDPGeneric, false)
	if err != nil {
		t.Fatalf("generic: %v", err)
	}
	defer gen.Close()
	if ok, err := gen.VLAN(); ok || err == nil {
		t.Errorf("generic program: VLAN() = %v, %v; want false and a reason", ok, err)
	}
}
