package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/xdpfwd/xdpfwd/internal/image"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// pathNS is a network namespace known by its path (a pod sandbox's,
// which containerd made).
type pathNS string

func (p pathNS) Do(fn func() error) error {
	return ns.WithNetNSPath(string(p), func(ns.NetNS) error { return fn() })
}

// pauseImage writes a docker-archive of a sandbox ("pause") image: the
// static busybox, its sleep as the command. The CRI kills a sandbox with
// SIGKILL, so sleep as PID 1 (deaf to SIGTERM) stops at once.
func pauseImage(t *testing.T, busybox, path, tag string) {
	t.Helper()
	writeImage(t, path, image.Image{Tag: tag, Files: busyboxFiles(t, busybox, "sleep"), Config: image.Config{Cmd: []string{"/bin/sleep", "3600"}}})
}

// criConfig is the CRI plugin's part of containerd's configuration: the
// sandbox image (imported, never pulled), runc, and CNI's directories as
// containerd (in its mount namespace) sees them.
func criConfig(sandboxImage, binDir, confDir string) string {
	return fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = %q
  conf_dir = %q
  max_conf_num = 1
`, sandboxImage, binDir, confDir)
}

// crictl runs crictl against a containerd's CRI, with a configuration
// of its own.
type crictl struct {
	bin, config string
}

func newCrictl(t *testing.T, bin string, cd *containerd) *crictl {
	t.Helper()
	ep := "unix://" + cd.sock
	c := &crictl{bin: bin, config: filepath.Join(cd.dir, "crictl.yaml")}
	conf := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\ntimeout: 20\n", ep, ep)
	if err := os.WriteFile(c.config, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return c
}

// run returns crictl's standard output.
func (c *crictl) run(args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(c.bin, append([]string{"--config", c.config}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("crictl %s: %w: %s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return string(out), nil
}

// removeAtEnd stops and removes, at the test's end, the sandboxes of
// pods that were made and not removed.
func (c *crictl) removeAtEnd(t *testing.T, pods []*sandbox) {
	t.Cleanup(func() {
		for _, p := range pods {
			if p.id != "" && !p.removed {
				c.run("stopp", p.id)
				c.run("rmp", "-f", p.id)
			}
		}
	})
}

// networkReady reports whether crictl info's output says the runtime's
// network is ready.
func (c *crictl) networkReady(info string) bool {
	var i struct {
		Status struct {
			Conditions []struct {
				Type   string
				Status bool
			}
		}
	}
	if json.Unmarshal([]byte(info), &i) != nil {
		return false
	}
	for _, c := range i.Status.Conditions {
		if c.Type == "NetworkReady" {
			return c.Status
		}
	}
	return false
}

// loggingPlugin replaces plugin name in dir by a script that appends
// a line to log, its name, CNI_COMMAND, CNI_CONTAINERID and its stdin
// (the configuration with runtimeConfig), then runs the plugin with that
// stdin.
func loggingPlugin(t *testing.T, dir, name, log string) {
	t.Helper()
	p := filepath.Join(dir, name)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(dir, "real-"+name)
	if err := os.Rename(p, moved); err != nil {
		t.Fatal(err)
	}
	if real == p {
		real = moved
	}
	script := fmt.Sprintf("#!/bin/sh\nin=$(cat)\nprintf '%%s %%s %%s %%s\\n' %q \"$CNI_COMMAND\" \"$CNI_CONTAINERID\" \"$in\" >> %q\nprintf '%%s' \"$in\" | exec %q\n", name, log, real)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// pluginCall is one logged call of a plugin.
type pluginCall struct {
	plugin, command, id string
	conf                map[string]any
}

func pluginCalls(t *testing.T, log string) []pluginCall {
	t.Helper()
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls []pluginCall
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) != 4 {
			t.Errorf("%s: line %q", log, sc.Text())
			continue
		}
		c := pluginCall{plugin: f[0], command: f[1], id: f[2]}
		if err := json.Unmarshal([]byte(f[3]), &c.conf); err != nil {
			t.Errorf("%s %s: stdin %q: %v", f[0], f[1], f[3], err)
		}
		calls = append(calls, c)
	}
	return calls
}

// sandbox is a pod sandbox the CRI ran.
type sandbox struct {
	name, id string
	pid      int
	netns    string // where containerd bind-mounted its network namespace (in its mount namespace)
	addr     netip.Addr
	host     string // the host veth
	removed  bool   // by crictl rmp
}

// TestCNIContainerdCRI runs pod sandboxes as a kubelet does: through
// containerd's CRI (crictl runp, stopp, rmp), with its sandbox image
// built by the test (busybox's sleep) and imported, the conflist
// deploy/ ships (xdpfwd-cni declaring mac, ips and bandwidth, at
// cniVersion 1.0.0 with cniVersions up to 1.1.0: containerd 1.6's libcni
// reads the first) and Debian's portmap after it, onto a running xdpfwd
// switch. containerd runs in the node's
// network namespace and a mount namespace of its own (libcni's cache,
// the sandboxes' namespaces and rootfs mounts stay in it). Two sandboxes
// get addresses, their host veths are xdpfwd's links, they ping each
// other and carry 1 MiB byte for byte through the switch. The CRI turns
// the pod's port_mappings and bandwidth annotations into runtimeConfig
// for the plugins declaring them, in chain order (each plugin's stdin is
// logged; xdpfwd-cni's "mac" and "ips" get nothing from a kubelet): a
// hostPort on the node's outside address, reached from another
// namespace, is DNAT'd to the first sandbox, and xdpfwd polices the
// first sandbox's link at the annotations' rates and secures each for
// its sandbox's MAC (link list). stopp runs DEL of the chain in reverse
// order (rmp again): no host veth, xdpfwd link, lease, state record or
// DNAT rule is left.
func TestCNIContainerdCRI(t *testing.T) {
	r, d := newSwitchRig(t)
	bin := need(t, "containerd")
	need(t, "ctr")
	crictlBin := need(t, "crictl", "/root/go/bin/crictl", filepath.Join(os.Getenv("HOME"), "go/bin/crictl"))
	need(t, "runc", "/usr/sbin/runc")
	need(t, "nsenter")
	need(t, "ping")
	need(t, "unshare")
	busybox := need(t, "busybox", "/bin/busybox")
	if f, err := elf.Open(busybox); err != nil || slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		t.Fatalf("%s: not a static executable (%v): the image has no libc; install busybox-static", busybox, err)
	}
	// containerd's CRI adds a loopback network to every sandbox.
	r.linkPlugins("loopback", "portmap")
	calls := filepath.Join(r.dir, "calls.log")
	chain := []string{"xdpfwd-cni", "portmap"}
	for _, p := range chain {
		loggingPlugin(t, r.cniPath, p, calls)
	}
	conf := r.pluginConf(r.hostLocalIPAM())
	conf["capabilities"] = map[string]any{"mac": true, "ips": true, "bandwidth": true}
	r.writeConflistVersions("1.0.0", []string{"1.0.0", "1.1.0"}, conf,
		map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}})

	// "Outside the node": a namespace on a veth to the node.
	outside, err := topo.NewNS("r28out")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outside.Close() })
	ipIn(t, r.node, []string{"link", "add", "r28n", "type", "veth", "peer", "name", "r28x", "netns", outside.Name},
		[]string{"addr", "add", nodeOutsideCIDR, "dev", "r28n"}, []string{"link", "set", "r28n", "up"})
	ipIn(t, outside, []string{"addr", "add", outsideCIDR, "dev", "r28x"}, []string{"link", "set", "r28x", "up"}, []string{"link", "set", "lo", "up"})
	if out, err := exec.Command("ip", "netns", "exec", r.node.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("ip_forward in the node: %v: %s", err, out)
	}

	// containerd with its CRI: the sandbox image the test imports, the
	// rig's CNI directories. libcni's cache (/var/lib/cni) is the test's,
	// bound over it in containerd's mount namespace.
	const pauseRef = "docker.io/library/r28-pause:1"
	cache := filepath.Join(r.dir, "cni-cache")
	os.MkdirAll(cache, 0o755)
	mountPoint(t, "/var/lib/cni")
	cdDir := filepath.Join(r.dir, "containerd")
	if _, err := os.Stat("/run/containerd"); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { removeEmptyDirs("/run/containerd") })
	}
	// Last resort, after containerd has stopped: the shims and sandbox
	// processes of sandboxes the CRI did not remove (the test's own, by
	// the PIDs in containerd's state directory).
	t.Cleanup(func() { killLeftShims(t, filepath.Join(cdDir, "state", "io.containerd.runtime.v2.task", "k8s.io")) })
	criConf := criConfig(pauseRef, r.cniPath, r.netDir)
	start := time.Now()
	cd, _ := runContainerd(t, cdDir, "", criConf, func(cfg string) *exec.Cmd {
		return exec.Command("nsenter", "--net="+nsPath(r.node), "unshare", "--mount", "--propagation", "private",
			"sh", "-c", `mount --bind "$1" /var/lib/cni && exec "$2" --config "$3"`, "sh", cache, bin, cfg)
	})
	cd.ns = "k8s.io" // the CRI's
	cri := newCrictl(t, crictlBin, cd)
	image := filepath.Join(r.dir, "pause.tar")
	pauseImage(t, busybox, image, "r28-pause:1")
	if _, err := cd.ctr("image", "import", image); err != nil {
		t.Fatal(err)
	}
	// The CRI reports its network ready once it has loaded the conflist.
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err := cri.run("info")
		if err == nil && cri.networkReady(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRI's network not ready: %v\n%s\ncontainerd: %s", err, out, cd.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("containerd with its CRI up, sandbox image imported, network ready: %v", time.Since(start))

	const hostPort, podPort = 30280, 8080
	const rate, rateBits = "8M", 8_000_000
	pods := []*sandbox{{name: "r28-pod0"}, {name: "r28-pod1"}}
	cri.removeAtEnd(t, pods)
	for i, p := range pods {
		cfg := map[string]any{
			"metadata": map[string]any{"name": p.name, "namespace": "r28", "uid": fmt.Sprintf("r28-uid-%d", i), "attempt": 0},
			"hostname": p.name,
			"linux":    map[string]any{},
		}
		if i == 0 {
			cfg["port_mappings"] = []any{map[string]any{"protocol": 0, "container_port": podPort, "host_port": hostPort}}
			cfg["annotations"] = map[string]string{"kubernetes.io/ingress-bandwidth": rate, "kubernetes.io/egress-bandwidth": rate}
		}
		b, _ := json.Marshal(cfg)
		path := filepath.Join(r.dir, p.name+".json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		out, err := cri.run("runp", path)
		if err != nil {
			t.Fatalf("%v\ncontainerd: %s", err, cd.log.String())
		}
		p.id = strings.TrimSpace(out)
		t.Logf("crictl runp %s: %v", p.name, time.Since(start))
		out, err = cri.run("inspectp", "-o", "json", p.id)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Status struct {
				State   string
				Network struct{ IP string }
			}
			Info struct {
				Pid         int
				RuntimeSpec struct {
					Linux struct {
						Namespaces []struct{ Type, Path string }
					}
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("crictl inspectp %s: %v\n%s", p.name, err, out)
		}
		for _, n := range st.Info.RuntimeSpec.Linux.Namespaces {
			if n.Type == "network" {
				p.netns = n.Path
			}
		}
		p.pid = st.Info.Pid
		p.addr, _ = netip.ParseAddr(st.Status.Network.IP)
		p.host = HostName(p.id, "eth0")
		if st.Status.State != "SANDBOX_READY" || p.pid == 0 || p.netns == "" || !netip.MustParsePrefix(podSubnet).Contains(p.addr) {
			t.Fatalf("%s: state %q, pid %d, netns %q, IP %v; want ready, an address in %s\n%s", p.name, st.Status.State, p.pid, p.netns, p.addr, podSubnet, out)
		}
		if !r.hostLink(p.host) || !d.forwards(p.host) || !slices.Contains(r.leases(), p.addr.String()) {
			t.Fatalf("%s: host veth %s %v, xdpfwd forwards it %v, lease %s %v", p.name, p.host, r.hostLink(p.host), d.forwards(p.host), p.addr, r.leases())
		}
	}

	// The sandboxes reach each other through xdpfwd: ping, and 1 MiB
	// from a server in one's namespace to a client in the other's.
	netns := func(p *sandbox) pathNS { return pathNS(fmt.Sprintf("/proc/%d/ns/net", p.pid)) }
	data := testData()
	for i, p := range pods {
		peer := pods[1-i]
		if out, err := exec.Command("nsenter", "--net="+string(netns(p)), "ping", "-c", "1", "-W", "3", peer.addr.String()).CombinedOutput(); err != nil {
			t.Errorf("%s pings %s (%s) through xdpfwd: %v\n%s", p.name, peer.name, peer.addr, err, out)
		}
		stop := serveOnce(t, netns(peer), podPort, data)
		got, err := fetch(netns(p), netip.AddrPortFrom(peer.addr, podPort).String())
		stop()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s fetches 1 MiB from %s (%s) through xdpfwd: %d bytes, equal %v, %v", p.name, peer.name, peer.addr, len(got), bytes.Equal(got, data), err)
		}
	}

	// The pod's port mapping: from outside, the node's address and the
	// hostPort, DNAT'd by portmap to the first sandbox through xdpfwd.
	payload := []byte("r28 hostPort")
	stop := serveOnce(t, netns(pods[0]), podPort, payload)
	hp := netip.AddrPortFrom(netip.MustParsePrefix(nodeOutsideCIDR).Addr(), hostPort).String()
	if got, err := fetch(outside, hp); err != nil || !bytes.Equal(got, payload) {
		nat, _ := exec.Command("ip", "netns", "exec", r.node.Name, "iptables", "-t", "nat", "-S").CombinedOutput()
		t.Errorf("from outside to %s (portmap to %s:%d): %q, %v; want %q\nnode's nat table:\n%s", hp, pods[0].addr, podPort, got, err, payload, nat)
	}
	stop()
	// The pod's bandwidth annotations: xdpfwd polices the first
	// sandbox's link at their rates; each is secured for its MAC.
	l := d.list()
	for i, p := range pods {
		k, ok := l.Link(p.host)
		var mac net.HardwareAddr
		if err := netns(p).Do(func() (err error) {
			ifc, err := net.InterfaceByName("eth0")
			if err == nil {
				mac = ifc.HardwareAddr
			}
			return err
		}); err != nil {
			t.Fatalf("%s: eth0: %v", p.name, err)
		}
		policed := k.Bandwidth != nil && k.Bandwidth.IngressRate == rateBits && k.Bandwidth.EgressRate == rateBits
		if !ok || k.MAC != mac.String() || policed != (i == 0) || i > 0 && k.Bandwidth != nil {
			t.Errorf("%s: xdpfwd's link %s: %+v (listed %v); want port security for %s, policed at %d bit/s each way: %v", p.name, p.host, k, ok, mac, rateBits, i == 0)
		}
	}

	// What each plugin got from the CRI, in which order: the pod's
	// port_mappings and bandwidth annotations as runtimeConfig of the
	// plugins that declare the capability, the first sandbox's only.
	for i, p := range pods {
		var order []string
		for _, c := range pluginCalls(t, calls) {
			if c.command != "ADD" || c.id != p.id {
				continue
			}
			order = append(order, c.plugin)
			rc, _ := json.Marshal(c.conf["runtimeConfig"])
			t.Logf("%s: ADD %s: cniVersion %v, runtimeConfig %s", p.name, c.plugin, c.conf["cniVersion"], rc)
			var got struct {
				PortMappings []struct {
					HostPort, ContainerPort int
					Protocol                string
				}
				Bandwidth *struct{ IngressRate, EgressRate int }
			}
			json.Unmarshal(rc, &got)
			var ok bool
			switch {
			case i > 0:
				ok = c.conf["runtimeConfig"] == nil
			case c.plugin == "portmap":
				ok = len(got.PortMappings) == 1 && got.PortMappings[0].HostPort == hostPort &&
					got.PortMappings[0].ContainerPort == podPort && got.PortMappings[0].Protocol == "tcp" && got.Bandwidth == nil
			case c.plugin == "xdpfwd-cni":
				ok = got.Bandwidth != nil && got.Bandwidth.IngressRate == rateBits && got.Bandwidth.EgressRate == rateBits && got.PortMappings == nil
			}
			if !ok {
				t.Errorf("%s: ADD %s got runtimeConfig %s; want the pod's port mapping %d → %d, its rates %s (%d bit/s) to plugins declaring them", p.name, c.plugin, rc, hostPort, podPort, rate, rateBits)
			}
		}
		if !slices.Equal(order, chain) {
			t.Errorf("%s: ADDs %q; want %q", p.name, order, chain)
		}
	}

	// stopp tears the network down (DEL); rmp removes the sandbox (and
	// calls DEL again).
	for _, p := range pods {
		start := time.Now()
		for _, step := range []string{"stopp", "rmp"} {
			if _, err := cri.run(step, p.id); err != nil {
				t.Errorf("%v\ncontainerd: %s", err, cd.log.String())
			}
			t.Logf("crictl %s %s: %v", step, p.name, time.Since(start))
			start = time.Now()
			if r.hostLink(p.host) || d.forwards(p.host) || slices.Contains(r.leases(), p.addr.String()) {
				t.Errorf("after %s %s: host veth %s %v, xdpfwd forwards it %v, lease %s %v", step, p.name, p.host, r.hostLink(p.host), d.forwards(p.host), p.addr, r.leases())
			}
			if _, err := os.Stat(filepath.Join(r.stateDir, r.netName, p.host+".json")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after %s %s: state record %v", step, p.name, err)
			}
		}
		p.removed = true
	}
	// DEL of the chain runs in reverse order (each time the CRI calls it).
	reverse := slices.Clone(chain)
	slices.Reverse(reverse)
	for _, p := range pods {
		var dels []string
		for _, c := range pluginCalls(t, calls) {
			if c.command == "DEL" && c.id == p.id {
				dels = append(dels, c.plugin)
			}
		}
		if len(dels) == 0 || len(dels)%len(chain) != 0 || slices.ContainsFunc(slices.Collect(slices.Chunk(dels, len(chain))), func(d []string) bool { return !slices.Equal(d, reverse) }) {
			t.Errorf("%s: DELs %q; want %q each time", p.name, dels, reverse)
		}
		t.Logf("%s: DEL of the chain %d times", p.name, len(dels)/len(chain))
	}
	nat, _ := exec.Command("ip", "netns", "exec", r.node.Name, "iptables", "-t", "nat", "-S").CombinedOutput()
	if strings.Contains(string(nat), fmt.Sprintf("--dport %d", hostPort)) {
		t.Errorf("after rmp: portmap's rule for %d left:\n%s", hostPort, nat)
	}
	if got := d.links(); !slices.Equal(got, []string{"up0", "up1"}) {
		t.Errorf("xdpfwd's links at the end: %q", got)
	}
	d.running()
}

// killLeftShims kills the processes of the shims' bundles under dir
// (init.pid, shim.pid): only those a failed test left.
func killLeftShims(t *testing.T, dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		for _, f := range []string{"init.pid", "shim.pid"} {
			b, err := os.ReadFile(filepath.Join(dir, e.Name(), f))
			if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				t.Logf("killing %s's %s %d", e.Name(), f, pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
