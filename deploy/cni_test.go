package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"go.yaml.in/yaml/v3"
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
	if nds != 1 || ncm != 1 || len(ds.Spec.Template.Spec.Containers) != 1 || len(ds.Spec.Template.Spec.InitContainers) != 1 {
		t.Fatalf("%s: %d DaemonSets, %d ConfigMaps, %d containers, %d init containers; want 1 each",
			cniManifestFile, nds, ncm, len(ds.Spec.Template.Spec.Containers), len(ds.Spec.Template.Spec.InitContainers))
	}
	return ds, cm
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
// whose control socket is the one the conflist names, on the node; its
// init container installs the plugin and that conflist into the node's
// /opt/cni/bin and /etc/cni/net.d; and what it installs is a conflist
// libcni loads.
func TestCNIDaemonSet(t *testing.T) {
	ds, cm := loadCNIManifest(t)
	c := ds.Spec.Template.Spec.Containers[0]
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

	var key string
	for k := range cm.Data {
		if strings.HasSuffix(k, ".conflist") {
			key = k
		}
	}
	var list struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
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
	if p := list.Plugins[0]; list.CNIVersion != "1.1.0" || p.Type != "xdpfwd-cni" || p.Control != ctl || p.IPAM.Type == "" {
		t.Errorf("conflist: version %s, plugin %+v; want 1.1.0, xdpfwd-cni on control %s with an IPAM", list.CNIVersion, p, ctl)
	}

	ic := ds.Spec.Template.Spec.InitContainers[0]
	if len(ic.Command) < 2 || ic.Command[0] != "/usr/local/bin/xdpfwd-cni" || ic.Command[1] != "install" {
		t.Fatalf("init container command %v: want /usr/local/bin/xdpfwd-cni install ...", ic.Command)
	}
	conflist := flagValue(ic.Command, "conflist")
	binDir, confDir := flagValue(ic.Command, "bin-dir"), flagValue(ic.Command, "conf-dir")
	if filepath.Base(conflist) != key || hostPathOf(ds, ic, filepath.Dir(conflist)) != "" {
		t.Errorf("--conflist %s: want the ConfigMap's %s", conflist, key)
	}
	if hostPathOf(ds, ic, binDir) != "/opt/cni/bin" || hostPathOf(ds, ic, confDir) != "/etc/cni/net.d" {
		t.Errorf("--bin-dir %s, --conf-dir %s: want the node's /opt/cni/bin and /etc/cni/net.d", binDir, confDir)
	}

	// Run the install as the init container would, into temp directories.
	dir := t.TempDir()
	plugin := filepath.Join(dir, "xdpfwd-cni")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/xdpfwd-cni")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/xdpfwd-cni: %v\n%s", err, out)
	}
	src := filepath.Join(dir, key)
	os.WriteFile(src, []byte(cm.Data[key]), 0o644)
	bin, net := filepath.Join(dir, "opt-cni-bin"), filepath.Join(dir, "etc-cni-net.d")
	if out, err := exec.Command(plugin, "install", "--conflist="+src, "--bin-dir="+bin, "--conf-dir="+net).CombinedOutput(); err != nil {
		t.Fatalf("xdpfwd-cni install: %v\n%s", err, out)
	}
	if fi, err := os.Stat(filepath.Join(bin, "xdpfwd-cni")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("installed plugin: %v, %v", fi, err)
	}
	l, err := libcni.ConfListFromFile(filepath.Join(net, key))
	if err != nil || l.Name == "" || len(l.Plugins) != 1 || l.Plugins[0].Network.Type != "xdpfwd-cni" {
		t.Errorf("installed conflist: %+v, %v", l, err)
	}
}
