package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	gonet "net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	"go.yaml.in/yaml/v3"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/linkop"
)

const cniManifestFile = "kubernetes/xdpfwd-cni.yaml"

// loadCNIManifest decodes xdpfwd-cni.yaml's DaemonSet and ConfigMap.
func loadCNIManifest(t *testing.T) (daemonSet, configMap) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, cniManifestFile)))
	var ds daemonSet
	var cm configMap
	var nds, ncm int
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", cniManifestFile, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		var head struct {
			Kind string `yaml:"kind"`
		}
		doc.Decode(&head)
		var err error
		switch head.Kind {
		case "DaemonSet":
			nds++
			err = doc.Decode(&ds)
		case "ConfigMap":
			ncm++
			err = doc.Decode(&cm)
		case "Namespace":
		default:
			t.Errorf("%s: unexpected kind %q", cniManifestFile, head.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", cniManifestFile, head.Kind, err)
		}
	}
	if nds != 1 || ncm != 1 || len(ds.Spec.Template.Spec.Containers) != 2 {
		t.Fatalf("%s: %d DaemonSets, %d ConfigMaps, %d containers; want 1, 1 and 2 (xdpfwd, install-cni)",
			cniManifestFile, nds, ncm, len(ds.Spec.Template.Spec.Containers))
	}
	return ds, cm
}

// cniContainer is the container of xdpfwd-cni.yaml's pod named name.
func cniContainer(t *testing.T, ds daemonSet, name string) container {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%s: no container %q", cniManifestFile, name)
	return container{}
}

// hostPathOf is the node directory mounted at mountPath in c, or "".
func hostPathOf(ds daemonSet, c container, mountPath string) string {
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) != filepath.Clean(mountPath) {
			continue
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.HostPath != nil {
				return v.HostPath.Path
			}
		}
	}
	return ""
}

