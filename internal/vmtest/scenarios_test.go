package vmtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// A scenario runs against a booted VM whose links are up at MTU 1500.
type scenario struct {
	name string
	run  func(t *testing.T, vm *VM)
}

// TestNICs runs the scenarios on each NIC model, one boot per model and
// queue count. Under TCG only counts mean anything: every check is a
// count or a byte-exact comparison, never a rate.
func TestNICs(t *testing.T) {
	for _, c := range []struct {
		name      string
		cfg       Config
		scenarios []scenario
	}{
		// Two RX queues: igb's RSS over the guest's two CPUs.
		{"igb", Config{NIC: IGB}, append(scenarios(), scenario{"iommu", testIOMMU}, scenario{"pods", testPods})},
		{"virtio-1q", Config{NIC: Virtio, Queues: 1}, append(scenarios(), scenario{"iommu", testIOMMU}, scenario{"pods", testPods})},
		{"virtio-2q", Config{NIC: Virtio, Queues: 2}, scenarios()},
		// What virtio-net zero-copy maps per packet without its
		// per-packet indirect descriptor table.
		{"virtio-noindirect", Config{NIC: Virtio, Queues: 1, NoIndirectDesc: true},
			[]scenario{{"defaults", testDefaults}, {"iommu", testIOMMUZeroCopy}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm := Start(t, c.cfg)
			vm.SetLinks(t, 1500)
			for _, s := range c.scenarios {
				t.Run(s.name, func(t *testing.T) {
					t.Cleanup(func() {
						if t.Failed() {
							vm.logState(t)
						}
					})
					s.run(t, vm)
					// Whatever a scenario did, it leaves no program
					// and no promiscuous membership behind.
					vm.requireClean(t)
				})
			}
		})
	}
}

func scenarios() []scenario {
	return []scenario{
		{"defaults", testDefaults},
		{"copy", func(t *testing.T, vm *VM) { testPingTCP(t, vm, "--zerocopy", "off") }},
		{"zerocopy-on", func(t *testing.T, vm *VM) { testPingTCP(t, vm, "--zerocopy", "on") }},
		{"one-worker", func(t *testing.T, vm *VM) { testPingTCP(t, vm, "--queues", "1") }},
		{"switch", func(t *testing.T, vm *VM) { testPingTCP(t, vm, "--mode", "switch") }},
		{"zerocopy-refused", testZeroCopyRefused},
		{"promisc-off", testPromiscOff},
		{"kill9-restart", testKill9Restart},
		{"handover", testHandover},
		{"link-down-up", testLinkDownUp},
		{"flows-sticky", testFlowsSticky},
		{"jumbo", testJumbo},
		{"runtime-link", testRuntimeLink},
	}
}

// requireClean fails t if a guest link still has an XDP program or a
// promiscuous membership.
func (vm *VM) requireClean(t *testing.T) {
	t.Helper()
	for _, l := range []string{NIC0, NIC1} {
		s := vm.Link(t, l)
		if s.XDPProgID != 0 || s.Promiscuity != 0 {
			t.Errorf("%s after the scenario: XDP program %d, promiscuity %d; want none", l, s.XDPProgID, s.Promiscuity)
		}
	}
}

// logState logs what tells a wedged NIC queue from a datapath's fault
// once a scenario failed: the guest's interrupts per queue, its links'
// counters and the kernel's last words.
func (vm *VM) logState(t *testing.T) {
	t.Helper()
	script := "grep -E 'CPU|virtio|igb|eth' /proc/interrupts; " +
		"for l in " + NIC0 + " " + NIC1 + "; do cd /sys/class/net/$l/statistics && grep -H . rx_packets tx_packets rx_dropped tx_dropped rx_errors tx_errors | sed \"s|^|$l |\"; done; " +
		"dmesg | tail -40"
	rc, out, err := vm.Exec(script, 20*time.Second)
	t.Logf("guest state after the failure (exit %d, %v):\n%s", rc, err, out)
}

// pingBoth pings B from A and A from B, n each, and wants every reply.
func pingBoth(t *testing.T, vm *VM, n int) {
	t.Helper()
	for _, p := range []struct {
		from *topo.NS
		to   netip.Addr
	}{{vm.A, AddrB}, {vm.B, AddrA}} {
		r, err := topo.Ping(p.from, p.to, n, 60*time.Second)
		if err != nil {
			t.Fatalf("ping %s from %s: %v", p.to, p.from.Name, err)
		}
		if r.Received != n {
			t.Fatalf("ping %s: %d/%d replies", p.to, r.Received, n)
		}
	}
}

