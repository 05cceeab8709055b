package rps_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/cpulist"
	"github.com/xdpfwd/xdpfwd/internal/rps"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

func TestMask(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		want string
	}{
		{nil, "0"},
		{[]int{0}, "00000001"},
		{[]int{1, 0}, "00000003"},
		{[]int{31}, "80000000"},
		{[]int{32}, "00000001,00000000"},
		{[]int{0, 4, 65}, "00000002,00000000,00000011"},
	} {
		got, err := rps.Mask(tc.cpus)
		if err != nil || got != tc.want {
			t.Errorf("Mask(%v) = %q, %v; want %q", tc.cpus, got, err, tc.want)
			continue
		}
		back, err := rps.ParseMask(got + "\n")
		want := slices.Sorted(slices.Values(tc.cpus))
		if err != nil || !slices.Equal(back, want) {
			t.Errorf("ParseMask(%q) = %v, %v; want %v", got, back, err, want)
		}
	}
	for _, bad := range [][]int{{-1}, {cpulist.MaxCPU + 1}} {
		if _, err := rps.Mask(bad); err == nil {
			t.Errorf("Mask(%v): no error", bad)
		}
	}
	if _, err := rps.ParseMask("0,zz"); err == nil {
		t.Error("ParseMask(0,zz): no error")
	}
}

// TestSetInNamespace sets the mask of a namespace's veth end with two
// receive queues and reads it back as `ip netns exec` shows it; the
// host's sysfs is left as it was.
func TestSetInNamespace(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{Queues: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	path := p.A.Path()

	for _, cpus := range [][]int{{0}, {0, 1}, nil} {
		if err := rps.Set(path, p.PeerA, cpus); err != nil {
			t.Fatal(err)
		}
		got, err := rps.Get(path, p.PeerA)
		if err != nil {
			t.Fatal(err)
		}
		if want := [][]int{cpus, cpus}; !slices.EqualFunc(got, want, slices.Equal) {
			t.Errorf("after Set(%v): queues' CPUs %v, want %v", cpus, got, want)
		}
		mask, _ := rps.Mask(cpus)
		for _, q := range []string{"rx-0", "rx-1"} {
			out, err := exec.Command("ip", "netns", "exec", p.A.Name, "cat",
				filepath.Join("/sys/class/net", p.PeerA, "queues", q, "rps_cpus")).Output()
			if err != nil {
				t.Fatalf("ip netns exec: %v", err)
			}
			if inSysfs, _ := rps.ParseMask(string(out)); !slices.Equal(inSysfs, cpus) && !(len(cpus) == 0 && len(inSysfs) == 0) {
				t.Errorf("%s %s: sysfs shows %q, want %s", p.PeerA, q, strings.TrimSpace(string(out)), mask)
			}
		}
	}
	// The host's /sys still shows the host's devices: the sysfs mount was
	// the discarded thread's own.
	if _, err := os.Stat(filepath.Join("/sys/class/net", p.LinkA)); err != nil {
		t.Errorf("host sysfs: %v", err)
	}
	if err := rps.Set(path, "nosuchdev0", []int{0}); err == nil {
		t.Error("Set on a missing device: no error")
	}
	if err := rps.Set(filepath.Join(t.TempDir(), "gone"), p.PeerA, []int{0}); err == nil {
		t.Error("Set in a missing namespace: no error")
	}
}
