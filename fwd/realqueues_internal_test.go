package fwd

import (
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestRealQueuesByName: a link without ethtool channels (a macvlan has
// none) has its queues counted in sysfs under its own name, a name and
// not a pattern: q* is not q0 too, and a[b] is not ab.
func TestRealQueuesByName(t *testing.T) {
	topo.RequireRoot(t)
	ns, err := topo.NewNS("realq")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	links := []struct {
		name   string
		rx, tx int
	}{{"q*", 4, 3}, {"q0", 1, 1}, {"ab", 1, 1}, {"a[b]", 2, 2}}
	if out, err := exec.Command("ip", "-n", ns.Name, "link", "add", "v0", "type", "veth", "peer", "name", "v1").CombinedOutput(); err != nil {
		t.Fatalf("add veth v0: %v: %s", err, out)
	}
	for _, l := range links {
		if out, err := exec.Command("ip", "-n", ns.Name, "link", "add", "link", "v0", "name", l.name,
			"numrxqueues", strconv.Itoa(l.rx), "numtxqueues", strconv.Itoa(l.tx), "type", "macvlan").CombinedOutput(); err != nil {
			t.Fatalf("add macvlan %s: %v: %s", l.name, err, out)
		}
	}
	type counts struct{ rx, tx int }
	got := make(chan []counts, 1)
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves with its namespaces changed
		// and is discarded. sysfs shows the devices of the namespace it
		// is mounted in: one of its own, as `ip netns exec` mounts it.
		runtime.LockOSThread()
		fd, err := unix.Open(ns.Path(), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		for _, step := range []struct {
			what string
			err  func() error
		}{
			{"setns", func() error { return unix.Setns(fd, unix.CLONE_NEWNET) }},
			{"unshare", func() error { return unix.Unshare(unix.CLONE_NEWNS) }},
			{"private mounts", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
			{"mount sysfs", func() error { return unix.Mount("sysfs", "/sys", "sysfs", 0, "") }},
		} {
			if err := step.err(); err != nil {
				errc <- fmt.Errorf("%s: %w", step.what, err)
				return
			}
		}
		var c []counts
		for _, l := range links {
			rx, tx := realQueues(l.name)
			c = append(c, counts{rx, tx})
		}
		got <- c
	}()
	select {
	case err := <-errc:
		t.Fatal(err)
	case c := <-got:
		for i, l := range links {
			if c[i] != (counts{l.rx, l.tx}) {
				t.Errorf("realQueues(%q) = %d rx, %d tx; want %d, %d", l.name, c[i].rx, c[i].tx, l.rx, l.tx)
			}
		}
	}
}
