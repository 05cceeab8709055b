package vmtest

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// A pod in the guest: a namespace /run/netns/name whose eth0 has addr, the
// veth's other end link in the guest's root namespace, as a CNI plugin
// leaves it for `xdpfwd link add`.
type pod struct {
	name, link string
	addr       netip.Addr
}

func (p pod) in(cmd string) string { return "nsenter --net=/run/netns/" + p.name + " " + cmd }

var pods = []pod{
	{"pod1", "pv1", netip.MustParseAddr("198.18.7.11")},
	{"pod2", "pv2", netip.MustParseAddr("198.18.7.12")},
}

// testPods: the node the CNI DaemonSet runs. The NICs switch
// in zero-copy (--zerocopy auto) and two pods' veths join at runtime with
// `xdpfwd link add`, in a copy-mode UMEM of their own: ping and 2 MiB of
// TCP, byte-exact, between the hosts behind the NICs and the pods both
// ways and between the pods; the NICs stay zero-copy throughout, and
// nothing is leaked in either domain once the pods have left. Then the
// IOMMU's cost per 1,000 packets NIC → pod and pod → NIC, against the same
// node with the NICs in copy mode: the premapped UMEM keeps its promise
// with pods attached.
func testPods(t *testing.T, vm *VM) {
	for _, p := range pods {
		// Two queues, as many as the workers (the CNI plugin's veths
		// have as many).
		vm.Run(t, fmt.Sprintf("agent pod %s %s %s/24 2", p.name, p.link, p.addr), 10*time.Second)
	}
	defer vm.Run(t, "ip link del pv1; ip link del pv2; umount /run/netns/pod1 /run/netns/pod2; rm -f /run/netns/pod1 /run/netns/pod2", 10*time.Second)
	var rows []IOMMURow
	defer func() {
		t.Logf("IOMMU per 1,000 packets forwarded with pods attached (strict mode):\n%s", IOMMUTable(rows))
	}()

	t.Run("zerocopy", func(t *testing.T) {
		const ctl = "/tmp/pods-zc.sock"
		d := startWithPods(t, vm, ctl)
		if !strings.Contains(d.Ready, "bind_mode=zerocopy") {
			t.Fatalf("--zerocopy auto did not bind the NICs zero-copy: %s", d.Ready)
		}
		checkBinds(t, vm, ctl, map[string]string{NIC0: "zerocopy", NIC1: "zerocopy", "pv1": "copy", "pv2": "copy"})
		podTraffic(t, vm)
		rows = append(rows, podIOMMU(t, vm, "xdpfwd-zerocopy")...)
		checkBinds(t, vm, ctl, map[string]string{NIC0: "zerocopy", NIC1: "zerocopy"})
		s := stopWithPods(t, vm, d, ctl)
		checkDomains(t, s, map[string]string{NIC0: "zerocopy", NIC1: "zerocopy"})
		var crossed uint64
		for _, n := range s.DomainCopies {
			crossed += n
		}
		if crossed == 0 {
			t.Errorf("frames crossed between the NICs and the pods, but no copy across domains is counted: %+v", s.DomainCopies)
		}
	})
	t.Run("copy", func(t *testing.T) {
		const ctl = "/tmp/pods-copy.sock"
		d := startWithPods(t, vm, ctl, "--zerocopy", "off")
		waitPodPing(t, vm)
		rows = append(rows, podIOMMU(t, vm, "xdpfwd-copy")...)
		stopWithPods(t, vm, d, ctl)
	})
	if !t.Failed() {
		checkPodIOMMU(t, vm, rows)
	}
}

// startWithPods starts the switch on the NICs with control socket ctl
// (its own per subtest: a daemon re-adds the links its predecessor on
// that socket had added) and adds the pods' veths.
func startWithPods(t *testing.T, vm *VM, ctl string, args ...string) *Daemon {
	t.Helper()
	d := vm.StartXdpfwd(t, append([]string{"--mode", "switch", "--link", NIC0, "--link", NIC1, "--control", ctl}, args...)...)
	vm.WaitCarrier(t)
	for _, p := range pods {
		if rc, out, err := vm.Exec("xdpfwd link add "+p.link+" --control "+ctl, 60*time.Second); err != nil || rc != 0 {
			t.Fatalf("xdpfwd link add %s: exit %d %v\n%s\n%s", p.link, rc, err, out, d.Log(t))
		}
	}
	return d
}

