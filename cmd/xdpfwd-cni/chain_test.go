package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// The node's address outside (on a veth to the "outside" namespace), and
// the outside client's.
const (
	nodeOutsideCIDR = "192.168.28.1/24"
	outsideCIDR     = "192.168.28.2/24"
)

// ipv4OnlyPath is a PATH with iptables and not ip6tables: the chain's
// plugins run as on a node without IPv6 NAT. Debian's portmap (1.1.1)
// CHECK, where ip6tables is, looks for its IPv4 rules in ip6tables and
// fails (containernetworking/plugins#819, fixed upstream since); ADD and
// DEL are the same either way for IPv4 pods.
func ipv4OnlyPath(t *testing.T) string {
	t.Helper()
	ipt := need(t, "iptables")
	dir := t.TempDir()
	if err := os.Symlink(ipt, filepath.Join(dir, "iptables")); err != nil {
		t.Fatal(err)
	}
	return "PATH=" + dir
}

// chainPlugins are the plugins after xdpfwd-cni in a chain: Debian's
// portmap, bandwidth and tuning (tuning sets a sysctl in the pod).
// portmap and bandwidth take their settings from runtimeConfig
// (capabilities), as a kubelet passes them. With xdpfwd the "bandwidth"
// capability is xdpfwd-cni's (chainConf): the bandwidth plugin's qdiscs
// never see the pod's frames; it is here to show a chain with both works.
func chainPlugins() []map[string]any {
	return []map[string]any{
		{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		{"type": "bandwidth", "capabilities": map[string]any{"bandwidth": true}},
		{"type": "tuning", "sysctl": map[string]any{tunedSysctl: "1"}},
	}
}

// tunedSysctl is the sysctl tuning sets in the pod (0 by default).
const tunedSysctl = "net.ipv4.conf.eth0.arp_ignore"

// podSysctl reads sysctl name (dotted) in p.
func podSysctl(p *topo.NS, name string) (string, error) {
	var v []byte
	err := p.Do(func() (err error) {
		v, err = os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
		return err
	})
	return strings.TrimSpace(string(v)), err
}

// tcIn is `tc ARGS` in ns's output.
func tcIn(ns *topo.NS, args ...string) string {
	out, _ := exec.Command("tc", append([]string{"-n", ns.Name}, args...)...).CombinedOutput()
	return string(out)
}

// ifbs lists the ifb devices in ns (bandwidth's, for egress).
func ifbs(ns *topo.NS) []string {
	out, _ := exec.Command("ip", "-n", ns.Name, "-o", "link", "show", "type", "ifb").Output()
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, strings.TrimSuffix(f[1], ":"))
		}
	}
	return names
}

// netnsDoer runs a function in a network namespace: a *topo.NS, or a
// namespace the test did not make (a pod sandbox's).
type netnsDoer interface{ Do(fn func() error) error }

// serveOnce listens on port in p and sends payload to each client, then
// closes its connection; stop closes the listener.
func serveOnce(t *testing.T, p netnsDoer, port int, payload []byte) (stop func()) {
	t.Helper()
	var ln net.Listener
	if err := p.Do(func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf(":%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write(payload)
			c.Close()
		}
	}()
	return func() { ln.Close() }
}

// fetch connects from ns to addr and reads until EOF (5 s at most).
func fetch(ns netnsDoer, addr string) ([]byte, error) {
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, 3*time.Second)
		return err
	}); err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return io.ReadAll(c)
}