// tcpBoth moves n bytes each way and checks every byte.
func tcpBoth(t *testing.T, vm *VM, n int64) {
	t.Helper()
	for _, p := range []struct {
		from, to *topo.NS
		addr     netip.Addr
	}{{vm.A, vm.B, AddrB}, {vm.B, vm.A, AddrA}} {
		r, err := topo.TCPTransfer(p.from, p.to, p.addr, n, 120*time.Second)
		if err != nil {
			t.Fatalf("tcp %d bytes to %s: %v", n, p.addr, err)
		}
		if r.Bytes != n {
			t.Fatalf("tcp to %s: %d of %d bytes", p.addr, r.Bytes, n)
		}
	}
}

// checkSummary fails t on a leak, an ownership violation or a truncated
// frame, and returns the packets forwarded (received on both links).
func checkSummary(t *testing.T, s fwd.Summary) uint64 {
	t.Helper()
	if s.UMEM.LeakedAddresses != 0 || s.UMEM.OwnershipViolations != 0 {
		t.Errorf("umem: %d leaked addresses, %d ownership violations", s.UMEM.LeakedAddresses, s.UMEM.OwnershipViolations)
	}
	var rx uint64
	for name, l := range s.Links {
		rx += l.RXPackets
		if n := l.Drops["rx_truncated"]; n != 0 {
			t.Errorf("%s: %d truncated frames", name, n)
		}
	}
	return rx
}

func testPingTCP(t *testing.T, vm *VM, args ...string) {
	d := vm.StartXdpfwd(t, append([]string{"--link", NIC0, "--link", NIC1}, args...)...)
	vm.WaitCarrier(t)
	pingBoth(t, vm, 20)
	tcpBoth(t, vm, 2<<20)
	checkSummary(t, d.Stop(t))
}

// testDefaults: what a new user runs. Zero-copy is bound where the driver
// has it and the ready line says so, the links are promiscuous while it
// runs (a NIC drops unicast frames for other MACs otherwise), and ping and
// TCP cross both ways.
func testDefaults(t *testing.T, vm *VM) {
	d := vm.StartXdpfwd(t, "--link", NIC0, "--link", NIC1)
	if !strings.Contains(d.Ready, "bind_mode=zerocopy") {
		t.Errorf("--zerocopy auto did not bind zero-copy: %s", d.Ready)
	}
	for _, l := range []string{NIC0, NIC1} {
		if s := vm.Link(t, l); s.Promiscuity == 0 || s.XDPProgID == 0 {
			t.Errorf("%s while forwarding: promiscuity %d, XDP program %d; want both set", l, s.Promiscuity, s.XDPProgID)
		}
	}
	vm.WaitCarrier(t)
	pingBoth(t, vm, 20)
	tcpBoth(t, vm, 2<<20)
	checkSummary(t, d.Stop(t))
}

// testZeroCopyRefused: --zerocopy on where zero-copy cannot be had exits 2
// with a message naming why, and leaves nothing attached: on a veth (no
// zero-copy at all), and on the NIC at an MTU its zero-copy cannot carry.
func testZeroCopyRefused(t *testing.T, vm *VM) {
	vm.Run(t, "agent veth zc0 zc1 && ip link set zc0 up && ip link set zc1 up", 10*time.Second)
	defer vm.Run(t, "ip link del zc0", 10*time.Second)
	for _, c := range []struct {
		name string
		args []string
		mtu  int
		want string
	}{
		{"veth", []string{"--link", "zc0", "--link", "zc1"}, 1500, "zero-copy"},
		{"mtu-9000", []string{"--link", NIC0, "--link", NIC1}, 9000, "--zerocopy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.mtu != 1500 {
				vm.SetLinks(t, c.mtu)
				defer vm.SetLinks(t, 1500)
			}
			d, rc, out := vm.TryXdpfwd(append(c.args, "--zerocopy", "on")...)
			if d != nil {
				d.Stop(t)
				t.Fatalf("--zerocopy on started: %s", d.Ready)
			}
			if rc != 2 || !strings.Contains(out, c.want) {
				t.Fatalf("--zerocopy on: exit %d, want 2 with a message naming %q:\n%s", rc, c.want, out)
			}
			t.Logf("refused: %s", lastLine(out))
		})
	}
}

