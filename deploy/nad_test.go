package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"go.yaml.in/yaml/v3"
)

const nadFile = "kubernetes/xdpfwd-nad.yaml"

// TestNetworkAttachmentDefinition: xdpfwd-nad.yaml's Multus
// NetworkAttachmentDefinitions (a flat network, a VLAN access network,
// a trunk) each have a config that is an xdpfwd-cni network at a spec
// version NADs commonly give (0.3.1 or 0.4.0), on the control socket
// xdpfwd-cni.yaml's xdpfwd serves, without routes (the pod's default
// route stays on its primary network). The plugin takes each as Multus
// hands it over (multusAdd).
func TestNetworkAttachmentDefinition(t *testing.T) {
	type nad struct {
		APIVersion string     `yaml:"apiVersion"`
		Kind       string     `yaml:"kind"`
		Metadata   objectMeta `yaml:"metadata"`
		Spec       struct {
			Config string `yaml:"config"`
		} `yaml:"spec"`
	}
	var nads []nad
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, nadFile)))
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", nadFile, err)
		}
		if len(doc.Content) == 0 {
			continue
		}
		var n nad
		if err := doc.Decode(&n); err != nil {
			t.Fatalf("%s: %v", nadFile, err)
		}
		nads = append(nads, n)
	}
	if len(nads) == 0 {
		t.Fatalf("%s: no NetworkAttachmentDefinition", nadFile)
	}
	dir := t.TempDir()
	plugin := buildCNIPlugin(t, dir)
	_, cm := loadCNIManifest(t)
	var cfg map[string]any
	yaml.Unmarshal([]byte(cm.Data["xdpfwd.yaml"]), &cfg)
	names, vlans := map[string]bool{}, map[string]bool{}
	for _, n := range nads {
		if n.APIVersion != "k8s.cni.cncf.io/v1" || n.Kind != "NetworkAttachmentDefinition" || n.Metadata.Name == "" || names[n.Metadata.Name] {
			t.Fatalf("%s: %+v; want k8s.cni.cncf.io/v1 NetworkAttachmentDefinitions, each with a name of its own", nadFile, n)
		}
		names[n.Metadata.Name] = true
		config := []byte(n.Spec.Config)
		var conf struct {
			CNIVersion string `json:"cniVersion"`
			Name       string `json:"name"`
			Type       string `json:"type"`
			Control    string `json:"control"`
			IPAM       struct {
				Type   string `json:"type"`
				Routes []any  `json:"routes"`
			} `json:"ipam"`
			VLAN  *int  `json:"vlan"`
			Trunk []any `json:"trunk"`
		}
		if err := json.Unmarshal(config, &conf); err != nil {
			t.Fatalf("%s: %s: spec.config: %v", nadFile, n.Metadata.Name, err)
		}
		if !slices.Contains([]string{"0.3.1", "0.4.0"}, conf.CNIVersion) || conf.Type != "xdpfwd-cni" || conf.Name == "" ||
			conf.Control != cfg["control"] || conf.IPAM.Type == "" || len(conf.IPAM.Routes) > 0 {
			t.Errorf("%s: %s: config %+v; want cniVersion 0.3.1 or 0.4.0, a name, type xdpfwd-cni on %v (xdpfwd-cni.yaml's socket), an IPAM without routes",
				nadFile, n.Metadata.Name, conf, cfg["control"])
		}
		switch {
		case conf.VLAN != nil:
			vlans["access"] = true
		case conf.Trunk != nil:
			vlans["trunk"] = true
		}
		multusAdd(t, plugin, dir, n.Metadata.Name, config, conf.CNIVersion)
	}
	if !vlans["access"] || !vlans["trunk"] {
		t.Errorf("%s: VLAN networks %v; want an example of an access network (\"vlan\") and of a trunk (\"trunk\")", nadFile, vlans)
	}
}

// multusAdd runs the plugin as Multus would with a NAD's config: its
// VERSION lists the config's version, and an ADD against a socket with
// no daemon fails only for want of the daemon (11, try again later), not
// for the config (1 incompatible version, 2 unsupported field, 6
// decoding, 7 invalid).
func multusAdd(t *testing.T, plugin, dir, name string, config []byte, version string) {
	t.Helper()
	cmd := exec.Command(plugin)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	cmd.Stdin = bytes.NewReader(config)
	out, err := cmd.Output()
	var vi struct {
		Supported []string `json:"supportedVersions"`
	}
	if err != nil || json.Unmarshal(out, &vi) != nil || !slices.Contains(vi.Supported, version) {
		t.Fatalf("%s: xdpfwd-cni VERSION: %s, %v; want it to list the NAD's cniVersion %s", name, out, err, version)
	}
	var m map[string]any
	json.Unmarshal(config, &m)
	m["control"] = filepath.Join(dir, "no-daemon.sock")
	stdin, _ := json.Marshal(m)
	cmd = exec.Command(plugin)
	cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=nadtest", "CNI_NETNS=/var/run/netns/xdpfwd-nad-test-none",
		"CNI_IFNAME=net1", "CNI_PATH=" + dir}
	cmd.Stdin = bytes.NewReader(stdin)
	out, err = cmd.Output()
	var te types.Error
	if err == nil || json.Unmarshal(out, &te) != nil || te.Code != types.ErrTryAgainLater {
		t.Errorf("%s: xdpfwd-cni ADD of the NAD's config, no daemon: %s, %v; want CNI error 11 (the daemon), the config taken", name, out, err)
	}
}
