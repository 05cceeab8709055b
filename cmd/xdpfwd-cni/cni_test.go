package main

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// need finds a tool the test drives, or skips (fails under
// XDPFWD_REQUIRE_INTEGRATION=1: .ci/install installs them).
func need(t *testing.T, name string, more ...string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, p := range more {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	msg := fmt.Sprintf("%s not found (PATH, %s): .ci/install installs it", name, strings.Join(more, ", "))
	if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
		t.Fatal(msg + "; XDPFWD_REQUIRE_INTEGRATION=1 forbids skipping")
	}
	t.Skip(msg)
	return ""
}

// bridgeDaemon stands in for xdpfwd: it serves the link protocol on a
// control socket, and its link add enslaves the host veth to a Linux
// bridge in the node namespace (del releases it), so traffic between the
// pods really flows through what the plugin set up.
type bridgeDaemon struct {
	t      *testing.T
	node   *topo.NS
	bridge string
	srv    *control.Server

	mu     sync.Mutex
	links  []string
	refuse string // a name whose add is refused
	queues int    // what link list says an added link needs
	// addRefused is what link list says of why every add would be
	// refused (a daemon left without sockets).
	addRefused string
}

func (d *bridgeDaemon) List() (linkop.List, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := linkop.List{Mode: "switch", Queues: d.queues, AddRefused: d.addRefused}
	for _, n := range d.links {
		l.Links = append(l.Links, linkop.Link{Name: n})
	}
	return l, nil
}

func (d *bridgeDaemon) Add(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Contains(d.links, name) {
		return fmt.Errorf("link %s: %w", name, linkop.ErrExists)
	}
	if name == d.refuse {
		return fmt.Errorf("link %s: refused by the test: %w", name, linkop.ErrUnsupported)
	}
	if out, err := exec.Command("ip", "-n", d.node.Name, "link", "set", name, "master", d.bridge, "up").CombinedOutput(); err != nil {
		return fmt.Errorf("link %s: %v: %s", name, err, out)
	}
	d.links = append(d.links, name)
	return nil
}

func (d *bridgeDaemon) Del(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	i := slices.Index(d.links, name)
	if i < 0 {
		return fmt.Errorf("link %s: %w", name, linkop.ErrUnknownLink)
	}
	d.links = slices.Delete(d.links, i, i+1)
	// Gone with its namespace is fine, as for xdpfwd.
	exec.Command("ip", "-n", d.node.Name, "link", "set", name, "nomaster").Run()
	return nil
}

func (d *bridgeDaemon) setRefuse(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.refuse = name
}

func (d *bridgeDaemon) has(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Contains(d.links, name)
}

func (d *bridgeDaemon) serve(path string) {
	srv, err := control.Listen(path)
	if err != nil {
		d.t.Fatal(err)
	}
	d.srv = srv
	go srv.Serve(func(c net.Conn) {
		op, rc, err := control.ReadOp(c, 5*time.Second)
		if err != nil || !linkop.IsOp(op) {
			c.Close()
			return
		}
		linkop.Serve(rc, d)
	})
}

// rig is a node namespace (where cnitool, the plugin, the host veths and
// the bridge live), pods, a temp CNI_PATH and NETCONFPATH.
type rig struct {
	t        *testing.T
	node     *topo.NS
	daemon   *bridgeDaemon
	dir      string
	cnitool  string
	cniPath  string
	netDir   string
	ipamDir  string
	stateDir string
	ctl      string
	pods     []*topo.NS
	netName  string
	// forwards reports whether the daemon forwards a link: the stand-in's
	// list, or xdpfwd's link list.
	forwards func(name string) bool
}

const testMTU = 1400

func newRig(t *testing.T, pods int) *rig {
	t.Helper()
	return newRigTags(t, pods, "")
}