// testRuntimeLink: a veth joins the NICs' switch while it runs, as a
// pod's does (`xdpfwd link add`, of two queues: as many as the workers at
// most), in copy mode: both hosts ping the guest's address behind it; it
// leaves (`link del`) and the NICs still forward, nothing leaked; beside
// NICs bound zero-copy it joins the copy-mode UMEM and the NICs stay
// zero-copy.
func testRuntimeLink(t *testing.T, vm *VM) {
	addrC := netip.MustParseAddr("198.18.7.3")
	vm.Run(t, "agent veth rl0 rl1 2 && ip link set rl0 up && ip link set rl1 up && ip addr add "+addrC.String()+"/24 dev rl1", 10*time.Second)
	defer vm.Run(t, "ip link del rl0", 10*time.Second)
	const ctl = "/tmp/rl.sock"
	link := func(op string) (int, string) {
		rc, out, err := vm.Exec("xdpfwd link "+op+" rl0 --control "+ctl, 60*time.Second)
		if err != nil {
			t.Fatalf("guest: xdpfwd link %s: %v", op, err)
		}
		return rc, out
	}
	// With the NICs bound zero-copy the veth joins the copy-mode UMEM
	// (domains): the NICs stay zero-copy, frames crossing are copied
	// and counted, and both domains are whole when it is done.
	for _, zc := range []string{"off", "on"} {
		t.Run(map[string]string{"off": "copy", "on": "zerocopy"}[zc], func(t *testing.T) {
			d := vm.StartXdpfwd(t, "--mode", "switch", "--link", NIC0, "--link", NIC1, "--zerocopy", zc, "--control", ctl)
			vm.WaitCarrier(t)
			pingBoth(t, vm, 3)
			t.Logf("guest: %s", d.Ready)
			if rc, out := link("add"); rc != 0 {
				t.Fatalf("xdpfwd link add rl0: exit %d\n%s\n%s", rc, out, d.Log(t))
			}
			for _, from := range []*topo.NS{vm.A, vm.B} {
				if r, err := topo.Ping(from, addrC, 5, 60*time.Second); err != nil || r.Received != 5 {
					t.Fatalf("ping %s (behind the added veth) from %s: %+v %v\n%s", addrC, from.Name, r, err, d.Log(t))
				}
			}
			if rc, out := link("del"); rc != 0 {
				t.Fatalf("xdpfwd link del rl0: exit %d\n%s", rc, out)
			}
			pingBoth(t, vm, 5)
			s := d.Stop(t)
			checkSummary(t, s)
			if l := s.Links["rl0"]; l.RXPackets == 0 || l.TXPackets == 0 {
				t.Errorf("summary of the removed rl0: rx %d tx %d, want both above 0", l.RXPackets, l.TXPackets)
			}
			if zc == "off" {
				return
			}
			checkDomains(t, s, map[string]string{NIC0: "zerocopy", NIC1: "zerocopy"})
			var crossed uint64
			for _, n := range s.DomainCopies {
				crossed += n
			}
			if crossed == 0 || s.DomainCopyBytes == 0 {
				t.Errorf("frames between the NICs and rl0 crossed domains, but %d copies of %d bytes are counted", crossed, s.DomainCopyBytes)
			}
		})
	}
}

// checkDomains fails t unless each named link sits in the domain of that
// bind mode and every domain is whole (nothing leaked or stranded).
func checkDomains(t *testing.T, s fwd.Summary, bind map[string]string) {
	t.Helper()
	for _, d := range s.Domains {
		if d.LeakedAddresses != 0 || d.StrandedTX != 0 {
			t.Errorf("domain %q: %d leaked addresses, %d stranded TX descriptors", d.Name, d.LeakedAddresses, d.StrandedTX)
		}
		for _, l := range d.Links {
			if want, ok := bind[l]; ok && d.BindMode != want {
				t.Errorf("%s is in domain %q bound %s; want %s", l, d.Name, d.BindMode, want)
			}
			delete(bind, l)
		}
	}
	for l := range bind {
		t.Errorf("%s is in no domain of the summary: %+v", l, s.Domains)
	}
}

