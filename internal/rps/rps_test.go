package rps_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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

// TestSetNamesAreNotPatterns: an interface name is a name, not a pattern:
// in a namespace with n0 and n1 (a veth pair, two rx queues each) and
// interfaces really named n*, a[b] and x[ (the kernel takes them), Set on
// each of those sets its masks alone; Set on a name no interface has
// (n?, q*, which a pattern would match or not) fails as no such device,
// and on a name the kernel would never give (a/b, .., a space, 16 bytes)
// fails before it is used in a path; neither changes any mask.
func TestSetNamesAreNotPatterns(t *testing.T) {
	topo.RequireRoot(t)
	ns, err := topo.NewNS("rpsnames")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	// Every rx queue of the namespace, by device.
	queues := map[string]int{"n0": 2, "n1": 2, "n*": 2, "p0": 1, "a[b]": 1, "p1": 1, "x[": 1, "p2": 1}
	for _, pair := range [][2]string{{"n0", "n1"}, {"n*", "p0"}, {"a[b]", "p1"}, {"x[", "p2"}} {
		q := strconv.Itoa(queues[pair[0]])
		if out, err := exec.Command("ip", "-n", ns.Name, "link", "add", "name", pair[0], "numrxqueues", q, "type", "veth",
			"peer", "name", pair[1], "numrxqueues", q).CombinedOutput(); err != nil {
			t.Fatalf("add veth %s/%s: %v: %s", pair[0], pair[1], err, out)
		}
	}
	sysfs := func(dev string, q int) string {
		return filepath.Join("/sys/class/net", dev, "queues", "rx-"+strconv.Itoa(q), "rps_cpus")
	}
	// masks reads every queue's mask as `ip netns exec` shows it (no
	// shell: the names are not expanded).
	masks := func(t *testing.T) map[string][]int {
		t.Helper()
		got := map[string][]int{}
		for dev, n := range queues {
			for q := range n {
				out, err := exec.Command("ip", "netns", "exec", ns.Name, "cat", sysfs(dev, q)).Output()
				if err != nil {
					t.Fatalf("read %s: %v", sysfs(dev, q), err)
				}
				cpus, err := rps.ParseMask(string(out))
				if err != nil {
					t.Fatal(err)
				}
				got[dev+"/rx-"+strconv.Itoa(q)] = cpus
			}
		}
		return got
	}
	reset := func(t *testing.T) {
		t.Helper()
		for dev, n := range queues {
			for q := range n {
				c := exec.Command("ip", "netns", "exec", ns.Name, "sh", "-c", `echo 0 > "$1"`, "sh", sysfs(dev, q))
				if out, err := c.CombinedOutput(); err != nil {
					t.Fatalf("reset %s: %v: %s", sysfs(dev, q), err, out)
				}
			}
		}
	}
	for _, tt := range []struct {
		ifname string
		err    string // "": Set sets ifname's masks, and only those
	}{
		{"n*", ""},
		{"a[b]", ""},
		{"x[", ""},
		{"n0", ""},
		{"n?", "no such network device"},
		{"q*", "no such network device"},
		{"a/b", "not an interface name"},
		{"n0/../n1", "not an interface name"},
		{"..", "not an interface name"},
		{"n 0", "not an interface name"},
		{"", "not an interface name"},
		{"abcdefghijklmnop", "longer than 15 bytes"},
	} {
		t.Run(tt.ifname, func(t *testing.T) {
			reset(t)
			err := rps.Set(ns.Path(), tt.ifname, []int{0})
			if tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("Set(%q): %v; want an error saying %q", tt.ifname, err, tt.err)
			}
			if tt.err == "" && err != nil {
				t.Errorf("Set(%q): %v", tt.ifname, err)
			}
			want := map[string][]int{}
			for dev, n := range queues {
				for q := range n {
					if tt.err == "" && dev == tt.ifname {
						want[dev+"/rx-"+strconv.Itoa(q)] = []int{0}
					} else {
						want[dev+"/rx-"+strconv.Itoa(q)] = nil
					}
				}
			}
			if got := masks(t); !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("after Set(%q): masks %v; want %v", tt.ifname, got, want)
			}
			if tt.err != "" {
				return
			}
			got, err := rps.Get(ns.Path(), tt.ifname)
			if want := slices.Repeat([][]int{{0}}, queues[tt.ifname]); err != nil || !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("Get(%q): %v, %v; want %v", tt.ifname, got, err, want)
			}
		})
	}
}