// TestCNIDaemonSet: xdpfwd-cni.yaml's xdpfwd is a switch on one uplink
// whose control socket is the one the conflist names, on the node, Ready
// while /healthz says it forwards; the pod's install-cni container (not
// an init container: those run before the daemon) installs the plugin
// and that conflist into the node's /opt/cni/bin and /etc/cni/net.d once
// xdpfwd is available on that socket, and sleeps. Its command, run as the
// container would (paths moved to temporary directories), installs
// nothing while no daemon answers, installs a conflist libcni loads once
// one is available, keeps running, and exits 0 on SIGTERM leaving it.
func TestCNIDaemonSet(t *testing.T) {
	ds, cm := loadCNIManifest(t)
	c := cniContainer(t, ds, "xdpfwd")
	checkHandoverUpdate(t, ds, c)
	if !ds.Spec.Template.Spec.HostNetwork {
		t.Error("not hostNetwork: the uplink and the pods' veths are the node's")
	}

	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["xdpfwd.yaml"]), &cfg); err != nil || len(cfg) == 0 {
		t.Fatalf("ConfigMap xdpfwd.yaml: %v", err)
	}
	flags := xdpfwdRunFlags(t)
	for k := range cfg {
		if !flags[k] || k == "config" {
			t.Errorf("xdpfwd.yaml: key %q is not a flag of `xdpfwd run`", k)
		}
	}
	links, _ := cfg["link"].([]any)
	ctl, _ := cfg["control"].(string)
	if cfg["mode"] != "switch" || len(links) != 1 {
		t.Errorf("xdpfwd.yaml: mode %v, links %v; want a switch on one uplink", cfg["mode"], cfg["link"])
	}
	if filepath.Dir(ctl) != "/run/xdpfwd" || hostPathOf(ds, c, "/run/xdpfwd") != "/run/xdpfwd" {
		t.Errorf("control %q: want it in /run/xdpfwd, mounted from the node's /run/xdpfwd (the plugin runs on the node)", ctl)
	}
	if rp := c.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/healthz" {
		t.Errorf("xdpfwd's readinessProbe %+v: want GET /healthz (Ready while it forwards)", rp)
	} else if port, ok := resolvePort(c, rp.HTTPGet.Port); !ok || port != metricsPort(t, c) {
		t.Errorf("readinessProbe port %v: want the --metrics port %d", rp.HTTPGet.Port, metricsPort(t, c))
	}

	var key string
	for k := range cm.Data {
		if strings.HasSuffix(k, ".conflist") {
			key = k
		}
	}
	var list struct {
		CNIVersion  string   `json:"cniVersion"`
		CNIVersions []string `json:"cniVersions"`
		Plugins     []struct {
			Type    string `json:"type"`
			Control string `json:"control"`
			IPAM    struct {
				Type string `json:"type"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(cm.Data[key]), &list); err != nil || len(list.Plugins) != 1 {
		t.Fatalf("ConfigMap %s: %v (%d plugins)", key, err, len(list.Plugins))
	}
	// containerd 1.6 and 1.7 refuse a 1.1.0 result; runtimes of spec
	// 1.1.0 take the highest of cniVersions.
	if p := list.Plugins[0]; list.CNIVersion != "1.0.0" || !slices.Equal(list.CNIVersions, []string{"1.0.0", "1.1.0"}) ||
		p.Type != "xdpfwd-cni" || p.Control != ctl || p.IPAM.Type == "" {
		t.Errorf("conflist: version %s (versions %q), plugin %+v; want 1.0.0 (1.0.0 and 1.1.0), xdpfwd-cni on control %s with an IPAM",
			list.CNIVersion, list.CNIVersions, p, ctl)
	}
	if lc, err := libcni.ConfListFromBytes([]byte(cm.Data[key])); err != nil || lc.CNIVersion != "1.1.0" {
		t.Errorf("conflist as libcni %s reads it: %+v, %v; want version 1.1.0", version.Current(), lc, err)
	}

	// The gate: no init container installs (it would run before xdpfwd).
	for _, ic := range ds.Spec.Template.Spec.InitContainers {
		if slices.Contains(ic.Command, "install") || slices.Contains(ic.Args, "install") {
			t.Errorf("init container %s installs the plugin: it runs before xdpfwd, so the runtime would see the network first", ic.Name)
		}
	}
	ic := cniContainer(t, ds, "install-cni")
	if len(ic.Command) < 2 || ic.Command[0] != "/usr/local/bin/xdpfwd-cni" || ic.Command[1] != "install" {
		t.Fatalf("install-cni command %v: want /usr/local/bin/xdpfwd-cni install ...", ic.Command)
	}
	conflist := flagValue(ic.Command, "conflist")
	binDir, confDir := flagValue(ic.Command, "bin-dir"), flagValue(ic.Command, "conf-dir")
	waitFor := flagValue(ic.Command, "wait-for-daemon")
	if filepath.Base(conflist) != key || hostPathOf(ds, ic, filepath.Dir(conflist)) != "" {
		t.Errorf("--conflist %s: want the ConfigMap's %s", conflist, key)
	}
	if hostPathOf(ds, ic, binDir) != "/opt/cni/bin" || hostPathOf(ds, ic, confDir) != "/etc/cni/net.d" {
		t.Errorf("--bin-dir %s, --conf-dir %s: want the node's /opt/cni/bin and /etc/cni/net.d", binDir, confDir)
	}
	if waitFor != ctl || hostPathOf(ds, ic, filepath.Dir(waitFor)) != "/run/xdpfwd" {
		t.Errorf("--wait-for-daemon %q: want xdpfwd's control socket %s, from the node's /run/xdpfwd", waitFor, ctl)
	}
	if !slices.Contains(ic.Command, "--sleep") {
		t.Errorf("install-cni command %v: no --sleep (a container of the pod that exits is restarted, again and again)", ic.Command)
	}

	// Run it as the container would, its paths moved to temporary
	// directories and a stand-in for xdpfwd.
	dir := t.TempDir()
	plugin := buildCNIPlugin(t, dir)
	src := filepath.Join(dir, key)
	os.WriteFile(src, []byte(cm.Data[key]), 0o644)
	bin, net := filepath.Join(dir, "opt-cni-bin"), filepath.Join(dir, "etc-cni-net.d")
	sock := filepath.Join(dir, "ctl.sock")
	moved := map[string]string{conflist: src, binDir: bin, confDir: net, waitFor: sock}
	var args []string
	for _, a := range ic.Command[2:] {
		if k, v, ok := strings.Cut(a, "="); ok && moved[v] != "" {
			a = k + "=" + moved[v]
		}
		args = append(args, a)
	}
	cmd := exec.Command(plugin, append([]string{"install"}, args...)...)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	installed := func() bool {
		_, berr := os.Stat(filepath.Join(bin, "xdpfwd-cni"))
		_, cerr := os.Stat(filepath.Join(net, key))
		return berr == nil && cerr == nil
	}
	until(5*time.Second, func() bool { return strings.Contains(stderr.String(), "waiting for xdpfwd") })
	if !strings.Contains(stderr.String(), "waiting for xdpfwd") || installed() {
		t.Fatalf("install-cni without xdpfwd: says %q, installed %v; want it waiting, nothing installed", stderr.String(), installed())
	}
	serveForwarding(t, sock)
	if !until(5*time.Second, installed) {
		t.Fatalf("install-cni with xdpfwd available: nothing installed within 5 s\n%s", stderr.String())
	}
	if fi, err := os.Stat(filepath.Join(bin, "xdpfwd-cni")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("installed plugin: %v, %v", fi, err)
	}
	l, err := libcni.ConfListFromFile(filepath.Join(net, key))
	if err != nil || l.Name == "" || len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "xdpfwd-cni" {
		t.Errorf("installed conflist: %+v, %v", l, err)
	}
	select {
	case err := <-exited:
		exited <- err
		t.Fatalf("install-cni exited after installing: %v\n%s", err, stderr.String())
	default:
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("install-cni on SIGTERM: %v; want exit 0\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("install-cni: no exit within 5 s of SIGTERM\n%s", stderr.String())
	}
	if !installed() {
		t.Error("install-cni's exit removed what it installed: the conflist stays (README)")
	}
}

// buildCNIPlugin builds cmd/xdpfwd-cni into dir, as deploy/image does.
func buildCNIPlugin(t *testing.T, dir string) string {
	t.Helper()
	plugin := filepath.Join(dir, "xdpfwd-cni")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/xdpfwd-cni")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/xdpfwd-cni: %v\n%s", err, out)
	}
	return plugin
}

// until polls cond until it holds or within passes; it returns cond's
// last answer.
func until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

// forwarding is a stand-in for xdpfwd that lists one link and says it
// forwards.
type forwarding struct{}

func (forwarding) List() (linkop.List, error) {
	return linkop.List{Mode: "switch", Links: []linkop.Link{{Name: "eth1"}}, Health: linkop.HealthForwarding}, nil
}
func (forwarding) Add(string) error { return linkop.ErrUnsupported }
func (forwarding) Del(string) error { return linkop.ErrUnknownLink }

// serveForwarding serves the stand-in's link ops on a control socket at
// path until the test ends.
func serveForwarding(t *testing.T, path string) {
	t.Helper()
	srv, err := control.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(time.Second) })
	go srv.Serve(func(c gonet.Conn) {
		op, rc, err := control.ReadOp(c, 5*time.Second)
		if err != nil || !linkop.IsOp(op) {
			c.Close()
			return
		}
		linkop.Serve(rc, forwarding{})
	})
}

// lockedBuffer is a bytes.Buffer a process writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