// testPromiscOff: --promisc off leaves the links alone, so unicast frames
// for the far host's MAC are filtered by the NIC (the ping fails), while
// broadcast would still cross.
func testPromiscOff(t *testing.T, vm *VM) {
	d := vm.StartXdpfwd(t, "--link", NIC0, "--link", NIC1, "--promisc", "off")
	for _, l := range []string{NIC0, NIC1} {
		if s := vm.Link(t, l); s.Promiscuity != 0 {
			t.Errorf("%s with --promisc off: promiscuity %d", l, s.Promiscuity)
		}
	}
	vm.WaitCarrier(t)
	// Both models filter unicast by MAC as hardware does (QEMU's igb
	// and virtio-net's receive filter): with the membership off, the
	// echo requests for B's MAC never reach xdpfwd.
	r, _ := topo.Ping(vm.A, AddrB, 5, 10*time.Second)
	if r.Received != 0 {
		t.Errorf("with --promisc off %d/5 pings crossed: the NIC did not filter unicast for another MAC", r.Received)
	}
	s := d.Stop(t)
	if rx := s.Links[NIC0].RXPackets; rx != 0 {
		t.Errorf("with --promisc off xdpfwd received %d frames on %s; want the NIC to have filtered them", rx, NIC0)
	}
}

// testKill9Restart: a daemon killed with SIGKILL leaves its programs
// attached (the kernel keeps a netlink-attached XDP program), but its
// promiscuous membership goes with its socket; the next start replaces
// the stale programs and forwards.
func testKill9Restart(t *testing.T, vm *VM) {
	d := vm.StartXdpfwd(t, "--link", NIC0, "--link", NIC1)
	d.Kill(t)
	for _, l := range []string{NIC0, NIC1} {
		if s := vm.Link(t, l); s.Promiscuity != 0 {
			t.Errorf("%s after kill -9: promiscuity %d; want the membership gone with the process", l, s.Promiscuity)
		}
	}
	d = vm.StartXdpfwd(t, "--link", NIC0, "--link", NIC1)
	vm.WaitCarrier(t)
	pingBoth(t, vm, 20)
	checkSummary(t, d.Stop(t))
}