// stopWithPods removes the pods' links as the CNI plugin's DEL does and
// stops the daemon; the summary must be whole.
func stopWithPods(t *testing.T, vm *VM, d *Daemon, ctl string) fwd.Summary {
	t.Helper()
	for _, p := range pods {
		if rc, out, err := vm.Exec("xdpfwd link del "+p.link+" --control "+ctl, 60*time.Second); err != nil || rc != 0 {
			t.Fatalf("xdpfwd link del %s: exit %d %v\n%s", p.link, rc, err, out)
		}
	}
	// The NICs forward on once the pods have left.
	pingBoth(t, vm, 3)
	s := d.Stop(t)
	checkSummary(t, s)
	for _, dom := range s.Domains {
		if dom.LeakedAddresses != 0 || dom.StrandedTX != 0 {
			t.Errorf("domain %q after the pods left: %d leaked, %d stranded", dom.Name, dom.LeakedAddresses, dom.StrandedTX)
		}
	}
	return s
}

// checkBinds wants `xdpfwd link list` to show each named link bound so.
func checkBinds(t *testing.T, vm *VM, ctl string, want map[string]string) {
	t.Helper()
	out := vm.Run(t, "xdpfwd link list --control "+ctl, 30*time.Second)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	col := -1
	for i, h := range strings.Fields(lines[0]) {
		if h == "BIND" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("xdpfwd link list has no BIND column:\n%s", out)
	}
	got := map[string]string{}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > col {
			got[f[0]] = f[col]
		}
	}
	for l, b := range want {
		if got[l] != b {
			t.Errorf("xdpfwd link list: %s bound %q, want %q:\n%s", l, got[l], b, out)
		}
	}
}

// podTraffic: ping and 2 MiB of TCP, byte-exact, host A ↔ pod1 both ways,
// host B → pod2 and pod1 → pod2.
func podTraffic(t *testing.T, vm *VM) {
	t.Helper()
	const n = 2 << 20
	waitPodPing(t, vm)
	for _, c := range []struct {
		from *topo.NS
		to   pod
	}{{vm.A, pods[0]}, {vm.B, pods[1]}} {
		if r, err := topo.Ping(c.from, c.to.addr, 5, 30*time.Second); err != nil || r.Received != 5 {
			t.Fatalf("ping %s from %s: %+v %v", c.to.name, c.from.Name, r, err)
		}
	}
	vm.Run(t, pods[0].in("ping -c 5 -W 5 "+pods[1].addr.String()), 30*time.Second)

	hostToPod(t, vm, vm.A, pods[0], n)
	podToHost(t, vm, pods[0], vm.A, AddrA, n)
	hostToPod(t, vm, vm.B, pods[1], n)
	podToPod(t, vm, pods[0], pods[1], n)
}

// waitPodPing waits until each pod answers its host's ping: the switch
// has learnt where they are.
func waitPodPing(t *testing.T, vm *VM) {
	t.Helper()
	waitPing(t, vm.A, pods[0].addr, 30*time.Second)
	waitPing(t, vm.B, pods[1].addr, 30*time.Second)
}

const streamPort = 5201

// hostToPod sends n bytes of topo's stream from a host to a receiver in
// the pod, which verifies every byte.
func hostToPod(t *testing.T, vm *VM, from *topo.NS, to pod, n int64) {
	t.Helper()
	wait := vm.background(t, to.in(fmt.Sprintf("agent tcp-recv %s:%d %d 60", to.addr, streamPort, n)))
	deadline := time.Now().Add(60 * time.Second)
	err := from.Do(func() error {
		c, err := topo.DialStream(netip.AddrPortFrom(to.addr, streamPort), deadline)
		if err != nil {
			return err
		}
		return topo.SendStream(c, n, deadline)
	})
	out := wait()
	if err != nil || !strings.Contains(out, fmt.Sprintf("verified %d\n", n)) {
		t.Fatalf("tcp %d bytes %s -> %s: %v\nreceiver: %s", n, from.Name, to.name, err, out)
	}
}

