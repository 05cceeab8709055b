package vmtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// Guest NIC names: the kernel names them in PCI order (net.ifnames=0).
const (
	NIC0 = "eth0" // tap A's
	NIC1 = "eth1" // tap B's
)

// LinkState is a guest link as `agent link` reports it.
type LinkState struct {
	XDPProgID   uint32 `json:"xdp_prog_id"`
	Promiscuity int    `json:"promiscuity"`
	Up          bool   `json:"up"`
	Carrier     bool   `json:"carrier"`
	MTU         int    `json:"mtu"`
}

// Link returns the state of the guest's link name.
func (vm *VM) Link(t testing.TB, name string) LinkState {
	t.Helper()
	var s LinkState
	out := vm.Run(t, "agent link "+name, 10*time.Second)
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("agent link %s: %q: %v", name, out, err)
	}
	return s
}

// RXQueues is the RX queues link name has in use (the kernel's
// real_num_rx_queues, as /sys/class/net/NAME/queues shows).
func (vm *VM) RXQueues(t testing.TB, name string) int {
	t.Helper()
	out := vm.Run(t, "ls -d /sys/class/net/"+name+"/queues/rx-* | wc -l", 10*time.Second)
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("rx queues of %s: %q", name, out)
	}
	return n
}

// SetLinks brings both guest NICs up with mtu and waits (30 s at most)
// for their carrier.
func (vm *VM) SetLinks(t testing.TB, mtu int) {
	t.Helper()
	vm.Run(t, fmt.Sprintf("for l in %s %s; do ip link set $l mtu %d up || exit 1; done\n", NIC0, NIC1, mtu)+waitCarrier, 40*time.Second)
}

// WaitCarrier waits (30 s at most) until both guest NICs have a carrier,
// as after the link reset some drivers do when XDP is attached.
func (vm *VM) WaitCarrier(t testing.TB) {
	t.Helper()
	vm.Run(t, waitCarrier, 40*time.Second)
}

// waitCarrier is the guest script that waits for both NICs' carrier.
var waitCarrier = fmt.Sprintf(`for i in $(seq 300); do
	[ "$(cat /sys/class/net/%[1]s/carrier)" = 1 ] && [ "$(cat /sys/class/net/%[2]s/carrier)" = 1 ] && exit 0
	sleep 0.1
done
echo "no carrier"; exit 1`, NIC0, NIC1)

// Daemon is an xdpfwd run in the guest.
type Daemon struct {
	vm   *VM
	PID  int
	name string // its files: /tmp/NAME.log and .json
	// Ready is the daemon's "forwarder ready" log line.
	Ready string
	gone  bool // stopped or killed
}

// MetricsAddr is where a Daemon serves its metrics inside the guest.
const MetricsAddr = "127.0.0.1:9425"

// StartXdpfwd starts `xdpfwd run ARGS` in the guest, with a summary file
// and metrics, and waits (90 s at most: TCG is slow) until it is ready.
// It fails t if the daemon exits first, with its log.
func (vm *VM) StartXdpfwd(t testing.TB, args ...string) *Daemon {
	t.Helper()
	d, rc, out := vm.TryXdpfwd(args...)
	if d == nil {
		t.Fatalf("guest: xdpfwd run %s: exit %d:\n%s", strings.Join(args, " "), rc, out)
	}
	// A scenario that fails half-way leaves no daemon to the next one.
	t.Cleanup(func() {
		if !d.gone {
			if t.Failed() {
				t.Logf("xdpfwd log:\n%s", d.Log(t))
			}
			d.Kill(t)
		}
	})
	return d
}

// TryXdpfwd starts `xdpfwd run ARGS` as StartXdpfwd does, but returns the
// exit code and output of a daemon that exits instead of becoming ready.
func (vm *VM) TryXdpfwd(args ...string) (*Daemon, int, string) {
	vm.daemons++
	name := fmt.Sprintf("xdpfwd%d", vm.daemons)
	script := fmt.Sprintf(`xdpfwd run %s --summary /tmp/%[2]s.json --metrics %[3]s --stats-interval 0 >/tmp/%[2]s.log 2>&1 &
pid=$!
for i in $(seq 900); do
	if grep -qs 'forwarder ready' /tmp/%[2]s.log; then echo "pid=$pid"; grep 'forwarder ready' /tmp/%[2]s.log; exit 0; fi
	if ! kill -0 $pid 2>/dev/null; then wait $pid; rc=$?; cat /tmp/%[2]s.log; exit $rc; fi
	sleep 0.1
done
cat /tmp/%[2]s.log; kill -9 $pid; exit 124`, strings.Join(args, " "), name, MetricsAddr)
	rc, out, err := vm.Exec(script, 100*time.Second)
	if err != nil {
		return nil, -1, err.Error()
	}
	if rc != 0 {
		return nil, rc, out
	}
	d := &Daemon{vm: vm, name: name}
	// The pid line need not be the first (output is stdout and stderr),
	// and a pid of 0 would make Stop and Kill signal the agent's group.
	_, after, _ := strings.Cut("\n"+out, "\npid=")
	first, rest, _ := strings.Cut(after, "\n")
	if d.PID, _ = strconv.Atoi(first); d.PID <= 0 {
		return nil, -1, "xdpfwd ready, but no pid in:\n" + out
	}
	d.Ready = strings.TrimSpace(rest)
	return d, 0, out
}

