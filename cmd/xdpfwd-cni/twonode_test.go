package main

import (
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// Two nodes of one L2 network: each an xdpfwd switch in a namespace of
// its own, its uplink one end of a veth wire whose other end is the
// other node's uplink. The pods of both are in one subnet, each node's
// host-local handing out a range of its own.
const (
	wireSubnet  = "10.28.0.0/16"
	wireNet     = "n28"   // the network's name, the same on both nodes
	wireUplink  = "n28up" // each node's end of the wire
	wireFDBAge  = 4 * time.Second
	podsPerNode = 2 // per node
)

// wireNode is one node: its namespace, its xdpfwd and its CNI
// configuration, state and IPAM store.
type wireNode struct {
	name   string
	ns     *topo.NS
	d      *xdpfwdProc
	netDir string
	pods   []*wirePod
}

// wirePod is a pod: its namespace, MAC and address, on a node.
type wirePod struct {
	ns   *topo.NS
	mac  net.HardwareAddr
	addr netip.Addr
	host string // its link's name, the veth's host end
}

// twoNodes is what the test runs: the binaries and the two nodes.
type twoNodes struct {
	t       *testing.T
	dir     string
	cnitool string
	cniPath string
	nodes   [2]*wireNode
	// cached are cnitool's result cache files, removed at the end.
	cached []string
}

// newTwoNodes builds the plugin and the daemon, and makes the two nodes
// (namespaces tag+"node1" and tag+"node2"), the wire between them (each
// node's end named uplink) and each node's switch on it, run with args
// beyond the mode, the uplink, one queue and 8 links.
func newTwoNodes(t *testing.T, tag, uplink string, args ...string) *twoNodes {
	topo.RequireRoot(t)
	r := &twoNodes{t: t, dir: t.TempDir()}
	r.cnitool = need(t, "cnitool", "/root/go/bin/cnitool", filepath.Join(os.Getenv("HOME"), "go/bin/cnitool"))
	hostLocal := need(t, "host-local", "/usr/lib/cni/host-local", "/opt/cni/bin/host-local")
	static := need(t, "static", "/usr/lib/cni/static", "/opt/cni/bin/static")
	need(t, "ip")
	r.cniPath = filepath.Join(r.dir, "bin")
	os.MkdirAll(r.cniPath, 0o755)
	buildPlugin(t, r.cniPath)
	for _, p := range []string{hostLocal, static} {
		if err := os.Symlink(p, filepath.Join(r.cniPath, filepath.Base(p))); err != nil {
			t.Fatal(err)
		}
	}
	xdpfwd := buildXdpfwd(t, r.dir)
	t.Cleanup(func() {
		for _, f := range r.cached {
			os.Remove(f)
		}
	})
	for i := range r.nodes {
		n := &wireNode{name: "node" + strconv.Itoa(i+1), netDir: filepath.Join(r.dir, fmt.Sprintf("node%d-net.d", i+1))}
		var err error
		if n.ns, err = topo.NewNS(tag + "node" + strconv.Itoa(i+1)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.ns.Close() })
		ipIn(t, n.ns, []string{"link", "set", "lo", "up"}) // the daemon's --metrics, if any
		os.MkdirAll(n.netDir, 0o755)
		r.nodes[i] = n
	}
	// The wire: node1's uplink, its peer node2's.
	ipIn(t, r.nodes[0].ns,
		[]string{"link", "add", uplink, "type", "veth", "peer", "name", uplink, "netns", r.nodes[1].ns.Name},
		[]string{"link", "set", uplink, "up"})
	ipIn(t, r.nodes[1].ns, []string{"link", "set", uplink, "up"})
	for _, n := range r.nodes {
		n.d = startXdpfwd(t, xdpfwd, n.ns, filepath.Join(r.dir, n.name+".sock"),
			append([]string{"--mode", "switch", "--link", uplink, "--queues", "1", "--max-links", "8"}, args...)...)
	}
	return r
}