// podToHost sends n bytes from the pod to a host, which verifies them.
func podToHost(t *testing.T, vm *VM, from pod, to *topo.NS, addr netip.Addr, n int64) {
	t.Helper()
	l, err := topo.ListenStream(to, addr, n, time.Now().Add(60*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rc, out, err := vm.Exec(from.in(fmt.Sprintf("agent tcp-send %s %d 60", l.Addr(), n)), 70*time.Second)
	r, rerr := l.Wait()
	if err != nil || rc != 0 || rerr != nil || r.Bytes != n {
		t.Fatalf("tcp %d bytes %s -> %s: sender exit %d %v %s; receiver %d bytes: %v", n, from.name, to.Name, rc, err, out, r.Bytes, rerr)
	}
}

// podToPod sends n bytes between two pods, both in the guest.
func podToPod(t *testing.T, vm *VM, from, to pod, n int64) {
	t.Helper()
	wait := vm.background(t, to.in(fmt.Sprintf("agent tcp-recv %s:%d %d 60", to.addr, streamPort, n)))
	rc, out, err := vm.Exec(from.in(fmt.Sprintf("agent tcp-send %s:%d %d 60", to.addr, streamPort, n)), 70*time.Second)
	recv := wait()
	if err != nil || rc != 0 || !strings.Contains(recv, fmt.Sprintf("verified %d\n", n)) {
		t.Fatalf("tcp %d bytes %s -> %s: sender exit %d %v %s\nreceiver: %s", n, from.name, to.name, rc, err, out, recv)
	}
}

// background starts script in the guest with its output in a file and
// returns a function that waits (70 s at most) for it to end and returns
// that output.
func (vm *VM) background(t *testing.T, script string) func() string {
	t.Helper()
	vm.daemons++
	log := fmt.Sprintf("/tmp/bg%d.log", vm.daemons)
	pid := strings.TrimSpace(vm.Run(t, fmt.Sprintf("%s >%s 2>&1 &\necho $!", script, log), 10*time.Second))
	return func() string {
		return vm.Run(t, fmt.Sprintf(`for i in $(seq 700); do kill -0 %s 2>/dev/null || break; sleep 0.1; done
kill -9 %[1]s 2>/dev/null; cat %s`, pid, log), 80*time.Second)
	}
}

// The IOMMU rows are paced low and counted at the receiver: in the guest
// the pod's sender, xdpfwd and the NIC share two emulated CPUs, and at
// 4,000/s half the datagrams pod → NIC were lost.
const (
	podIOMMUCount = 1000
	podIOMMUPPS   = 1000
	udpPort       = 5300
)

// podIOMMU measures the IOMMU's maps and unmaps per 1,000 packets
// received, host A → pod1 (the NIC receives) and pod1 → host A (the NIC
// sends), at 64 and 1500 B.
func podIOMMU(t *testing.T, vm *VM, forwarder string) []IOMMURow {
	t.Helper()
	var rows []IOMMURow
	for _, frame := range []int{64, 1500} {
		payload := frame - 14 - 20 - 8
		for _, path := range []string{"nic→pod", "pod→nic"} {
			row := IOMMURow{NIC: string(vm.cfg.NIC), Forwarder: forwarder, Path: path, Frame: frame, Sent: podIOMMUCount}
			before := vm.IOMMUCounts(t)
			var err error
			if path == "nic→pod" {
				row.Received, err = udpHostToPod(t, vm, vm.A, pods[0], payload)
			} else {
				row.Received, err = udpPodToHost(t, vm, pods[0], vm.A, AddrA, payload)
			}
			if err != nil {
				t.Fatalf("%s %s at %d B: %v", forwarder, path, frame, err)
			}
			c := vm.IOMMUCounts(t).Sub(before)
			if row.Received > 0 {
				row.MapsPer1K = 1000 * float64(c.Maps) / float64(row.Received)
				row.UnmapsPer = 1000 * float64(c.Unmaps) / float64(row.Received)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

func udpHostToPod(t *testing.T, vm *VM, from *topo.NS, to pod, payload int) (int, error) {
	wait := vm.background(t, to.in(fmt.Sprintf("agent udp-recv %s:%d 30", to.addr, udpPort)))
	// The receiver must be up before the first datagram, or the first
	// would be lost to it: wait for its socket.
	vm.Run(t, fmt.Sprintf(`for i in $(seq 100); do %s | grep -q ':%04X ' && exit 0; sleep 0.1; done; exit 1`,
		to.in("cat /proc/net/udp"), udpPort), 15*time.Second)
	err := from.Do(func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(to.addr, udpPort)))
		if err != nil {
			return err
		}
		defer c.Close()
		topo.SendPaced(c, podIOMMUCount, payload, podIOMMUPPS)
		return nil
	})
	out := wait()
	var n int
	_, after, found := strings.Cut(out, "received ")
	if _, serr := fmt.Sscan(after, &n); (!found || serr != nil) && err == nil {
		err = fmt.Errorf("receiver in %s: %q", to.name, out)
	}
	return n, err
}

func udpPodToHost(t *testing.T, vm *VM, from pod, to *topo.NS, addr netip.Addr, payload int) (int, error) {
	var ln *net.UDPConn
	err := to.Do(func() error {
		var err error
		if ln, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0))); err == nil {
			err = ln.SetReadBuffer(4 << 20)
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	got := make(chan int)
	go func() { got <- topo.CountDatagrams(ln, time.Now().Add(60*time.Second), 2*time.Second) }()
	rc, out, err := vm.Exec(from.in(fmt.Sprintf("agent udp-send %s %d %d %d", ln.LocalAddr(), podIOMMUCount, payload, podIOMMUPPS)), 60*time.Second)
	n := <-got
	if err == nil && rc != 0 {
		err = fmt.Errorf("sender in %s: exit %d: %s", from.name, rc, out)
	}
	return n, err
}

// checkPodIOMMU holds the seeds' premise with pods attached: wherever the
// NIC's own DMA is the cost (igb; virtio-net maps an indirect descriptor
// table per packet sent either way), zero-copy maps (almost) nothing per
// packet in either direction, and copy mode maps about once per packet
// the NIC sends.
func checkPodIOMMU(t *testing.T, vm *VM, rows []IOMMURow) {
	t.Helper()
	by := map[string]IOMMURow{}
	for _, r := range rows {
		by[r.Forwarder+" "+r.Path+" "+fmt.Sprint(r.Frame)] = r
		if r.Received < r.Sent*9/10 {
			t.Errorf("%s %s at %d B: %d of %d received; the counts need the packets to cross", r.Forwarder, r.Path, r.Frame, r.Received, r.Sent)
		}
	}
	if vm.cfg.NIC == Virtio && !vm.cfg.NoIndirectDesc {
		return
	}
	for _, frame := range []int{64, 1500} {
		for _, path := range []string{"nic→pod", "pod→nic"} {
			if zc := by[fmt.Sprint("xdpfwd-zerocopy ", path, " ", frame)]; zc.MapsPer1K > 50 {
				t.Errorf("zero-copy NICs with pods, %s at %d B: %.1f IOMMU maps per 1,000 packets; want (almost) none", path, frame, zc.MapsPer1K)
			}
		}
		zc, cp := by[fmt.Sprint("xdpfwd-zerocopy pod→nic ", frame)], by[fmt.Sprint("xdpfwd-copy pod→nic ", frame)]
		if cp.MapsPer1K < 100 || cp.MapsPer1K < 10*zc.MapsPer1K {
			t.Errorf("copy-mode NICs with pods, pod→nic at %d B: %.1f maps per 1,000 packets against zero-copy's %.1f; want copy mode to map per packet sent", frame, cp.MapsPer1K, zc.MapsPer1K)
		}
	}
}
