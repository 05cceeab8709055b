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
	} {
		p, err := load()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		p.Close()
	}
}
