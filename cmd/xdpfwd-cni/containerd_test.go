package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/xdpfwd/xdpfwd/internal/image"
)

// containerd is a containerd the test runs with directories of its own.
type containerd struct {
	t    *testing.T
	dir  string
	sock string
	ns   string // ctr's namespace
	cmd  *exec.Cmd
	// ctrPrefix runs ctr in the node namespace with the test's CNI
	// directories bound over /etc/cni/net.d and /opt/cni/bin and its cache
	// over /var/lib/cni (ip netns exec gives it a mount namespace of its
	// own, so nothing of that is seen outside).
	ctrPrefix []string
	log       lockedBuilder
}

// startContainerd runs containerd in the host's namespaces (runc needs
// the host's /sys/fs/cgroup, which ip netns exec's fresh /sys hides), its
// root, state, sockets and opt directory under dir, the CRI plugin off.
func startContainerd(t *testing.T, bin, dir string) (*containerd, time.Duration) {
	t.Helper()
	return runContainerd(t, dir, `disabled_plugins = ["io.containerd.grpc.v1.cri"]`, "", func(cfg string) *exec.Cmd {
		return exec.Command(bin, "--config", cfg)
	})
}

// runContainerd writes containerd's configuration (root, state, sockets
// and opt directory under dir; top's keys at its top, tables' at its end)
// and runs containerd with it, the command made by cmd given its path; it
// waits until containerd answers, and stops it at the test's end.
func runContainerd(t *testing.T, dir, top, tables string, cmd func(cfgPath string) *exec.Cmd) (*containerd, time.Duration) {
	t.Helper()
	c := &containerd{t: t, dir: dir, sock: filepath.Join(dir, "c.sock"), ns: "xdpfwdtest"}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
%s
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
%s`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), top, c.sock, c.sock+".ttrpc", filepath.Join(dir, "opt"), tables)
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The shims' sockets, runc's state and ctr's FIFOs go under
	// /run/containerd whatever the state directory: what of it the test
	// made goes at its end, once empty.
	if _, err := os.Stat("/run/containerd"); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { removeEmptyDirs("/run/containerd") })
	}
	start := time.Now()
	c.cmd = cmd(cfgPath)
	c.cmd.Stderr = &c.log
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			c.cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := exec.Command("ctr", "--address", c.sock, "version").Run(); err == nil {
			return c, time.Since(start)
		}
		select {
		case err := <-exited:
			t.Fatalf("containerd exited: %v\n%s", err, c.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer on %s\n%s", c.sock, c.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// removeEmptyDirs removes dir and the directories under it, those left
// empty once their own are gone.
func removeEmptyDirs(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			removeEmptyDirs(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir) // fails if not empty
}

// ctr runs ctr against the test's containerd, in its namespace.
func (c *containerd) ctr(args ...string) (string, error) {
	var cmd *exec.Cmd
	all := append([]string{"--address", c.sock, "-n", c.ns}, args...)
	if c.ctrPrefix != nil {
		cmd = exec.Command(c.ctrPrefix[0], append(slices.Clone(c.ctrPrefix[1:]), all...)...)
	} else {
		cmd = exec.Command("ctr", all...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// testData is what the containers' web servers serve: 1 MiB of a
// pseudo-random pattern.
func testData() []byte {
	b := make([]byte, 1<<20)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// busyboxImage writes a docker-archive (docker save's format) of one
// layer: the static busybox, links to the applets the test uses, and
// /www/data.
func busyboxImage(t *testing.T, busybox, path, tag string) {
	t.Helper()
	files := busyboxFiles(t, busybox, "sh", "ping", "httpd", "wget", "sha256sum", "ip", "sleep")
	files = append(files, image.File{Path: "www/data", Mode: 0o644, Data: testData()})
	writeImage(t, path, image.Image{Tag: tag, Files: files, Config: image.Config{Cmd: []string{"/bin/sh"}}})
}

// busyboxFiles are an image's files for the static busybox: the
// directories a container needs, and a link per applet.
func busyboxFiles(t *testing.T, busybox string, applets ...string) []image.File {
	t.Helper()
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	files := []image.File{{Path: "bin/busybox", Mode: 0o755, Data: bb}}
	for _, d := range []string{"proc", "sys", "dev", "tmp", "etc"} {
		files = append(files, image.File{Path: d, Dir: true, Mode: 0o755})
	}
	for _, a := range applets {
		files = append(files, image.File{Path: "bin/" + a, Link: "busybox", Mode: 0o777})
	}
	return files
}

// writeImage writes img to path as a docker-archive.
func writeImage(t *testing.T, path string, img image.Image) {
	t.Helper()
	var b bytes.Buffer
	if _, err := image.Write(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mountPoint makes dir exist (for a bind mount in ctr's mount namespace)
// and removes at the test's end what it had to create.
func mountPoint(t *testing.T, dir string) {
	t.Helper()
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range made {
			os.Remove(d) // only if still empty
		}
	})
}

// TestCNIContainerd: a real container runtime, containerd with runc,
// runs two busybox containers whose network its CNI support (ctr run
// --cni) sets up through the plugin, onto a running xdpfwd switch; they
// ping each other and fetch 1 MiB from each other's web server (checked
// by SHA-256) through it. ctr -d never calls DEL, so the test does, from
// libcni's cached result, before the tasks go: no lease, no link in
// xdpfwd, no veth is left. It logs how long each step takes.
func TestCNIContainerd(t *testing.T) { testContainerd(t, false) }

// TestCNIContainerdChain is TestCNIContainerd with the plugin first in a
// chain with Debian's portmap, bandwidth (its limits in the
// configuration: ctr passes no runtimeConfig) and tuning: tuning's sysctl
// is set in each container, bandwidth's qdiscs are on its host end, and
// DEL of the chain removes bandwidth's ifb too.
func TestCNIContainerdChain(t *testing.T) { testContainerd(t, true) }

func testContainerd(t *testing.T, chain bool) {
	r := newRig(t, 0)
	bin := need(t, "containerd")
	need(t, "ctr")
	need(t, "runc", "/usr/sbin/runc")
	busybox := need(t, "busybox", "/bin/busybox")
	if f, err := elf.Open(busybox); err != nil || slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		t.Fatalf("%s: not a static executable (%v): the image has no libc; install busybox-static", busybox, err)
	}
	r.daemon.srv.Close(time.Second) // the stand-in makes way for xdpfwd
	for _, up := range []string{"up0", "up1"} {
		ipIn(t, r.node, []string{"link", "add", up, "type", "veth", "peer", "name", up + "p"},
			[]string{"link", "set", up, "up"}, []string{"link", "set", up + "p", "up"})
	}
	d := startXdpfwd(t, buildXdpfwd(t, r.dir), r.node, r.ctl, "--mode", "switch", "--link", "up0", "--link", "up1", "--queues", "1")
	r.forwards = d.forwards

	// ctr's CNI configuration: the containerd 1.6 ctr's libcni speaks CNI
	// up to 1.0.0.
	ctrNet := filepath.Join(r.dir, "ctr-net.d")
	cache := filepath.Join(r.dir, "ctr-cache")
	os.MkdirAll(ctrNet, 0o755)
	os.MkdirAll(cache, 0o755)
	plugins := []any{map[string]any{
		"type": "xdpfwd-cni", "control": r.ctl, "mtu": testMTU, "stateDir": r.stateDir,
		"ipam": map[string]any{"type": "host-local", "dataDir": r.ipamDir, "ranges": []any{[]any{map[string]any{"subnet": "10.98.0.0/24"}}}},
	}}
	if chain {
		r.linkPlugins("portmap", "bandwidth", "tuning")
		for _, p := range chainPlugins() {
			if p["type"] == "bandwidth" {
				p = map[string]any{"type": "bandwidth", "ingressRate": 8_000_000, "ingressBurst": 1_000_000, "egressRate": 8_000_000, "egressBurst": 1_000_000}
			}
			plugins = append(plugins, p)
		}
	}
	conflist, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": r.netName, "plugins": plugins})
	if err := os.WriteFile(filepath.Join(ctrNet, "10-xdpfwd.conflist"), conflist, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"/etc/cni/net.d", "/opt/cni/bin", "/var/lib/cni"} {
		mountPoint(t, m)
	}

	cd, startup := startContainerd(t, bin, filepath.Join(r.dir, "containerd"))
	cd.ctrPrefix = []string{"ip", "netns", "exec", r.node.Name, "sh", "-c",
		fmt.Sprintf(`mount --bind %s /etc/cni/net.d && mount --bind %s /opt/cni/bin && mount --bind %s /var/lib/cni && exec ctr "$@"`, ctrNet, r.cniPath, cache), "ctr"}

	image := filepath.Join(r.dir, "busybox.tar")
	busyboxImage(t, busybox, image, "xdpfwd-cni-test:latest")
	start := time.Now()
	if _, err := cd.ctr("image", "import", image); err != nil {
		t.Fatal(err)
	}
	imported := time.Since(start)
	const ref = "docker.io/library/xdpfwd-cni-test:latest"

	names := []string{"c0", "c1"}
	var runTimes []time.Duration
	type ctrInfo struct {
		pid  int
		rt   *libcni.RuntimeConf
		addr string
		host string
	}
	infos := make([]ctrInfo, len(names))
	list, err := libcni.LoadNetworkConf(ctrNet, r.netName)
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{r.cniPath}, cache, nil)
	removed := map[string]bool{}
	t.Cleanup(func() {
		for _, n := range names {
			if !removed[n] {
				cd.ctr("task", "kill", "-s", "KILL", n)
				cd.ctr("task", "rm", "-f", n)
				cd.ctr("container", "rm", n)
			}
		}
	})
	for i, n := range names {
		start := time.Now()
		if _, err := cd.ctr("run", "--cni", "-d", "--null-io", ref, n, "/bin/httpd", "-f", "-p", "8080", "-h", "/www"); err != nil {
			t.Fatalf("%v\ncontainerd: %s", err, cd.log.String())
		}
		runTimes = append(runTimes, time.Since(start))
		out, err := cd.ctr("task", "ls")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) >= 3 && f[0] == n {
				infos[i].pid, _ = strconv.Atoi(f[1])
			}
		}
		if infos[i].pid == 0 {
			t.Fatalf("ctr task ls: no task %s:\n%s", n, out)
		}
		// ctr names the attachment NAMESPACE-ID.
		infos[i].rt = &libcni.RuntimeConf{ContainerID: cd.ns + "-" + n, NetNS: fmt.Sprintf("/proc/%d/ns/net", infos[i].pid), IfName: "eth0"}
		res, err := cni.GetNetworkListCachedResult(list, infos[i].rt)
		if err != nil || res == nil {
			ents, _ := os.ReadDir(filepath.Join(cache, "results"))
			t.Fatalf("%s: no cached CNI result (%v); the cache has %v", n, err, ents)
		}
		cr, err := current.NewResultFromResult(res)
		if err != nil || len(cr.IPs) != 1 {
			t.Fatalf("%s: cached result %v, %v", n, res, err)
		}
		infos[i].addr = cr.IPs[0].Address.IP.String()
		infos[i].host = HostName(infos[i].rt.ContainerID, "eth0")
		if !r.hostLink(infos[i].host) || !d.forwards(infos[i].host) || !slices.Contains(r.leases(), infos[i].addr) {
			t.Fatalf("%s: host veth %s %v, xdpfwd forwards it %v, lease %s %v", n, infos[i].host, r.hostLink(infos[i].host), d.forwards(infos[i].host), infos[i].addr, r.leases())
		}
		if chain {
			// busybox's sh reads the sysctl (the image has no cat).
			file := "/proc/sys/" + strings.ReplaceAll(tunedSysctl, ".", "/")
			out, err := cd.ctr("task", "exec", "--exec-id", "sysctl"+n, n, "sh", "-c", "read x < "+file+"; echo $x")
			if err != nil || strings.TrimSpace(out) != "1" {
				t.Errorf("%s: tuning's %s in the container: %q, %v; want 1", n, tunedSysctl, out, err)
			}
			qd := tcIn(r.node, "qdisc", "show", "dev", infos[i].host)
			if !strings.Contains(qd, "qdisc tbf") || !strings.Contains(qd, "qdisc ingress") || len(ifbs(r.node)) != i+1 {
				t.Errorf("%s: bandwidth on %s: qdiscs %q, ifb devices %q; want tbf and ingress, %d ifb", n, infos[i].host, qd, ifbs(r.node), i+1)
			}
		}
	}
	version, _ := exec.Command(bin, "--version").Output()
	t.Logf("%s: started in %v, image imported in %v, ctr run --cni -d: %v", strings.TrimSpace(string(version)), startup, imported, runTimes)

	want := sha256.Sum256(testData())
	start = time.Now()
	for i, n := range names {
		peer := infos[1-i]
		if out, err := cd.ctr("task", "exec", "--exec-id", "ping"+n, n, "ping", "-c", "3", "-W", "3", peer.addr); err != nil || !strings.Contains(out, "3 packets received") {
			t.Errorf("%s pings %s (%s) through xdpfwd: %v\n%s", n, names[1-i], peer.addr, err, out)
		}
		out, err := cd.ctr("task", "exec", "--exec-id", "wget"+n, n, "sh", "-c", "wget -q -O - http://"+peer.addr+":8080/data | sha256sum")
		if got := strings.Fields(out); err != nil || len(got) == 0 || got[0] != hex.EncodeToString(want[:]) {
			t.Errorf("%s fetches 1 MiB from %s (%s) through xdpfwd: %v, sha256 %q, want %x", n, names[1-i], peer.addr, err, out, want)
		}
	}
	t.Logf("2 × ping -c 3 and 2 × 1 MiB over HTTP between the containers, through xdpfwd: %v", time.Since(start))

	// DEL, as a runtime that cleans up calls it, then the tasks go.
	for i, n := range names {
		start := time.Now()
		var err error
		r.node.Do(func() error {
			err = cni.DelNetworkList(context.Background(), list, infos[i].rt)
			return nil
		})
		if err != nil {
			t.Errorf("DEL %s: %v", n, err)
		}
		t.Logf("DEL %s: %v", n, time.Since(start))
		h := infos[i].host
		if r.hostLink(h) || d.forwards(h) || slices.Contains(r.leases(), infos[i].addr) {
			t.Errorf("after DEL %s: host veth %s %v, xdpfwd forwards it %v, lease %s %v", n, h, r.hostLink(h), d.forwards(h), infos[i].addr, r.leases())
		}
		if _, err := os.Stat(filepath.Join(r.stateDir, r.netName, h+".json")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after DEL %s: state record %v", n, err)
		}
		for _, args := range [][]string{{"task", "kill", "-s", "KILL", n}, {"task", "rm", "-f", n}, {"container", "rm", n}} {
			if _, err := cd.ctr(args...); err != nil && args[0] != "task" {
				t.Error(err)
			}
		}
		removed[n] = true
	}
	if got := d.links(); !slices.Equal(got, []string{"up0", "up1"}) {
		t.Errorf("xdpfwd's links at the end: %q", got)
	}
	if ib := ifbs(r.node); len(ib) != 0 {
		t.Errorf("bandwidth's ifb devices left after DEL: %q", ib)
	}
	d.running()
}