// TestCNIChain: xdpfwd-cni as the first plugin of a chain with Debian's
// portmap, bandwidth and tuning, driven by cnitool at 0.3.1, 0.4.0 and
// 1.0.0 (Debian's plugins, 1.1.1, speak up to 1.0.0), against a running
// xdpfwd switch, the plugins on a node without ip6tables (ipv4OnlyPath).
// prevResult reaches them as they expect: the final result is at the
// conflist's version and begins with xdpfwd-cni's two interfaces
// (bandwidth adds its ifb);
// portmap's hostPort on the node's outside address, reached from another
// namespace (not the pod), is DNAT'd to the pod through the switch;
// bandwidth found the host end (the interface without a sandbox) and put
// its tbf qdisc and ingress qdisc on it and made its ifb; tuning set its
// sysctl in the pod. CHECK of the whole chain passes (from 0.4.0). DEL
// of the whole chain leaves nothing: no veth, lease, record, xdpfwd
// link, ifb, DNAT rule; the hostPort no longer answers. The "bandwidth"
// capability given to both xdpfwd-cni and the bandwidth plugin (8 Mbit/s
// each way), xdpfwd polices it: a TCP transfer each way through it
// delivers at most rate × elapsed + burst; the bandwidth plugin's qdiscs'
// counters, which the pod's frames never reach, are logged.
func TestCNIChain(t *testing.T) {
	r, d := newSwitchRig(t)
	r.linkPlugins("portmap", "bandwidth", "tuning")
	outside, err := topo.NewNS("c28out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outside.Close() })
	ipIn(t, r.node, []string{"link", "add", "c28n", "type", "veth", "peer", "name", "c28x", "netns", outside.Name},
		[]string{"addr", "add", nodeOutsideCIDR, "dev", "c28n"}, []string{"link", "set", "c28n", "up"})
	ipIn(t, outside, []string{"addr", "add", outsideCIDR, "dev", "c28x"}, []string{"link", "set", "c28x", "up"}, []string{"link", "set", "lo", "up"})
	if out, err := exec.Command("ip", "netns", "exec", r.node.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("ip_forward in the node: %v: %s", err, out)
	}
	nodeOutside := netip.MustParsePrefix(nodeOutsideCIDR).Addr()

	path := ipv4OnlyPath(t)
	const rate = 8_000_000 // bit/s
	for i, v := range []string{"0.3.1", "0.4.0", "1.0.0"} {
		p := r.newPod(fmt.Sprintf("ch%d", i))
		hostPort := 30080 + i
		conf := r.pluginConf(r.hostLocalIPAM())
		conf["capabilities"] = map[string]any{"bandwidth": true} // xdpfwd-cni's, xdpfwd polices it
		r.writeConflist(v, append([]map[string]any{conf}, chainPlugins()...)...)
		capArgs := fmt.Sprintf(`CAP_ARGS={"portMappings":[{"hostPort":%d,"containerPort":8080,"protocol":"tcp"}],`+
			`"bandwidth":{"ingressRate":%d,"ingressBurst":%d,"egressRate":%d,"egressBurst":%d}}`, hostPort, rate, rate/8, rate, rate/8)
		out, err := r.cnitoolEnv("add", p, capArgs, path)
		if err != nil {
			t.Errorf("%s: cnitool add of the chain: %v\n%s", v, err, out)
			continue
		}
		host := r.hostName(p)
		res, err := checkChained(v, []byte(out), host, nsPath(p))
		if err != nil {
			t.Errorf("%s: the chain's result: %v\n%s", v, err, out)
			r.cnitoolEnv("del", p, capArgs, path)
			continue
		}
		addr, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
		r.attached(p, addr)

		// portmap: from outside, the node's address and the hostPort.
		payload := []byte(fmt.Sprintf("c28 %s %s", v, p.Name))
		stop := serveOnce(t, p, 8080, payload)
		hp := netip.AddrPortFrom(nodeOutside, uint16(hostPort)).String()
		if got, err := fetch(outside, hp); err != nil || !bytes.Equal(got, payload) {
			nat, _ := exec.Command("ip", "netns", "exec", r.node.Name, "iptables", "-t", "nat", "-S").CombinedOutput()
			t.Errorf("%s: from outside to %s (portmap to %s:8080 through xdpfwd): %q, %v; want %q\nnode's nat table:\n%s", v, hp, addr, got, err, payload, nat)
		}
		// bandwidth: on the host end.
		qd := tcIn(r.node, "qdisc", "show", "dev", host)
		if !strings.Contains(qd, "qdisc tbf") || !strings.Contains(qd, "qdisc ingress") || len(ifbs(r.node)) != 1 {
			t.Errorf("%s: bandwidth on %s: qdiscs %q, ifb devices %q; want tbf and ingress, one ifb", v, host, qd, ifbs(r.node))
		}
		// tuning: in the pod.
		if got, err := podSysctl(p, tunedSysctl); err != nil || got != "1" {
			t.Errorf("%s: tuning's %s in the pod: %q, %v; want 1", v, tunedSysctl, got, err)
		}
		if v == "1.0.0" {
			// The limits through xdpfwd: its policer's; the qdiscs'
			// counters, logged, say what bandwidth's did.
			in, errIn := topo.TCPTransfer(r.node, p, addr, 1<<20, 20*time.Second)
			outT, errOut := topo.TCPTransfer(p, r.node, gatewayAddr, 1<<20, 20*time.Second)
			t.Logf("limits %d bit/s each way: node → pod 1 MiB through xdpfwd at %.2f Mbit/s (%v, %v); pod → node at %.2f Mbit/s (%v, %v); the bandwidth plugin's qdiscs on the host end then:\n%s",
				rate, in.Gbps*1000, in.Elapsed, errIn, outT.Gbps*1000, outT.Elapsed, errOut, tcIn(r.node, "-s", "qdisc", "show", "dev", host))
			for _, x := range []struct {
				dir string
				res topo.TransferResult
				err error
			}{{"node → pod", in, errIn}, {"pod → node", outT, errOut}} {
				// Payload bytes, under the frames policed: no slack.
				if bound := int64(rate/8*x.res.Elapsed.Seconds()) + rate/8; x.err != nil || x.res.Bytes > bound {
					t.Errorf("%s: %d bytes in %v (%v); want the transfer, at most rate × elapsed + burst = %d", x.dir, x.res.Bytes, x.res.Elapsed, x.err, bound)
				}
			}
		}

		if wantCode("CHECK", v) == 0 {
			if out, err := r.cnitoolEnv("check", p, capArgs, path); err != nil {
				t.Errorf("%s: cnitool check of the chain: %v\n%s", v, err, out)
			}
		}
		if out, err := r.cnitoolEnv("del", p, capArgs, path); err != nil {
			t.Errorf("%s: cnitool del of the chain: %v\n%s", v, err, out)
		}
		stop()
		if left := r.leftovers(p); len(left) > 0 {
			t.Errorf("%s: after DEL of the chain: %q left", v, left)
		}
		if ib := ifbs(r.node); len(ib) != 0 {
			t.Errorf("%s: after DEL: bandwidth's ifb %q left", v, ib)
		}
		nat, _ := exec.Command("ip", "netns", "exec", r.node.Name, "iptables", "-t", "nat", "-S").CombinedOutput()
		if strings.Contains(string(nat), fmt.Sprintf("--dport %d", hostPort)) {
			t.Errorf("%s: after DEL: portmap's rule for %d left:\n%s", v, hostPort, nat)
		}
		if got, err := fetch(outside, hp); err == nil {
			t.Errorf("%s: after DEL: %s still answers: %q", v, hp, got)
		}
	}
	d.running()
	if got := d.links(); len(got) != 2 {
		t.Errorf("xdpfwd's links at the end: %q", got)
	}
}

// TestCNIChainedMACChangeChecked: tuning after xdpfwd-cni changing the
// pod's MAC ("mac" of tuning) leaves the pod's link secured for the MAC
// ADD made, so the pod's frames are dropped (spoofed_source): CHECK of
// the chain says so, naming both addresses, where before it passed. The
// same chain with the MAC given to xdpfwd-cni instead passes CHECK.
func TestCNIChainedMACChangeChecked(t *testing.T) {
	r, d := newSwitchRig(t)
	r.linkPlugins("tuning")
	path := ipv4OnlyPath(t)
	const tuned = "02:28:00:00:00:7e"
	for _, tc := range []struct {
		name  string
		conf  func(map[string]any) []map[string]any
		fails bool
	}{
		{"tuning sets the MAC", func(c map[string]any) []map[string]any {
			return []map[string]any{c, {"type": "tuning", "mac": tuned}}
		}, true},
		{"xdpfwd-cni sets the MAC", func(c map[string]any) []map[string]any {
			c["mac"] = tuned
			return []map[string]any{c, {"type": "tuning", "sysctl": map[string]any{tunedSysctl: "1"}}}
		}, false},
	} {
		p := r.newPod("tm")
		r.writeConflist("1.0.0", tc.conf(r.pluginConf(r.hostLocalIPAM()))...)
		if out, err := r.cnitoolEnv("add", p, path); err != nil {
			t.Fatalf("%s: cnitool add: %v\n%s", tc.name, err, out)
		}
		if m, err := p.HardwareAddr("eth0"); err != nil || m.String() != tuned {
			t.Errorf("%s: the pod's MAC %s (%v); want %s", tc.name, m, err, tuned)
		}
		out, err := r.cnitoolEnv("check", p, path)
		t.Logf("%s: cnitool check: %v %s", tc.name, err, strings.TrimSpace(out))
		switch {
		case tc.fails && (err == nil || !strings.Contains(out, "spoofed_source") || !strings.Contains(out, tuned)):
			t.Errorf("%s: CHECK %v, %s; want it to fail naming spoofed_source and %s", tc.name, err, out, tuned)
		case !tc.fails && err != nil:
			t.Errorf("%s: CHECK: %v\n%s", tc.name, err, out)
		}
		if out, err := r.cnitoolEnv("del", p, path); err != nil {
			t.Errorf("%s: cnitool del: %v\n%s", tc.name, err, out)
		}
		if left := r.leftovers(p); len(left) > 0 {
			t.Errorf("%s: after DEL: %q left", tc.name, left)
		}
	}
	d.running()
}