// newRigTags is newRig with the plugin built with the build tags given
// (killpoint_hook.go's, for one).
func newRigTags(t *testing.T, pods int, tags string) *rig {
	t.Helper()
	topo.RequireRoot(t)
	r := &rig{t: t, dir: t.TempDir(), netName: "xdpfwd-cni-test"}
	r.cnitool = need(t, "cnitool", "/root/go/bin/cnitool", filepath.Join(os.Getenv("HOME"), "go/bin/cnitool"))
	hostLocal := need(t, "host-local", "/usr/lib/cni/host-local", "/opt/cni/bin/host-local")
	need(t, "ip")

	r.cniPath = filepath.Join(r.dir, "bin")
	os.MkdirAll(r.cniPath, 0o755)
	build := exec.Command("go", "build", "-tags", tags, "-o", filepath.Join(r.cniPath, "xdpfwd-cni"), ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build xdpfwd-cni: %v\n%s", err, out)
	}
	if err := os.Symlink(hostLocal, filepath.Join(r.cniPath, "host-local")); err != nil {
		t.Fatal(err)
	}
	r.netDir = filepath.Join(r.dir, "net.d")
	r.ipamDir = filepath.Join(r.dir, "ipam")
	r.stateDir = filepath.Join(r.dir, "state")
	r.ctl = filepath.Join(r.dir, "ctl.sock")
	os.MkdirAll(r.netDir, 0o755)
	conflist := map[string]any{
		"cniVersion": "1.1.0",
		"name":       r.netName,
		"plugins": []any{map[string]any{
			"type":     "xdpfwd-cni",
			"control":  r.ctl,
			"mtu":      testMTU,
			"stateDir": r.stateDir,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": r.ipamDir,
				"ranges":  []any{[]any{map[string]any{"subnet": "10.99.0.0/24"}}},
			},
		}},
	}
	b, _ := json.Marshal(conflist)
	if err := os.WriteFile(filepath.Join(r.netDir, r.netName+".conflist"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	var err error
	if r.node, err = topo.NewNS("cninode"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.node.Close() })
	for _, args := range [][]string{{"link", "add", "br0", "type", "bridge"}, {"link", "set", "br0", "up"}, {"link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", append([]string{"-n", r.node.Name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	r.daemon = &bridgeDaemon{t: t, node: r.node, bridge: "br0"}
	r.forwards = r.daemon.has
	r.daemon.serve(r.ctl)
	t.Cleanup(func() { r.daemon.srv.Close(time.Second) })
	for i := range pods {
		p, err := topo.NewNS(fmt.Sprintf("pod%d", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		r.pods = append(r.pods, p)
	}
	t.Cleanup(func() {
		// libcni's cache of cnitool's results, under /var/lib/cni.
		for _, p := range r.pods {
			os.Remove(filepath.Join("/var/lib/cni/results", r.netName+"-"+r.containerID(p)+"-eth0"))
		}
	})
	return r
}

func nsPath(p *topo.NS) string { return filepath.Join("/run/netns", p.Name) }

// containerID is the ID cnitool gives a namespace's attachment.
func (r *rig) containerID(p *topo.NS) string {
	s := sha512.Sum512([]byte(nsPath(p)))
	return fmt.Sprintf("cnitool-%x", s[:10])
}

func (r *rig) hostName(p *topo.NS) string { return HostName(r.containerID(p), "eth0") }

// cnitool runs cnitool CMD on pod in the node namespace, as a runtime
// would, and returns its output.
func (r *rig) cnitoolRun(cmd string, p *topo.NS) (string, error) {
	return r.cnitoolRunAs(cmd, p, "eth0")
}

// cnitoolRunAs is cnitoolRun with CNI_IFNAME ifname.
func (r *rig) cnitoolRunAs(cmd string, p *topo.NS, ifname string) (string, error) {
	c := exec.Command("ip", "netns", "exec", r.node.Name, r.cnitool, cmd, r.netName, nsPath(p))
	c.Env = append(os.Environ(), "CNI_PATH="+r.cniPath, "NETCONFPATH="+r.netDir, "CNI_IFNAME="+ifname)
	out, err := c.CombinedOutput()
	return string(out), err
}

func (r *rig) add(p *topo.NS) netip.Addr {
	r.t.Helper()
	start := time.Now()
	out, err := r.cnitoolRun("add", p)
	if err != nil {
		r.t.Fatalf("cnitool add %s: %v\n%s", p.Name, err, out)
	}
	addTimes = append(addTimes, time.Since(start))
	var res current.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		r.t.Fatalf("cnitool add %s: result %v\n%s", p.Name, err, out)
	}
	if len(res.Interfaces) != 2 || res.Interfaces[0].Name != r.hostName(p) || res.Interfaces[1].Name != "eth0" ||
		res.Interfaces[1].Sandbox != nsPath(p) || len(res.IPs) != 1 || res.IPs[0].Interface == nil || *res.IPs[0].Interface != 1 {
		r.t.Fatalf("cnitool add %s: result %s; want host %s and eth0 in %s, one address on eth0", p.Name, out, r.hostName(p), nsPath(p))
	}
	a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	return a
}

func (r *rig) del(p *topo.NS) {
	r.t.Helper()
	if out, err := r.cnitoolRun("del", p); err != nil {
		r.t.Fatalf("cnitool del %s: %v\n%s", p.Name, err, out)
	}
}

var addTimes []time.Duration

// hostLink reports whether the node namespace has link name.
func (r *rig) hostLink(name string) bool {
	err := exec.Command("ip", "-n", r.node.Name, "link", "show", "dev", name).Run()
	return err == nil
}

// leases are the addresses host-local has handed out.
func (r *rig) leases() []string {
	ents, _ := os.ReadDir(filepath.Join(r.ipamDir, r.netName))
	var out []string
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// gone checks that nothing of p's attachment is left.
func (r *rig) gone(p *topo.NS, addr netip.Addr) {
	r.t.Helper()
	h := r.hostName(p)
	deadline := time.Now().Add(5 * time.Second)
	for (r.hostLink(h) || r.forwards(h)) && time.Now().Before(deadline) {
		// A namespace's links go with it, a little later; and the daemon
		// hears of it after that.
		time.Sleep(20 * time.Millisecond)
	}
	if r.hostLink(h) || r.forwards(h) || slices.Contains(r.leases(), addr.String()) {
		r.t.Errorf("%s after DEL: host veth %s there %v, daemon has it %v, lease %s held %v",
			p.Name, h, r.hostLink(h), r.forwards(h), addr, slices.Contains(r.leases(), addr.String()))
	}
	if _, err := os.Stat(filepath.Join(r.stateDir, r.netName, h+".json")); !errors.Is(err, os.ErrNotExist) {
		r.t.Errorf("%s after DEL: state record %v", p.Name, err)
	}
}

// attached checks the pod's attachment: the daemon has the host end,
// eth0 has the address and the MTU.
func (r *rig) attached(p *topo.NS, addr netip.Addr) {
	r.t.Helper()
	h := r.hostName(p)
	if !r.hostLink(h) || !r.forwards(h) || !slices.Contains(r.leases(), addr.String()) {
		r.t.Errorf("%s: host veth %v, daemon has %s %v, lease %s %v", p.Name, r.hostLink(h), h, r.forwards(h), addr, slices.Contains(r.leases(), addr.String()))
	}
	err := p.Do(func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if l.Attrs().MTU != testMTU {
			return fmt.Errorf("eth0 MTU %d, want %d", l.Attrs().MTU, testMTU)
		}
		as, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(as) != 1 || as[0].IP.String() != addr.String() {
			return fmt.Errorf("eth0 addresses %v (%v), want %s", as, err, addr)
		}
		return nil
	})
	if err != nil {
		r.t.Errorf("%s: %v", p.Name, err)
	}
}

// reach pings b from a and sends a byte-checked TCP stream a → b.
func (r *rig) reach(a, b *topo.NS, addrB netip.Addr, n int64) error {
	if pr, err := topo.Ping(a, addrB, 1, 3*time.Second); err != nil || pr.Received != 1 {
		return fmt.Errorf("ping %s → %s (%s): %+v, %v", a.Name, b.Name, addrB, pr, err)
	}
	if n > 0 {
		if tr, err := topo.TCPTransfer(a, b, addrB, n, 10*time.Second); err != nil || tr.Bytes != n {
			return fmt.Errorf("tcp %s → %s (%s): %d of %d bytes, %v", a.Name, b.Name, addrB, tr.Bytes, n, err)
		}
	}
	return nil
}

// libcni is a runtime's library against the rig's directories, run in
// the node namespace (a process inherits its forking thread's).
// gcKeeping runs GC with pods keep (by index) the valid attachments, and
// checks that the pods drop are gone and those kept still attached.
func (r *rig) gcKeeping(addrs []netip.Addr, keep, drop []int) {
	r.t.Helper()
	var valid []types.GCAttachment
	for _, i := range keep {
		valid = append(valid, types.GCAttachment{ContainerID: r.containerID(r.pods[i]), IfName: "eth0"})
	}
	if err := r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
		return c.GCNetworkList(context.Background(), list, &libcni.GCArgs{ValidAttachments: valid})
	}); err != nil {
		r.t.Fatalf("GC: %v", err)
	}
	for _, i := range drop {
		r.gone(r.pods[i], addrs[i])
	}
	for _, i := range keep {
		r.attached(r.pods[i], addrs[i])
	}
}

func (r *rig) libcni(fn func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error) error {
	list, err := libcni.LoadNetworkConf(r.netDir, r.netName)
	if err != nil {
		return err
	}
	// An empty cache: the plugin's GC must find stale attachments itself
	// (libcni's would DEL the ones it cached before asking).
	c := libcni.NewCNIConfigWithCacheDir([]string{r.cniPath}, r.t.TempDir(), nil)
	return r.node.Do(func() error {
		runtime.LockOSThread() // Do's goroutine is locked already; said for the reader
		return fn(c, list)
	})
}

// TestCNIRuntime drives the plugin as a runtime would: cnitool (and
// libcni for GC with valid attachments, and STATUS's code) against a
// bridge-backed stand-in for xdpfwd, 8 pods.
func TestCNIRuntime(t *testing.T) {
	const pods = 8
	r := newRig(t, pods)
	addrs := make([]netip.Addr, pods)
	addTimes = nil
	for i, p := range r.pods {
		addrs[i] = r.add(p)
	}
	for i, p := range r.pods {
		r.attached(p, addrs[i])
	}
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("ADD: %d, median %v, max %v", len(addTimes), median(addTimes), slices.Max(addTimes))

	// Every ordered pair pings; every unordered pair carries 1 MiB, byte
	// for byte.
	start := time.Now()
	for i := range pods {
		for j := range pods {
			if i == j {
				continue
			}
			n := int64(0)
			if i < j {
				n = 1 << 20
			}
			if err := r.reach(r.pods[i], r.pods[j], addrs[j], n); err != nil {
				t.Error(err)
			}
		}
	}
	t.Logf("56 pings, 28 TCP transfers of 1 MiB: %v", time.Since(start))

	if out, err := r.cnitoolRun("check", r.pods[0]); err != nil {
		t.Errorf("cnitool check %s: %v\n%s", r.pods[0].Name, err, out)
	}

	// Delete half, then add them back, while a TCP stream between two
	// others runs throughout.
	stopStream := startStream(t, r.pods[pods-1], r.pods[pods-2], addrs[pods-2])
	for i := range pods / 2 {
		r.del(r.pods[i])
	}
	for i := range pods / 2 {
		r.gone(r.pods[i], addrs[i])
	}
	for i := pods / 2; i < pods; i++ {
		r.attached(r.pods[i], addrs[i])
	}
	if err := r.reach(r.pods[pods-1], r.pods[pods-2], addrs[pods-2], 1<<20); err != nil {
		t.Errorf("the other half after the deletes: %v", err)
	}
	for i := range pods / 2 {
		addrs[i] = r.add(r.pods[i])
		r.attached(r.pods[i], addrs[i])
	}
	st := stopStream()
	if st.Err != nil || st.Got != st.Sent || st.Sent == 0 {
		t.Errorf("TCP stream %s → %s during the deletes and adds: %d bytes sent, %d received in order, %v", r.pods[pods-1].Name, r.pods[pods-2].Name, st.Sent, st.Got, st.Err)
	}
	t.Logf("TCP stream during 4 DELs and 4 ADDs: %d bytes, all received in order, %d retransmitted segments", st.Got, st.Retrans)
	for i := range pods / 2 {
		j := i + pods/2
		if err := r.reach(r.pods[i], r.pods[j], addrs[j], 1<<20); err != nil {
			t.Errorf("re-added: %v", err)
		}
		if err := r.reach(r.pods[j], r.pods[i], addrs[i], 0); err != nil {
			t.Errorf("re-added: %v", err)
		}
	}

	// CHECK sees an address taken away.
	if err := r.pods[1].Do(func() error {
		return exec.Command("ip", "addr", "flush", "dev", "eth0").Run()
	}); err != nil {
		t.Fatal(err)
	}
	if out, err := r.cnitoolRun("check", r.pods[1]); err == nil {
		t.Errorf("cnitool check %s without its address: succeeded\n%s", r.pods[1].Name, out)
	}

	// DEL twice.
	r.del(r.pods[0])
	r.del(r.pods[0])
	r.gone(r.pods[0], addrs[0])

	// DEL after the namespace is gone.
	r.pods[2].Close()
	r.del(r.pods[2])
	r.gone(r.pods[2], addrs[2])

	// GC: pods 4 and 5 are valid; 1, 3, 6 and 7 are not (0 and 2 are gone).
	r.gcKeeping(addrs, []int{4, 5}, []int{1, 3, 6, 7})
	if err := r.reach(r.pods[4], r.pods[5], addrs[5], 1<<20); err != nil {
		t.Errorf("valid attachments after GC: %v", err)
	}
	if got := r.leases(); len(got) != 2 {
		t.Errorf("leases after GC: %v; want pods 4 and 5's", got)
	}

	// STATUS: ready with the daemon, code 50 without.
	if out, err := r.cnitoolRun("status", r.pods[4]); err != nil {
		t.Errorf("cnitool status with the daemon up: %v\n%s", err, out)
	}
	r.daemon.srv.Close(time.Second)
	r.daemon.mu.Lock()
	r.daemon.links = nil // a stopped daemon forwards nothing
	r.daemon.mu.Unlock()
	if out, err := r.cnitoolRun("status", r.pods[4]); err == nil {
		t.Errorf("cnitool status with the daemon stopped: succeeded\n%s", out)
	}
	err := r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
		return c.GetStatusNetworkList(context.Background(), list)
	})
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrPluginNotAvailable {
		t.Errorf("STATUS with the daemon stopped: %v; want CNI error code 50", err)
	}
	// DEL with the daemon gone still cleans up.
	r.del(r.pods[4])
	r.gone(r.pods[4], addrs[4])
	r.del(r.pods[5])
}

// TestCNIVethQueues: ADD makes both ends of the veth with as many RX and
// TX queues as the daemon's link list says an added link needs (one per
// worker; 0, a daemon that does not say, is one).
func TestCNIVethQueues(t *testing.T) {
	r := newRig(t, 1)
	p := r.pods[0]
	for _, tc := range []struct{ daemon, want int }{{0, 1}, {1, 1}, {2, 2}, {4, 4}} {
		r.daemon.mu.Lock()
		r.daemon.queues = tc.daemon
		r.daemon.mu.Unlock()
		a := r.add(p)
		var got []string
		for _, side := range []struct {
			ns   *topo.NS
			name string
		}{{r.node, r.hostName(p)}, {p, "eth0"}} {
			side.ns.Do(func() error {
				l, err := netlink.LinkByName(side.name)
				if err != nil {
					t.Errorf("daemon queues %d: %s: %v", tc.daemon, side.name, err)
					return nil
				}
				if l.Attrs().NumRxQueues != tc.want || l.Attrs().NumTxQueues != tc.want {
					got = append(got, fmt.Sprintf("%s %d RX/%d TX", side.name, l.Attrs().NumRxQueues, l.Attrs().NumTxQueues))
				}
				return nil
			})
		}
		if len(got) > 0 {
			t.Errorf("daemon says %d queues: %s; want %d RX and %d TX on both ends", tc.daemon, strings.Join(got, ", "), tc.want, tc.want)
		}
		r.del(p)
		r.gone(p, a)
	}
}

// TestCNIAddUndo: an ADD the daemon refuses leaves nothing behind (veth,
// lease, record) and reports the refusal.
func TestCNIAddUndo(t *testing.T) {
	r := newRig(t, 1)
	p := r.pods[0]
	r.daemon.setRefuse(r.hostName(p))
	out, err := r.cnitoolRun("add", p)
	if err == nil || !strings.Contains(out, "xdpfwd refused") {
		t.Fatalf("cnitool add refused by the daemon: %v\n%s; want a failure naming the refusal", err, out)
	}
	if r.hostLink(r.hostName(p)) || len(r.leases()) != 0 {
		t.Errorf("after the refused ADD: host veth %v, leases %v; want none", r.hostLink(r.hostName(p)), r.leases())
	}
	if err := p.Do(func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			return errors.New("eth0 still in the pod")
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	r.daemon.setRefuse("")
	a := r.add(p)
	r.attached(p, a)
	r.del(p)
	r.gone(p, a)

	// No daemon: ADD builds nothing and says to try again later (11).
	r.daemon.srv.Close(time.Second)
	err = r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
		_, err := c.AddNetworkList(context.Background(), list, &libcni.RuntimeConf{ContainerID: r.containerID(p), NetNS: nsPath(p), IfName: "eth0"})
		return err
	})
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Errorf("ADD without a daemon: %v; want CNI error code 11", err)
	}
	if r.hostLink(r.hostName(p)) || len(r.leases()) != 0 {
		t.Errorf("after ADD without a daemon: host veth %v, leases %v; want none", r.hostLink(r.hostName(p)), r.leases())
	}
}

