package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// addCode runs ADD of pod p through libcni (as a runtime: the CNI error's
// code comes back whole) and returns its error.
func (r *rig) addCode(p *topo.NS) error {
	return r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
		_, err := c.AddNetworkList(context.Background(), list, &libcni.RuntimeConf{ContainerID: r.containerID(p), NetNS: nsPath(p), IfName: "eth0"})
		return err
	})
}

// gc runs GC with the pods keep (by index) the valid attachments.
func (r *rig) gc(keep ...int) error {
	var valid []types.GCAttachment
	for _, i := range keep {
		valid = append(valid, types.GCAttachment{ContainerID: r.containerID(r.pods[i]), IfName: "eth0"})
	}
	return r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
		return c.GCNetworkList(context.Background(), list, &libcni.GCArgs{ValidAttachments: valid})
	})
}

// records lists the files in the network's state directory.
func (r *rig) stateFiles() []string {
	ents, _ := os.ReadDir(filepath.Join(r.stateDir, r.netName))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// podHas reports whether p has a link named name.
func podHas(p *topo.NS, name string) bool {
	return p.Do(func() error {
		_, err := netlink.LinkByName(name)
		return err
	}) == nil
}

// leftovers lists what is left of p's attachment, anywhere: the host
// veth, the pod's eth0, the daemon's link, a lease, a state file (its
// record, or a temporary one).
func (r *rig) leftovers(p *topo.NS) []string {
	h := r.hostName(p)
	var out []string
	if r.hostLink(h) {
		out = append(out, "host veth "+h)
	}
	if podHas(p, "eth0") {
		out = append(out, "eth0 in "+p.Name)
	}
	if r.forwards(h) {
		out = append(out, "the daemon's link "+h)
	}
	for _, l := range r.leases() {
		// host-local's lease file holds the container ID, a line.
		b, err := os.ReadFile(filepath.Join(r.ipamDir, r.netName, l))
		if err != nil || strings.HasPrefix(string(b), r.containerID(p)) {
			out = append(out, "lease "+l)
		}
	}
	for _, f := range r.stateFiles() {
		if strings.HasPrefix(f, h) {
			out = append(out, "state file "+f)
		}
	}
	return out
}

// TestCNIAddTwice: a second ADD of a live attachment (a runtime retrying
// an ADD it thought had timed out) is an error that leaves the attachment
// as it was: the veth, eth0 with its address, the lease, the daemon's
// link, the record; traffic still passes, and DEL still undoes it all.
func TestCNIAddTwice(t *testing.T) {
	r := newRig(t, 2)
	a0, a1 := r.add(r.pods[0]), r.add(r.pods[1])
	out, err := r.cnitoolRun("add", r.pods[0])
	if err == nil || !strings.Contains(out, "already") {
		t.Errorf("cnitool add of a live attachment: %v\n%s; want an error that eth0 exists already", err, out)
	}
	var te *types.Error
	if err := r.addCode(r.pods[0]); !errors.As(err, &te) || te.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(te.Msg, "CNI_IFNAME") {
		t.Errorf("ADD of a live attachment (libcni): %v; want CNI error code 4 naming CNI_IFNAME", err)
	}
	r.attached(r.pods[0], a0)
	r.attached(r.pods[1], a1)
	if _, err := os.Stat(filepath.Join(r.stateDir, r.netName, r.hostName(r.pods[0])+".json")); err != nil {
		t.Errorf("the attachment's record after the second ADD: %v", err)
	}
	if err := r.reach(r.pods[1], r.pods[0], a0, 1<<16); err != nil {
		t.Errorf("after the second ADD: %v", err)
	}
	r.del(r.pods[0])
	r.gone(r.pods[0], a0)
	r.del(r.pods[1])
	r.gone(r.pods[1], a1)
}

// TestCNIGCPlantedRecord: GC does not take a record's word for which link
// is the attachment's: a record naming the node's uplink (host "up0", not
// the name its container ID and interface name give) leaves the uplink on
// the node and in the daemon, and GC says so; a real attachment's stale
// record is still collected.
func TestCNIGCPlantedRecord(t *testing.T) {
	r := newRig(t, 2)
	ipIn(t, r.node, []string{"link", "add", "up0", "type", "veth", "peer", "name", "up0p"})
	c, err := linkop.Dial(r.ctl)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddLink("up0"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	a0, a1 := r.add(r.pods[0]), r.add(r.pods[1])
	planted := record{ContainerID: "planted", IfName: "eth0", Host: "up0", Control: r.ctl}
	b, _ := json.Marshal(planted)
	if err := os.WriteFile(filepath.Join(r.stateDir, r.netName, "up0.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	err = r.gc(1)
	if err == nil || !strings.Contains(err.Error(), "up0") {
		t.Errorf("GC with a planted record: %v; want an error naming it", err)
	}
	if !r.hostLink("up0") || !r.forwards("up0") {
		t.Errorf("after GC with a record naming up0: up0 on the node %v, in the daemon %v; want both", r.hostLink("up0"), r.forwards("up0"))
	}
	r.gone(r.pods[0], a0)
	r.attached(r.pods[1], a1)
	r.del(r.pods[1])
	r.gone(r.pods[1], a1)
}

// TestCNIStateDirTrust: the plugin keeps its records, which GC acts on,
// only in a state directory that root (the plugin's user) owns and that
// neither group nor others can write: otherwise ADD and GC fail with an
// error naming the directory and build or delete nothing. GC is refused
// with a record there that it would act on: a pod attached while the
// directory was trusted, not among GC's valid attachments, stays
// attached.
func TestCNIStateDirTrust(t *testing.T) {
	r := newRig(t, 2)
	held, p := r.pods[0], r.pods[1]
	netDir := filepath.Join(r.stateDir, r.netName)
	tests := []struct {
		name  string
		setup func() error
	}{
		{"state dir 0777", func() error { return os.Chmod(r.stateDir, 0o777) }},
		{"state dir 0770", func() error { return os.Chmod(r.stateDir, 0o770) }},
		{"network dir 0722", func() error { return os.Chmod(netDir, 0o722) }},
		{"state dir owned by nobody", func() error { return os.Chown(r.stateDir, 65534, 65534) }},
		{"network dir owned by nobody", func() error { return os.Chown(netDir, 65534, 65534) }},
	}
	for _, tt := range tests {
		os.RemoveAll(r.stateDir)
		a := r.add(held) // its record in the directory, trusted so far
		if err := tt.setup(); err != nil {
			t.Fatal(err)
		}
		var te *types.Error
		err := r.addCode(p)
		if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Msg, r.stateDir) {
			t.Errorf("%s: ADD: %v; want CNI error 7 naming %s", tt.name, err, r.stateDir)
		}
		if left := r.leftovers(p); len(left) > 0 {
			t.Errorf("%s: after the refused ADD: %q left", tt.name, left)
		}
		if err := r.gc(); !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Msg, r.stateDir) {
			t.Errorf("%s: GC: %v; want CNI error 7 naming %s", tt.name, err, r.stateDir)
		}
		r.attached(held, a) // GC, refused, did not act on its record
		// DEL only removes: it goes on (a runtime's cleanup must not stick).
		r.del(held)
		r.gone(held, a)
		r.del(p)
	}
	os.RemoveAll(r.stateDir)
	a := r.add(p)
	r.attached(p, a)
	if fi, err := os.Stat(r.stateDir); err != nil || fi.Mode().Perm()&0o022 != 0 {
		t.Errorf("the state dir ADD made: %v, %v; want it writable by its owner alone", fi.Mode(), err)
	}
	r.del(p)
	r.gone(p, a)
}

// TestCNIKillAtEachStep: an ADD killed (SIGKILL, as a runtime's timeout or
// the OOM killer would) after any of its steps leaves nothing that GC,
// or DEL, does not undo: no host veth, no eth0, no lease, no state file,
// no daemon link; and an ADD retried without a DEL replaces what it left
// and succeeds. The plugin is built with the xdpfwdcnitest tag, whose
// killPoint kills it after the step XDPFWD_CNI_KILL_AFTER names.
func TestCNIKillAtEachStep(t *testing.T) {
	r := newRigTags(t, 1, "xdpfwdcnitest")
	p := r.pods[0]
	killedAdd := func(step string) {
		t.Helper()
		c := exec.Command("ip", "netns", "exec", r.node.Name, r.cnitool, "add", r.netName, nsPath(p))
		c.Env = append(os.Environ(), "CNI_PATH="+r.cniPath, "NETCONFPATH="+r.netDir, "XDPFWD_CNI_KILL_AFTER="+step)
		out, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "signal: killed") {
			t.Fatalf("cnitool add killed after %s: %v\n%s; want the plugin killed", step, err, out)
		}
	}
	for _, step := range addSteps {
		for _, undo := range []string{"GC", "DEL", "ADD"} {
			killedAdd(step)
			t.Logf("killed after %s: %q", step, r.leftovers(p))
			switch undo {
			case "GC":
				if err := r.gc(); err != nil {
					t.Errorf("GC after an ADD killed after %s: %v", step, err)
				}
			case "DEL":
				r.del(p)
			case "ADD":
				out, err := r.cnitoolRun("add", p)
				if err != nil {
					t.Errorf("ADD again after an ADD killed after %s: %v\n%s", step, err, out)
				} else {
					var res current.Result
					json.Unmarshal([]byte(out), &res)
					if len(res.IPs) != 1 {
						t.Fatalf("ADD again after an ADD killed after %s: result %s", step, out)
					}
					a, _ := netip.AddrFromSlice(res.IPs[0].Address.IP.To4())
					r.attached(p, a)
				}
				r.del(p)
			}
			if left := r.leftovers(p); len(left) > 0 {
				t.Errorf("ADD killed after %s, then %s: %q left", step, undo, left)
				r.del(p) // for the next step
			}
		}
	}
	// And ADD works after all that.
	a := r.add(p)
	r.attached(p, a)
	r.del(p)
	r.gone(p, a)
}

// TestCNIStatusRefusingDaemon: STATUS is "not available" (50) while the
// daemon answers but would refuse any link (its link list's AddRefused:
// a daemon left without sockets, a zombie), and ready again once it
// takes links.
func TestCNIStatusRefusingDaemon(t *testing.T) {
	r := newRig(t, 1)
	status := func() error {
		return r.libcni(func(c *libcni.CNIConfig, list *libcni.NetworkConfigList) error {
			return c.GetStatusNetworkList(context.Background(), list)
		})
	}
	if err := status(); err != nil {
		t.Errorf("STATUS with the daemon taking links: %v", err)
	}
	r.daemon.mu.Lock()
	r.daemon.addRefused = "the UMEM is registered in zero-copy mode"
	r.daemon.mu.Unlock()
	var te *types.Error
	if err := status(); !errors.As(err, &te) || te.Code != types.ErrPluginNotAvailable || !strings.Contains(te.Error(), "zero-copy") {
		t.Errorf("STATUS with the daemon refusing every link: %v; want CNI error 50 with its reason", err)
	}
	r.daemon.mu.Lock()
	r.daemon.addRefused = ""
	r.daemon.mu.Unlock()
	if err := status(); err != nil {
		t.Errorf("STATUS with the daemon taking links again: %v", err)
	}
}