// testHandover: a daemon bound as it binds by default (zero-copy on igb)
// hands its datapath to a successor (run --takeover) while a sequenced
// UDP stream of 500 datagrams/s crosses it from A to B: none of it lost,
// reordered or duplicated; the successor's ready line is its
// predecessor's binding, its summary counts what both forwarded, no UMEM
// address leaked; ping and TCP cross after it.
func testHandover(t *testing.T, vm *VM) {
	const ctl = "/tmp/handover.sock"
	args := []string{"--link", NIC0, "--link", NIC1, "--control", ctl}
	d := vm.StartXdpfwd(t, args...)
	vm.WaitCarrier(t)
	waitPing(t, vm.A, AddrB, 30*time.Second)
	s, err := topo.StartSeqStream(vm.A, vm.B, AddrA, AddrB, 500, 64, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(0)
	time.Sleep(time.Second)
	next := vm.TakeOver(t, d, ctl, args...)
	time.Sleep(2 * time.Second)
	res, err := s.Stop(500 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("across the handover: %d sent, %d received, %d lost, %d reordered, %d duplicated; %s", res.Sent, res.Received, res.Lost, res.Reordered, res.Duplicates, next.Ready)
	if res.Received == 0 || res.Lost != 0 || res.Reordered != 0 || res.Duplicates != 0 {
		t.Errorf("the stream lost %d, reordered %d, duplicated %d of %d", res.Lost, res.Reordered, res.Duplicates, res.Sent)
	}
	if vm.cfg.NIC == IGB && !strings.Contains(d.Ready, "bind_mode=zerocopy") {
		t.Errorf("igb did not bind zero-copy: %s", d.Ready)
	}
	if !strings.Contains(next.Log(t), "took over the datapath") {
		t.Errorf("the successor's log does not say it took over")
	}
	pingBoth(t, vm, 10)
	tcpBoth(t, vm, 1<<20)
	sum := next.Stop(t)
	checkSummary(t, sum)
	if got := sum.Links[NIC1].TXPackets; got < res.Received {
		t.Errorf("the successor's summary: %d sent on %s, fewer than the %d the stream received: counters not carried", got, NIC1, res.Received)
	}
}

// testLinkDownUp: an operator bounces a NIC under a running daemon; it
// forwards again once the carrier is back.
func testLinkDownUp(t *testing.T, vm *VM) {
	d := vm.StartXdpfwd(t, "--link", NIC0, "--link", NIC1)
	vm.WaitCarrier(t)
	pingBoth(t, vm, 5)
	vm.Run(t, "ip link set "+NIC0+" down && sleep 1 && ip link set "+NIC0+" up", 20*time.Second)
	vm.WaitCarrier(t)
	// The first pings after the carrier may still meet the driver's
	// reset (igb reconfigures its rings): wait for one reply, then
	// want every one.
	waitPing(t, vm.A, AddrB, 30*time.Second)
	pingBoth(t, vm, 20)
	s := d.Stop(t)
	checkSummary(t, s)
	if s.Links[NIC0].LinkDowns == 0 {
		t.Errorf("%s went down and up, but the summary counts no link down", NIC0)
	}
}

func waitPing(t *testing.T, from *topo.NS, to netip.Addr, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if r, err := topo.Ping(from, to, 1, 2*time.Second); err == nil && r.Received == 1 {
			return
		}
	}
	t.Fatalf("no ping reply from %s within %v", to, timeout)
}

// testJumbo: MTU 9000 end to end. The driver either forwards it (TCP
// byte-exact) or xdpfwd refuses at start with exit code 2 and a message
// naming what to change; it never forwards truncated frames.
func testJumbo(t *testing.T, vm *VM) {
	setHostMTU(t, vm, 9000)
	vm.SetLinks(t, 9000)
	defer func() {
		setHostMTU(t, vm, 1500)
		vm.SetLinks(t, 1500)
	}()
	for _, zc := range []string{"auto", "off"} {
		t.Run("zerocopy-"+zc, func(t *testing.T) {
			d, rc, out := vm.TryXdpfwd("--link", NIC0, "--link", NIC1, "--zerocopy", zc)
			if d == nil {
				if rc != 2 {
					t.Fatalf("MTU 9000: xdpfwd exited %d (want ready, or 2 with a reason):\n%s", rc, out)
				}
				t.Logf("MTU 9000 refused: %s", lastLine(out))
				return
			}
			t.Logf("MTU 9000: %s", d.Ready)
			for _, l := range strings.Split(d.Log(t), "\n") {
				if strings.Contains(l, "multi-buffer") || strings.Contains(l, "zero-copy") || strings.Contains(l, "generic") || strings.Contains(l, "frame size") {
					t.Logf("  %s", l)
				}
			}
			vm.WaitCarrier(t)
			pingBoth(t, vm, 5)
			tcpBoth(t, vm, 4<<20)
			checkSummary(t, d.Stop(t))
		})
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

func setHostMTU(t *testing.T, vm *VM, mtu int) {
	t.Helper()
	for _, ns := range []*topo.NS{vm.A, vm.B} {
		err := ns.Do(func() error {
			links, err := netlink.LinkList()
			if err != nil {
				return err
			}
			for _, l := range links {
				if l.Type() == "tuntap" {
					if err := netlink.LinkSetMTU(l, mtu); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("host mtu %d in %s: %v", mtu, ns.Name, err)
		}
	}
}

// testFlowsSticky: several UDP flows, from as many source addresses (igb
// hashes IPv4 UDP by addresses only), spread over the NIC's RX queues by
// its RSS, forwarded with --xps sticky. Every flow's datagrams arrive in
// the order sent, and with two RX queues both are served.
func testFlowsSticky(t *testing.T, vm *VM) {
	const flows, perFlow = 16, 300
	srcs := addSources(t, vm, flows)
	d := vm.StartXdpfwd(t, "--link", NIC0, "--link", NIC1, "--xps", "sticky")
	vm.WaitCarrier(t)
	res, err := udpFlows(vm.A, vm.B, srcs, AddrB, perFlow, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Metrics(t, "xdpfwd_rx_packets_total")
	s := d.Stop(t)
	checkSummary(t, s)
	var got, reordered int
	for _, r := range res {
		got += r.received
		reordered += r.reordered
	}
	t.Logf("%d flows × %d datagrams: %d received, %d out of order; per RX queue: %v", flows, perFlow, got, reordered, m)
	if reordered != 0 {
		t.Errorf("%d datagrams arrived out of order", reordered)
	}
	if got < flows*perFlow*98/100 {
		t.Errorf("only %d of %d datagrams arrived", got, flows*perFlow)
	}
	queues := vm.RXQueues(t, NIC0)
	served := 0
	for q := range queues {
		if m[fmt.Sprintf(`xdpfwd_rx_packets_total{link="%s",namespace="",pod="",queue="%d"}`, NIC0, q)] > 0 {
			served++
		}
	}
	if served != queues {
		t.Errorf("%s has %d RX queues, %d received packets: %v", NIC0, queues, served, m)
	}
}

// addSources gives host A n more addresses, spread over the low 16 bits of
// 198.18.0.0/16, and lets B take datagrams from them (rp_filter off: B has
// no route back, and needs none). igb hashes IPv4 UDP by addresses only,
// with a Toeplitz hash, which is linear: flows whose sources differ in only
// the few low bits of .11–.26 all land on one queue whenever the key bits
// for those few positions happen to cancel (a run in CI put all 16 on queue
// 0). Sources differing in 16 bit positions make that 1 in 65,536.
func addSources(t *testing.T, vm *VM, n int) []netip.Addr {
	t.Helper()
	var srcs []netip.Addr
	err := vm.A.Do(func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Type() != "tuntap" {
				continue
			}
			for i := range n {
				v := uint16((i + 1) * 0x9e37)
				a := netip.AddrFrom4([4]byte{198, 18, byte(v >> 8), byte(v)})
				if a == AddrA || a == AddrB || byte(v) == 0 || byte(v) == 255 {
					v ^= 0x5a5a
					a = netip.AddrFrom4([4]byte{198, 18, byte(v >> 8), byte(v)})
				}
				err := netlink.AddrReplace(l, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}})
				if err != nil {
					return err
				}
				srcs = append(srcs, a)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("source addresses: %v", err)
	}
	err = vm.B.Do(func() error {
		for _, f := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+f+"/rp_filter", []byte("0"), 0); err != nil {
				return err
			}
		}
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Type() == "tuntap" {
				if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+l.Attrs().Name+"/rp_filter", []byte("0"), 0); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("rp_filter in %s: %v", vm.B.Name, err)
	}
	return srcs
}

type flowResult struct{ received, reordered int }

// udpFlows sends perFlow sequence-numbered datagrams from each source
// address, interleaved and paced, to one listener on dst, and counts per
// flow what arrived and what arrived after a later one.
func udpFlows(src, dst *topo.NS, srcs []netip.Addr, dstAddr netip.Addr, perFlow int, timeout time.Duration) ([]flowResult, error) {
	return udpFlowsSized(src, dst, srcs, dstAddr, perFlow, 64, timeout)
}

// udpFlowsSized is udpFlows with payload bytes per datagram (at least 16).
func udpFlowsSized(src, dst *topo.NS, srcs []netip.Addr, dstAddr netip.Addr, perFlow, payloadLen int, timeout time.Duration) ([]flowResult, error) {
	var ln *net.UDPConn
	err := dst.Do(func() error {
		var err error
		ln, err = net.ListenUDP("udp4", &net.UDPAddr{IP: dstAddr.AsSlice()})
		if err == nil {
			err = ln.SetReadBuffer(4 << 20)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	conns := make([]*net.UDPConn, len(srcs))
	err = src.Do(func() error {
		for i, a := range srcs {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: a.AsSlice()}, ln.LocalAddr().(*net.UDPAddr))
			if err != nil {
				return err
			}
			conns[i] = c
		}
		return nil
	})
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	res := make([]flowResult, len(srcs))
	last := make([]int64, len(srcs))
	for i := range last {
		last[i] = -1
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(timeout)
	wg.Go(func() {
		buf := make([]byte, 2048)
		quiet := 2 * time.Second
		for time.Now().Before(deadline) {
			ln.SetReadDeadline(time.Now().Add(quiet))
			n, _, err := ln.ReadFromUDP(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return // quiet for a while: the senders are done
				}
				return
			}
			if n < 16 {
				continue
			}
			f, seq := int(binary.BigEndian.Uint64(buf)), int64(binary.BigEndian.Uint64(buf[8:]))
			if f >= len(res) {
				continue
			}
			res[f].received++
			if seq < last[f] {
				res[f].reordered++
			} else {
				last[f] = seq
			}
		}
	})
	payload := make([]byte, max(payloadLen, 16))
	for seq := range perFlow {
		for f, c := range conns {
			binary.BigEndian.PutUint64(payload, uint64(f))
			binary.BigEndian.PutUint64(payload[8:], uint64(seq))
			c.Write(payload)
		}
		// About 10k datagrams/s over all flows: a low rate, which a
		// TCG guest keeps up with, so what it checks is order, not
		// capacity.
		time.Sleep(time.Duration(len(conns)) * 100 * time.Microsecond)
	}
	wg.Wait()
	return res, nil
}
