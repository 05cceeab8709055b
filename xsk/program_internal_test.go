package xsk

import (
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
	if p.prog, err = loadRedirect(xsks, p.passed, 0); err != nil {
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