// conflist writes a node's network configuration: the xdpfwd-cni plugin
// on the node's socket, ipam, and the keys of extra.
func (r *twoNodes) conflist(n *wireNode, name string, ipam map[string]any, extra map[string]any) {
	r.t.Helper()
	plugin := map[string]any{
		"type":     "xdpfwd-cni",
		"control":  n.d.ctl,
		"mtu":      testMTU,
		"stateDir": filepath.Join(r.dir, n.name+"-state"),
		"ipam":     ipam,
	}
	maps.Copy(plugin, extra)
	b, _ := json.Marshal(map[string]any{
		"cniVersion": "1.1.0",
		"name":       name,
		"plugins":    []any{plugin},
	})
	if err := os.WriteFile(filepath.Join(n.netDir, name+".conflist"), b, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// cni runs cnitool CMD for pod p on node n (in n's namespace, as its
// runtime would), on network net, with the pod's MAC in CNI_ARGS.
func (r *twoNodes) cni(n *wireNode, cmd, netName string, p *wirePod) (string, error) {
	c := exec.Command("ip", "netns", "exec", n.ns.Name, r.cnitool, cmd, netName, nsPath(p.ns))
	c.Env = append(os.Environ(), "CNI_PATH="+r.cniPath, "NETCONFPATH="+n.netDir,
		"CNI_ARGS=IgnoreUnknown=1;MAC="+p.mac.String())
	out, err := c.CombinedOutput()
	return string(out), err
}

// add attaches p to node n: its address is the ADD result's.
func (r *twoNodes) add(n *wireNode, netName string, p *wirePod) {
	r.t.Helper()
	out, err := r.cni(n, "add", netName, p)
	if err != nil {
		r.t.Fatalf("%s: cnitool add %s: %v\n%s", n.name, p.ns.Name, err, out)
	}
	s := sha512.Sum512([]byte(nsPath(p.ns)))
	r.cached = append(r.cached, filepath.Join("/var/lib/cni/results", fmt.Sprintf("%s-cnitool-%x-eth0", netName, s[:10])))
	var res current.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) != 1 || len(res.Interfaces) != 2 {
		r.t.Fatalf("%s: cnitool add %s: result %v\n%s", n.name, p.ns.Name, err, out)
	}
	if got := res.Interfaces[1].Mac; got != p.mac.String() {
		r.t.Errorf("%s: %s's eth0 has MAC %s, want %s (CNI_ARGS MAC=)", n.name, p.ns.Name, got, p.mac)
	}
	p.addr, _ = netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	p.host = HostName(fmt.Sprintf("cnitool-%x", s[:10]), "eth0")
	if !n.d.forwards(p.host) {
		r.t.Errorf("%s: xdpfwd does not forward %s's host end after ADD: %q", n.name, p.ns.Name, n.d.links())
	}
}

func (r *twoNodes) del(n *wireNode, netName string, p *wirePod) {
	r.t.Helper()
	if out, err := r.cni(n, "del", netName, p); err != nil {
		r.t.Fatalf("%s: cnitool del %s: %v\n%s", n.name, p.ns.Name, err, out)
	}
}

// newPod makes a pod namespace with the MAC given, IPv6 off: a pod that
// says nothing of itself until spoken to (no DAD, no MLD report), so that
// what it takes for the switches to find it after a move is theirs.
func newPod(t *testing.T, name string, mac net.HardwareAddr) *wirePod {
	t.Helper()
	ns, err := topo.NewNS(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	if err := ns.Do(func() error {
		for _, k := range []string{"all", "default"} {
			if _, err := sysctl.Sysctl("net/ipv6/conf/"+k+"/disable_ipv6", "1"); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: disable IPv6: %v", ns.Name, err)
	}
	return &wirePod{ns: ns, mac: mac}
}

// TestCNITwoNodes: pods on two nodes, each node an xdpfwd switch (a real
// daemon, `xdpfwd run --mode switch`) whose uplink is one end of a veth
// wire to the other's, the pods attached by cnitool in each node's
// namespace to one L2 subnet (10.28.0.0/16), each node's host-local
// handing out its own range of it. Every pod pings every pod on the
// other node and sends it 1 MiB over TCP, byte-exact. Then a pod moves
// from node 1 to node 2 (DEL there, ADD here with the same MAC, by
// CNI_ARGS, and the same address): a pod on node 1, whose ARP entry
// still holds that MAC, gets an answer to its first ping, though the
// moved pod says nothing of itself (IPv6 off, no gratuitous ARP): with
// port security, the default, the pod's MAC is pinned on its new link at
// ADD, where unsecured the switches would take up to the FDB's age
// (--fdb-age 4s) to unlearn where it was. All pods DELed at the end
// leave each switch its uplink alone.
func TestCNITwoNodes(t *testing.T) {
	begin := time.Now()
	r := newTwoNodes(t, "n28", wireUplink, "--fdb-age", wireFDBAge.String())
	for i, n := range r.nodes {
		// One subnet, a range per node: 10.28.1.x on node1, 10.28.2.x on node2.
		r.conflist(n, wireNet, map[string]any{
			"type":    "host-local",
			"dataDir": filepath.Join(r.dir, n.name+"-ipam"),
			"ranges": []any{[]any{map[string]any{"subnet": wireSubnet,
				"rangeStart": fmt.Sprintf("10.28.%d.2", i+1), "rangeEnd": fmt.Sprintf("10.28.%d.254", i+1)}}},
		}, nil)
		for k := range podsPerNode {
			p := newPod(t, fmt.Sprintf("n28n%dp%d", i+1, k), net.HardwareAddr{0x02, 0x28, 0, 0, byte(i + 1), byte(k + 1)})
			r.add(n, wireNet, p)
			n.pods = append(n.pods, p)
		}
	}
	setup := time.Since(begin)
	if t.Failed() {
		t.FailNow()
	}
	for i, n := range r.nodes {
		for _, p := range n.pods {
			if want := byte(i + 1); p.addr.As4()[2] != want {
				t.Errorf("%s: %s has %s, want one of 10.28.%d.0/24 (the node's range)", n.name, p.ns.Name, p.addr, want)
			}
		}
	}

	// Every pod to every pod on the other node: a ping and 1 MiB.
	start := time.Now()
	pairs := 0
	for i, n := range r.nodes {
		for _, a := range n.pods {
			for _, b := range r.nodes[1-i].pods {
				pairs++
				if pr, err := topo.Ping(a.ns, b.addr, 1, 3*time.Second); err != nil || pr.Received != 1 {
					t.Errorf("ping %s (%s) → %s (%s, %s): %+v, %v", a.ns.Name, n.name, b.ns.Name, b.addr, r.nodes[1-i].name, pr, err)
					continue
				}
				if tr, err := topo.TCPTransfer(a.ns, b.ns, b.addr, 1<<20, 10*time.Second); err != nil || tr.Bytes != 1<<20 {
					t.Errorf("TCP %s (%s) → %s (%s, %s): %d of %d bytes, %v", a.ns.Name, n.name, b.ns.Name, b.addr, r.nodes[1-i].name, tr.Bytes, 1<<20, err)
				}
			}
		}
	}
	across := time.Since(start)
	t.Logf("across the wire: %d pings and %d TCP transfers of 1 MiB byte-exact (every pod to every pod of the other node): %v", pairs, pairs, across)
	if t.Failed() {
		t.FailNow()
	}

	// The move: node1's pod 0 to node2, same MAC, same address (a
	// network of node2's with static IPAM: the address a migrated VM
	// keeps). node1's pod 1 talks to it just before, so that node2's
	// switch has just seen its MAC come up the wire.
	n1, n2 := r.nodes[0], r.nodes[1]
	peer, old := n1.pods[1], n1.pods[0]
	if pr, err := topo.Ping(peer.ns, old.addr, 1, 3*time.Second); err != nil || pr.Received != 1 {
		t.Fatalf("ping %s → %s before the move: %+v, %v", peer.ns.Name, old.addr, pr, err)
	}
	moved := newPod(t, "n28moved", old.mac)
	r.conflist(n2, wireNet+"-static", map[string]any{
		"type":      "static",
		"addresses": []any{map[string]any{"address": old.addr.String() + "/16"}},
	}, nil)
	moveStart := time.Now()
	r.del(n1, wireNet, old)
	r.add(n2, wireNet+"-static", moved)
	added := time.Since(moveStart)
	if moved.addr != old.addr {
		t.Fatalf("moved pod: address %s, want %s", moved.addr, old.addr)
	}
	// With port security (the daemon's default, the pod's MAC given by
	// CNI_ARGS) the MAC is pinned on its new link at ADD, and node1's
	// switch forgot it with the old link: the first ping is answered,
	// nothing waits for the FDB's age (--fdb-age 4s), which the switches
	// would take to unlearn a MAC that moved unsecured.
	start = time.Now()
	pr, err := topo.Ping(peer.ns, moved.addr, 1, 3*time.Second)
	took := time.Since(start) + added
	if err != nil || pr.Received != 1 {
		t.Fatalf("%s (%s) → the moved pod (%s, %s, now on %s): the first ping after the ADD unanswered (%+v, %v): its pinned MAC not found at once\nnode1 links %q\nnode2 links %q",
			peer.ns.Name, n1.name, moved.addr, moved.mac, n2.name, pr, err, n1.d.links(), n2.d.links())
	}
	t.Logf("moved pod answered the first ping from %s, %v after its DEL on node1 (DEL and ADD took %v; --fdb-age %v)", n1.name, took.Round(time.Millisecond), added.Round(time.Millisecond), wireFDBAge)
	if tr, err := topo.TCPTransfer(peer.ns, moved.ns, moved.addr, 1<<20, 10*time.Second); err != nil || tr.Bytes != 1<<20 {
		t.Errorf("TCP %s → the moved pod: %d of %d bytes, %v", peer.ns.Name, tr.Bytes, 1<<20, err)
	}
	if pr, err := topo.Ping(n2.pods[0].ns, moved.addr, 1, 3*time.Second); err != nil || pr.Received != 1 {
		t.Errorf("ping %s (node2) → the moved pod, on its node: %+v, %v", n2.pods[0].ns.Name, pr, err)
	}

	// All gone: each switch keeps its uplink alone.
	r.del(n2, wireNet+"-static", moved)
	for _, n := range r.nodes {
		for _, p := range n.pods {
			if p != old {
				r.del(n, wireNet, p)
			}
		}
	}
	for _, n := range r.nodes {
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Equal(n.d.links(), []string{wireUplink}) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if got := n.d.links(); !slices.Equal(got, []string{wireUplink}) {
			t.Errorf("%s: xdpfwd's links after every DEL: %q, want %s alone", n.name, got, wireUplink)
		}
		n.d.running()
	}
	t.Logf("two nodes: setup (builds, daemons, %d ADDs) %v, traffic %v, move %v; whole test %v",
		2*podsPerNode, setup.Round(time.Millisecond), across.Round(time.Millisecond), took.Round(time.Millisecond), time.Since(begin).Round(time.Millisecond))
}