// streamResult is what a stream from startStream did.
type streamResult struct {
	Sent, Got int64 // bytes written, and received as written
	// Retrans is the sender's retransmitted segments (TCP_INFO): each a
	// segment lost, or feared lost, on the way; DSACKed those the receiver
	// said it had already (spurious: a late ACK, not a loss); OutOfOrder
	// the segments the receiver got after a gap (a loss, or reordering).
	Retrans, DSACKed, OutOfOrder uint32
	Err                          error // the first error of either side: a reset, a mismatch
}

// startStream opens a TCP connection from a to addrB in b and writes to it
// every millisecond until stop, which then returns the bytes sent, the
// bytes received as sent (a counter pattern, checked byte for byte), the
// sender's retransmissions and the first error of either side.
func startStream(t *testing.T, a, b *topo.NS, addrB netip.Addr) (stop func() streamResult) {
	t.Helper()
	var ln net.Listener
	if err := b.Do(func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addrB, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	if err := a.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second)
		return err
	}); err != nil {
		ln.Close()
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	ln.Close()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	rd := make(chan result, 1)
	var ooo uint32
	go func() {
		defer srv.Close()
		send := func(r result) { ooo = tcpInfo(srv).Rcv_ooopack; rd <- r }
		var n int64
		buf := make([]byte, 64<<10)
		for {
			k, err := srv.Read(buf)
			for _, x := range buf[:k] {
				if x != byte(n%251) {
					send(result{n, fmt.Errorf("byte %d: %d, want %d", n, x, n%251)})
					return
				}
				n++
			}
			if err == io.EOF {
				send(result{n, nil})
				return
			}
			if err != nil {
				send(result{n, err})
				return
			}
		}
	}()
	done := make(chan struct{})
	wr := make(chan result, 1)
	go func() {
		var n int64
		chunk := make([]byte, 4096)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				err := c.(*net.TCPConn).CloseWrite()
				wr <- result{n, err}
				return
			case <-tick.C:
			}
			for i := range chunk {
				chunk[i] = byte((n + int64(i)) % 251)
			}
			c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			k, err := c.Write(chunk)
			n += int64(k)
			if err != nil {
				wr <- result{n, err}
				return
			}
		}
	}()
	return func() streamResult {
		close(done)
		w := <-wr
		var rr result
		var outOfOrder uint32
		select {
		case rr = <-rd:
			outOfOrder = ooo
		case <-time.After(10 * time.Second):
			rr.err = errors.New("the receiver did not see the end of the stream")
		}
		ti := tcpInfo(c)
		c.Close()
		return streamResult{w.n, rr.n, ti.Total_retrans, ti.Dsack_dups, outOfOrder, errors.Join(w.err, rr.err)}
	}
}

// tcpInfo is c's TCP_INFO, zero if it cannot be had.
func tcpInfo(c net.Conn) (ti unix.TCPInfo) {
	if raw, err := c.(*net.TCPConn).SyscallConn(); err == nil {
		raw.Control(func(fd uintptr) {
			if i, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				ti = *i
			}
		})
	}
	return ti
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// lockedBuilder is a strings.Builder a process writes while the test
// reads it.
type lockedBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