// TakeOver starts `xdpfwd run ARGS --takeover CTL` in the guest, which
// takes d's datapath over through d's control socket ctl, and waits
// (90 s at most) until it says it took over and d exited; it fails t
// otherwise, with both logs. d is gone then.
func (vm *VM) TakeOver(t testing.TB, d *Daemon, ctl string, args ...string) *Daemon {
	t.Helper()
	vm.daemons++
	name := fmt.Sprintf("xdpfwd%d", vm.daemons)
	script := fmt.Sprintf(`xdpfwd run %s --takeover %s --summary /tmp/%[3]s.json --metrics %[4]s --stats-interval 0 >/tmp/%[3]s.log 2>&1 &
pid=$!
for i in $(seq 900); do
	if grep -qs 'took over the datapath' /tmp/%[3]s.log && ! kill -0 %[5]d 2>/dev/null; then echo "pid=$pid"; grep 'took over the datapath' /tmp/%[3]s.log; exit 0; fi
	if ! kill -0 $pid 2>/dev/null; then wait $pid; rc=$?; cat /tmp/%[3]s.log; echo "predecessor:"; cat /tmp/%[6]s.log; exit $rc; fi
	sleep 0.1
done
cat /tmp/%[3]s.log; echo "predecessor:"; cat /tmp/%[6]s.log; kill -9 $pid; exit 124`, strings.Join(args, " "), ctl, name, MetricsAddr, d.PID, d.name)
	rc, out, err := vm.Exec(script, 100*time.Second)
	if err != nil || rc != 0 {
		t.Fatalf("guest: xdpfwd run %s --takeover %s: exit %d %v:\n%s", strings.Join(args, " "), ctl, rc, err, out)
	}
	d.gone = true
	next := &Daemon{vm: vm, name: name}
	_, after, _ := strings.Cut("\n"+out, "\npid=")
	first, rest, _ := strings.Cut(after, "\n")
	if next.PID, _ = strconv.Atoi(first); next.PID <= 0 {
		t.Fatalf("guest: the successor took over, but no pid in:\n%s", out)
	}
	next.Ready = strings.TrimSpace(rest)
	t.Cleanup(func() {
		if !next.gone {
			if t.Failed() {
				t.Logf("xdpfwd log:\n%s", next.Log(t))
			}
			next.Kill(t)
		}
	})
	return next
}

// Log returns the daemon's log so far.
func (d *Daemon) Log(t testing.TB) string {
	t.Helper()
	return d.vm.Run(t, "cat /tmp/"+d.name+".log", 10*time.Second)
}

// Stop sends SIGTERM, waits for the daemon to exit 0 and returns its
// summary.
func (d *Daemon) Stop(t testing.TB) fwd.Summary {
	t.Helper()
	out := d.vm.Run(t, fmt.Sprintf(`kill -TERM %d
for i in $(seq 300); do kill -0 %[1]d 2>/dev/null || break; sleep 0.1; done
if kill -0 %[1]d 2>/dev/null; then echo "still running"; cat /tmp/%[2]s.log; exit 1; fi
cat /tmp/%[2]s.json`, d.PID, d.name), 40*time.Second)
	d.gone = true
	var s fwd.Summary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("summary of %s: %v\n%s\nlog:\n%s", d.name, err, out, d.Log(t))
	}
	return s
}

// Kill sends SIGKILL and waits for the daemon to be gone.
func (d *Daemon) Kill(t testing.TB) {
	t.Helper()
	d.vm.Run(t, fmt.Sprintf(`kill -9 %d
for i in $(seq 100); do kill -0 %[1]d 2>/dev/null || exit 0; sleep 0.1; done
exit 1`, d.PID), 20*time.Second)
	d.gone = true
}

// Metrics returns the daemon's Prometheus samples whose names start with
// prefix, keyed by the sample line's name and labels as printed.
func (d *Daemon) Metrics(t testing.TB, prefix string) map[string]float64 {
	t.Helper()
	out := d.vm.Run(t, "wget -qO- http://"+MetricsAddr+"/metrics", 20*time.Second)
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m
}

// IOMMU counts the guest's IOMMU map and unmap calls (tracefs
// iommu:map and iommu:unmap hist triggers, exact however many happen).
type IOMMU struct{ Maps, Unmaps uint64 }

// Sub is the count between two readings.
func (a IOMMU) Sub(b IOMMU) IOMMU { return IOMMU{a.Maps - b.Maps, a.Unmaps - b.Unmaps} }

// IOMMUCounts reads the counts, arming the triggers on first use.
func (vm *VM) IOMMUCounts(t testing.TB) IOMMU {
	t.Helper()
	out := vm.Run(t, `cd /sys/kernel/tracing/events/iommu || exit 1
for e in map unmap; do
	grep -q '^hist' $e/trigger || echo 'hist:keys=common_type' > $e/trigger || exit 1
	echo "$e $(awk '/Hits:/ {print $2}' $e/hist)"
done`, 10*time.Second)
	var c IOMMU
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var name string
		var n uint64
		if _, err := fmt.Sscan(line, &name, &n); err != nil {
			t.Fatalf("iommu counts: %q: %v", out, err)
		}
		switch name {
		case "map":
			c.Maps = n
		case "unmap":
			c.Unmaps = n
		}
	}
	return c
}
