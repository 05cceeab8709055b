package xdpprog

import (
	"net"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestProgramsLoad: the kernel's verifier accepts every program perf
// assembles.
func TestProgramsLoad(t *testing.T) {
	topo.RequireRoot(t)
	devmap, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.DevMap, KeySize: 4, ValueSize: 4, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer devmap.Close()
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer counts.Close()
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	for name, load := range map[string]func() (*ebpf.Program, error){
		"drop":     func() (*ebpf.Program, error) { return LoadAction("perf_drop", Drop) },
		"pass":     func() (*ebpf.Program, error) { return LoadAction("perf_pass", Pass) },
		"redirect": func() (*ebpf.Program, error) { return LoadRedirect(devmap, 1) },
		"macswap":  LoadMACSwap,
		"echo":     func() (*ebpf.Program, error) { return LoadEchoCounter(counts, mac, mac) },
		"udp sink": func() (*ebpf.Program, error) { return LoadUDPSink(counts, 0) },
	} {
		p, err := load()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		p.Close()
	}
}

// TestUDPSink: the sink counts and drops IPv4 UDP in its slot, and passes
// ARP, ICMP and a frame too short to tell.
func TestUDPSink(t *testing.T) {
	topo.RequireRoot(t)
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer counts.Close()
	prog, err := LoadUDPSink(counts, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	frame := func(etherType uint16, proto byte) []byte {
		f := make([]byte, 64)
		f[12], f[13] = byte(etherType>>8), byte(etherType)
		f[14] = 0x45
		f[23] = proto
		return f
	}
	for _, c := range []struct {
		name  string
		frame []byte
		want  uint32
	}{
		{"IPv4 UDP", frame(0x0800, 17), Drop},
		{"IPv4 ICMP", frame(0x0800, 1), Pass},
		{"ARP", frame(0x0806, 17), Pass},
		{"IPv6", frame(0x86dd, 17), Pass},
		{"short", frame(0x0800, 17)[:20], Pass},
	} {
		ret, err := prog.Run(&ebpf.RunOptions{Data: c.frame})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if ret != c.want {
			t.Errorf("%s: action %d, want %d", c.name, ret, c.want)
		}
	}
	for slot, want := range []uint64{0, 0, 1} {
		var per []uint64
		if err := counts.Lookup(uint32(slot), &per); err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		if n != want {
			t.Errorf("slot %d counted %d, want %d", slot, n, want)
		}
	}
}
