package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// specVersions are the CNI spec versions the plugin speaks.
var specVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

// The node's address on the pods' segment (on up1p, the node's end of
// the switch's link up1): the pods' gateway.
const (
	podSubnet   = "10.99.0.0/24"
	gatewayCIDR = "10.99.0.254/24"
)

var gatewayAddr = netip.MustParsePrefix(gatewayCIDR).Addr()

// newSwitchRig is a rig (no pods) whose daemon is xdpfwd itself, a
// switch in the node namespace with links up0 and up1, veths whose peers
// stay in the node; up1p has gatewayCIDR, so the node is on the pods'
// segment through the switch, as a node's uplink puts it.
func newSwitchRig(t *testing.T) (*rig, *xdpfwdProc) {
	t.Helper()
	return newSwitchRigTags(t, "")
}

// newSwitchRigTags is newSwitchRig with the plugin built with the build
// tags given (killpoint_hook.go's, for one).
func newSwitchRigTags(t *testing.T, tags string) (*rig, *xdpfwdProc) {
	t.Helper()
	r := newRigTags(t, 0, tags)
	r.daemon.srv.Close(time.Second) // the stand-in makes way for xdpfwd
	for _, up := range []string{"up0", "up1"} {
		ipIn(t, r.node, []string{"link", "add", up, "type", "veth", "peer", "name", up + "p"},
			[]string{"link", "set", up, "up"}, []string{"link", "set", up + "p", "up"})
	}
	ipIn(t, r.node, []string{"addr", "add", gatewayCIDR, "dev", "up1p"})
	d := startXdpfwd(t, buildXdpfwd(t, r.dir), r.node, r.ctl, "--mode", "switch", "--link", "up0", "--link", "up1", "--queues", "1")
	r.forwards = d.forwards
	return r, d
}

// linkPlugins puts Debian's plugins of those names in the rig's CNI_PATH.
func (r *rig) linkPlugins(names ...string) {
	r.t.Helper()
	for _, n := range names {
		p := need(r.t, n, "/usr/lib/cni/"+n, "/opt/cni/bin/"+n)
		if err := os.Symlink(p, filepath.Join(r.cniPath, n)); err != nil && !os.IsExist(err) {
			r.t.Fatal(err)
		}
	}
}

// newPod makes a pod namespace "...-c28NAME", closed at the test's end.
func (r *rig) newPod(name string) *topo.NS {
	r.t.Helper()
	return r.podNS("c28" + name)
}

// podNS makes a pod namespace "...-NAME", closed at the test's end.
func (r *rig) podNS(name string) *topo.NS {
	r.t.Helper()
	p, err := topo.NewNS(name)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { p.Close() })
	r.pods = append(r.pods, p)
	return p
}

// hostLocalIPAM is host-local on podSubnet, the pods' default route
// through the node.
func (r *rig) hostLocalIPAM() map[string]any {
	return map[string]any{
		"type":    "host-local",
		"dataDir": r.ipamDir,
		"ranges":  []any{[]any{map[string]any{"subnet": podSubnet, "gateway": gatewayAddr.String()}}},
		"routes":  []any{map[string]any{"dst": "0.0.0.0/0"}},
	}
}

// pluginConf is the plugin's configuration in the rig, with ipam.
func (r *rig) pluginConf(ipam map[string]any) map[string]any {
	return map[string]any{"type": "xdpfwd-cni", "control": r.ctl, "mtu": testMTU, "stateDir": r.stateDir, "ipam": ipam}
}

// netConf is a network configuration for one plugin (what a runtime
// gives it on stdin) at spec version v, with more keys.
func (r *rig) netConf(v string, plugin map[string]any, more map[string]any) []byte {
	m := map[string]any{"cniVersion": v, "name": r.netName}
	for k, x := range plugin {
		m[k] = x
	}
	for k, x := range more {
		m[k] = x
	}
	b, _ := json.Marshal(m)
	return b
}

// writeConflist replaces the rig's conflist with one at spec version v
// of these plugins, in order.
func (r *rig) writeConflist(v string, plugins ...map[string]any) {
	r.t.Helper()
	r.writeConflistVersions(v, nil, plugins...)
}

// writeConflistVersions is writeConflist with "cniVersions" too (spec
// 1.1.0: a runtime takes the highest it speaks, one before 1.1.0
// "cniVersion").
func (r *rig) writeConflistVersions(v string, vs []string, plugins ...map[string]any) {
	r.t.Helper()
	ps := make([]any, len(plugins))
	for i, p := range plugins {
		ps[i] = p
	}
	list := map[string]any{"cniVersion": v, "name": r.netName, "plugins": ps}
	if vs != nil {
		list["cniVersions"] = vs
	}
	b, _ := json.Marshal(list)
	if err := os.WriteFile(filepath.Join(r.netDir, r.netName+".conflist"), b, 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// cnitoolEnv is cnitoolRun with more environment (CAP_ARGS, CNI_ARGS).
func (r *rig) cnitoolEnv(cmd string, p *topo.NS, env ...string) (string, error) {
	c := exec.Command("ip", "netns", "exec", r.node.Name, r.cnitool, cmd, r.netName, nsPath(p))
	c.Env = append(os.Environ(), append([]string{"CNI_PATH=" + r.cniPath, "NETCONFPATH=" + r.netDir}, env...)...)
	out, err := c.CombinedOutput()
	return string(out), err
}

// execPlugin runs the plugin as a runtime does, in the node namespace:
// CNI_COMMAND cmd for pod p's eth0, the network configuration on stdin.
// It returns stdout, and the CNI error a failure printed there.
func (r *rig) execPlugin(cmd string, p *topo.NS, stdin []byte) ([]byte, *types.Error) {
	r.t.Helper()
	c := exec.Command("ip", "netns", "exec", r.node.Name, filepath.Join(r.cniPath, "xdpfwd-cni"))
	c.Env = append(os.Environ(), "CNI_COMMAND="+cmd, "CNI_PATH="+r.cniPath)
	if cmd != "GC" && cmd != "STATUS" && cmd != "VERSION" {
		c.Env = append(c.Env, "CNI_CONTAINERID="+r.containerID(p), "CNI_NETNS="+nsPath(p), "CNI_IFNAME=eth0")
	}
	c.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	if err == nil {
		return out, nil
	}
	te := &types.Error{}
	if json.Unmarshal(out, te) != nil || te.Code == 0 {
		r.t.Fatalf("%s: %v, and no CNI error on stdout: %s\n%s", cmd, err, out, stderr.String())
	}
	return out, te
}

// since is the spec version a command came in.
var since = map[string]string{"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}

// wantCode is the error code the spec has the plugin answer cmd at
// version v with: 0 (success) for a version it speaks with the command,
// 1 (incompatible CNI versions) for one without it, or one it does not
// speak. VERSION answers whatever the version.
func wantCode(cmd, v string) uint {
	if cmd == "VERSION" {
		return 0
	}
	if !slices.Contains(specVersions, v) {
		return types.ErrIncompatibleCNIVersion
	}
	if s, ok := since[cmd]; ok {
		if ge, _ := version.GreaterThanOrEqualTo(v, s); !ge {
			return types.ErrIncompatibleCNIVersion
		}
	}
	return 0
}

// TestCNISpecVersions is the conformance table: for each spec version
// (0.2.0, which the plugin does not speak, and the five it does), the
// plugin exec'd as a runtime execs it (CNI_* environment, stdin) against
// a running xdpfwd switch: ADD, CHECK (prevResult ADD's result), GC
// (the attachment valid: kept), STATUS, DEL (prevResult too), VERSION.
// A command the version has succeeds, one it lacks is refused with code
// 1 (incompatible CNI versions), as the spec has it. ADD's result is at
// the configuration's version and parses at it: two interfaces (the host
// end, no sandbox; eth0 in the pod), one address on eth0; below 1.0.0
// the interfaces carry no "mtu" (0.4.0's result has none: the library's
// conversion drops it) and addresses carry "version". The pod is on the
// switch (it pings the node through it), and after DEL nothing is left.
// Then cnitool, which sends the conflist's version, ADDs, CHECKs and
// DELs at each version (libcni refuses CHECK below 0.4.0 itself). The
// table is logged.
func TestCNISpecVersions(t *testing.T) {
	r, d := newSwitchRig(t)
	cmds := []string{"ADD", "CHECK", "GC", "STATUS", "DEL", "VERSION"}
	table := []string{fmt.Sprintf("%-8s %-18s %-9s %-9s %-9s %-9s %-9s %s", "version", "ADD", "CHECK", "GC", "STATUS", "DEL", "VERSION", "cnitool add/check/del")}
	for i, v := range append([]string{"0.2.0"}, specVersions...) {
		p := r.newPod(fmt.Sprintf("v%d", i))
		conf := r.pluginConf(r.hostLocalIPAM())
		cells := map[string]string{}
		var prev json.RawMessage
		var addr netip.Addr
		for _, cmd := range cmds {
			var stdin []byte
			switch cmd {
			case "CHECK", "DEL":
				more := map[string]any{}
				if prev != nil {
					more["prevResult"] = prev
				}
				stdin = r.netConf(v, conf, more)
			case "GC":
				stdin = r.netConf(v, conf, map[string]any{"cni.dev/valid-attachments": []types.GCAttachment{{ContainerID: r.containerID(p), IfName: "eth0"}}})
			default:
				stdin = r.netConf(v, conf, nil)
			}
			out, te := r.execPlugin(cmd, p, stdin)
			var code uint
			cells[cmd] = "ok"
			if te != nil {
				code = te.Code
				cells[cmd] = fmt.Sprintf("error %d", code)
			}
			if want := wantCode(cmd, v); code != want {
				t.Errorf("%s %s: code %d (%s), want %d", v, cmd, code, out, want)
				continue
			}
			if code != 0 {
				continue
			}
			switch cmd {
			case "ADD":
				var err error
				if addr, err = checkResult(v, out, r.hostName(p), nsPath(p)); err != nil {
					t.Errorf("%s ADD: %v\n%s", v, err, out)
					continue
				}
				prev = out
				cells[cmd] = "ok, result " + v
				r.attached(p, addr)
				if pr, err := topo.Ping(p, gatewayAddr, 1, 3*time.Second); err != nil || pr.Received != 1 {
					t.Errorf("%s: %s pings the node (%s) through xdpfwd: %+v, %v", v, p.Name, gatewayAddr, pr, err)
				}
			case "GC":
				r.attached(p, addr) // valid: kept
			case "DEL":
				if addr.IsValid() {
					r.gone(p, addr)
				}
			case "VERSION":
				var vi struct {
					Supported []string `json:"supportedVersions"`
				}
				if err := json.Unmarshal(out, &vi); err != nil || !slices.Equal(vi.Supported, specVersions) {
					t.Errorf("%s VERSION: %s (%v); want supportedVersions %q", v, out, err, specVersions)
				}
			}
		}
		cells["cnitool"] = "-"
		if slices.Contains(specVersions, v) {
			cells["cnitool"] = r.cnitoolVersion(v, p)
		}
		table = append(table, fmt.Sprintf("%-8s %-18s %-9s %-9s %-9s %-9s %-9s %s", v, cells["ADD"], cells["CHECK"], cells["GC"], cells["STATUS"], cells["DEL"], cells["VERSION"], cells["cnitool"]))
	}
	d.running()
	if got := d.links(); !slices.Equal(got, []string{"up0", "up1"}) {
		t.Errorf("xdpfwd's links at the end: %q", got)
	}
	t.Logf("CNI conformance, xdpfwd-cni exec'd with CNI_* against xdpfwd (error 1: incompatible CNI versions):\n%s", strings.Join(table, "\n"))
}

// cnitoolVersion runs cnitool add, check and del of pod p with the
// conflist at version v, checks each, and says what they did.
func (r *rig) cnitoolVersion(v string, p *topo.NS) string {
	r.t.Helper()
	r.writeConflist(v, r.pluginConf(r.hostLocalIPAM()))
	out, err := r.cnitoolEnv("add", p)
	if err != nil {
		r.t.Errorf("%s: cnitool add: %v\n%s", v, err, out)
		return "add failed"
	}
	addr, err := checkResult(v, []byte(out), r.hostName(p), nsPath(p))
	if err != nil {
		r.t.Errorf("%s: cnitool add: %v\n%s", v, err, out)
		return "add: bad result"
	}
	r.attached(p, addr)
	cells := []string{"ok"}
	out, err = r.cnitoolEnv("check", p)
	switch hasCheck := wantCode("CHECK", v) == 0; {
	case hasCheck && err == nil:
		cells = append(cells, "ok")
	case !hasCheck && err != nil && strings.Contains(out, "does not support the CHECK command"):
		cells = append(cells, "refused by libcni")
	default:
		r.t.Errorf("%s: cnitool check: %v\n%s", v, err, out)
		cells = append(cells, "failed")
	}
	if out, err := r.cnitoolEnv("del", p); err != nil {
		r.t.Errorf("%s: cnitool del: %v\n%s", v, err, out)
		cells = append(cells, "failed")
	} else {
		cells = append(cells, "ok")
	}
	r.gone(p, addr)
	return strings.Join(cells, "/")
}

// checkResult checks xdpfwd-cni's ADD result printed at version v
// (checkChained), that it has only its two interfaces, and carries what v
// has of them: "mtu" from 1.0.0 (1.1.0's types, which 1.0.0's print
// with), "version" on each address below 1.0.0. It returns the address.
func checkResult(v string, out []byte, host, sandbox string) (netip.Addr, error) {
	res, err := checkChained(v, out, host, sandbox)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(res.Interfaces) != 2 || len(res.IPs) != 1 {
		return netip.Addr{}, fmt.Errorf("%d interfaces, %d addresses; want 2 and 1", len(res.Interfaces), len(res.IPs))
	}
	var raw struct {
		Interfaces []map[string]any `json:"interfaces"`
		IPs        []map[string]any `json:"ips"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return netip.Addr{}, err
	}
	pre1, _ := version.GreaterThan("1.0.0", v)
	for _, ifc := range raw.Interfaces {
		if mtu, ok := ifc["mtu"]; ok == pre1 || ok && mtu != float64(testMTU) {
			return netip.Addr{}, fmt.Errorf("interface %v: mtu %v; want it (%d) from 1.0.0 only", ifc["name"], mtu, testMTU)
		}
	}
	if _, ok := raw.IPs[0]["version"]; ok != pre1 {
		return netip.Addr{}, fmt.Errorf("address %v: \"version\" %v; want it below 1.0.0 only", raw.IPs[0]["address"], raw.IPs[0]["version"])
	}
	a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
	return a, nil
}

// checkChained checks an ADD's result printed at version v, the plugin's
// or a chain's it comes first in: its cniVersion is v, it parses as a
// result of v (the library's types), and begins with the host end host
// (no sandbox) and eth0 in sandbox; its addresses, an IPv4 one first,
// are on eth0.
func checkChained(v string, out []byte, host, sandbox string) (*current.Result, error) {
	var raw struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, err
	}
	if raw.CNIVersion != v {
		return nil, fmt.Errorf("result cniVersion %q, want %q (the configuration's)", raw.CNIVersion, v)
	}
	parsed, err := version.NewResult(v, out)
	if err != nil {
		return nil, fmt.Errorf("parse as a %s result: %w", v, err)
	}
	res, err := current.NewResultFromResult(parsed)
	if err != nil {
		return nil, err
	}
	if len(res.Interfaces) < 2 || res.Interfaces[0].Name != host || res.Interfaces[0].Sandbox != "" ||
		res.Interfaces[1].Name != "eth0" || res.Interfaces[1].Sandbox != sandbox ||
		len(res.IPs) == 0 || res.IPs[0].Address.IP.To4() == nil {
		return nil, fmt.Errorf("want interfaces %s (host) and eth0 in %s first, an IPv4 address first", host, sandbox)
	}
	for _, ipc := range res.IPs {
		if ipc.Interface == nil || *ipc.Interface != 1 {
			return nil, fmt.Errorf("address %s not on eth0", ipc.Address.String())
		}
	}
	return res, nil
}

// TestCNICapabilities: runtimeConfig's mac and ips, as a runtime passes
// them (cnitool's CAP_ARGS) for a conflist that declares the
// capabilities, with host-local (which takes ips as addresses asked for)
// and static IPAM (which takes them as its addresses), at 0.3.1 and
// 1.1.0: the pod's eth0 has that MAC and that address, the result says
// so, runtimeConfig's mac wins over CNI_ARGS MAC=, CHECK passes (and
// fails once eth0's MAC is changed), the pod reaches the node through
// xdpfwd; DEL leaves nothing. A requested
// address outside host-local's range is refused (by host-local) and
// leaves nothing.
func TestCNICapabilities(t *testing.T) {
	r, d := newSwitchRig(t)
	r.linkPlugins("static")
	caps := map[string]any{"mac": true, "ips": true}
	for i, tc := range []struct {
		v, ipamType, mac, ip string
	}{
		{"1.1.0", "host-local", "02:c2:80:00:00:11", "10.99.0.77/24"},
		{"0.3.1", "host-local", "02:c2:80:00:00:12", "10.99.0.78/24"},
		{"1.1.0", "static", "02:c2:80:00:00:13", "10.99.0.79/24"},
		{"0.3.1", "static", "02:c2:80:00:00:14", "10.99.0.80/24"},
	} {
		name := tc.v + " " + tc.ipamType
		p := r.newPod(fmt.Sprintf("cap%d", i))
		ipamConf := r.hostLocalIPAM()
		if tc.ipamType == "static" {
			ipamConf = map[string]any{"type": "static", "routes": []any{map[string]any{"dst": "0.0.0.0/0", "gw": gatewayAddr.String()}}}
		}
		conf := r.pluginConf(ipamConf)
		conf["capabilities"] = caps
		r.writeConflist(tc.v, conf)
		capArgs := fmt.Sprintf(`CAP_ARGS={"mac":%q,"ips":[%q]}`, tc.mac, tc.ip)
		// The pod's identity, as kubelet's runtimes pass it.
		pod := linkop.Pod{Namespace: "caps", Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("6b1f0c2e-0000-4000-8000-00000000000%d", i)}
		out, err := r.cnitoolEnv("add", p, capArgs, fmt.Sprintf("CNI_ARGS=IgnoreUnknown=1;MAC=02:c2:80:00:00:ff;K8S_POD_NAMESPACE=%s;K8S_POD_NAME=%s;K8S_POD_INFRA_CONTAINER_ID=0123;K8S_POD_UID=%s", pod.Namespace, pod.Name, pod.UID))
		if err != nil {
			t.Errorf("%s: cnitool add with %s: %v\n%s", name, capArgs, err, out)
			continue
		}
		res, err := version.NewResult(tc.v, []byte(out))
		var cr *current.Result
		if err == nil {
			cr, err = current.NewResultFromResult(res)
		}
		want := netip.MustParsePrefix(tc.ip)
		if err != nil || len(cr.Interfaces) != 2 || cr.Interfaces[1].Mac != tc.mac || len(cr.IPs) != 1 || cr.IPs[0].Address.String() != want.String() {
			t.Errorf("%s: result %s (%v); want eth0's mac %s, address %s", name, out, err, tc.mac, want)
		}
		if err := p.Do(func() error {
			l, err := netlink.LinkByName("eth0")
			if err != nil {
				return err
			}
			as, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				return err
			}
			if l.Attrs().HardwareAddr.String() != tc.mac || len(as) != 1 || as[0].IPNet.String() != want.String() {
				return fmt.Errorf("eth0: MAC %s, addresses %v; want %s and %s", l.Attrs().HardwareAddr, as, tc.mac, want)
			}
			return nil
		}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if k, ok := d.list().Link(r.hostName(p)); !ok {
			t.Errorf("%s: xdpfwd does not forward %s", name, r.hostName(p))
		} else if k.Pod == nil || *k.Pod != pod {
			t.Errorf("%s: xdpfwd's %s serves pod %+v, want CNI_ARGS' %+v", name, r.hostName(p), k.Pod, pod)
		}
		if pr, err := topo.Ping(p, gatewayAddr, 1, 3*time.Second); err != nil || pr.Received != 1 {
			t.Errorf("%s: %s pings the node (%s) through xdpfwd: %+v, %v", name, p.Name, gatewayAddr, pr, err)
		}
		if wantCode("CHECK", tc.v) == 0 {
			if out, err := r.cnitoolEnv("check", p, capArgs); err != nil {
				t.Errorf("%s: cnitool check: %v\n%s", name, err, out)
			}
			// CHECK sees eth0's MAC changed from what ADD gave.
			ipIn(t, p, []string{"link", "set", "eth0", "address", "02:c2:80:00:00:99"})
			if out, err := r.cnitoolEnv("check", p, capArgs); err == nil || !strings.Contains(out, "prevResult says "+tc.mac) {
				t.Errorf("%s: cnitool check with eth0's MAC changed: %v\n%s; want a failure naming %s", name, err, out, tc.mac)
			}
		}
		if out, err := r.cnitoolEnv("del", p, capArgs); err != nil {
			t.Errorf("%s: cnitool del: %v\n%s", name, err, out)
		}
		if left := r.leftovers(p); len(left) > 0 {
			t.Errorf("%s: after DEL: %q left", name, left)
		}
	}

	// An address host-local cannot give: refused, nothing left.
	p := r.newPod("capbad")
	conf := r.pluginConf(r.hostLocalIPAM())
	conf["capabilities"] = caps
	r.writeConflist("1.1.0", conf)
	if out, err := r.cnitoolEnv("add", p, `CAP_ARGS={"ips":["10.98.0.5/24"]}`); err == nil {
		t.Errorf("cnitool add asking for 10.98.0.5, outside host-local's %s: succeeded\n%s", podSubnet, out)
	}
	r.cnitoolEnv("del", p)
	if left := r.leftovers(p); len(left) > 0 {
		t.Errorf("after the refused ADD and DEL: %q left", left)
	}
	d.running()
}
