package main

// The ovs-afxdp peer: Open vSwitch's userspace datapath (datapath_type
// netdev) with an afxdp port on each root end and two OpenFlow rules,
// in_port=A → B and back: L2 port to port, as testpmd and the bridge. perf
// runs a private instance — ovsdb-server and ovs-vswitchd as its children,
// with their database, sockets and logs in a directory of its temporary
// directory — so it never touches, nor collides with, a system instance
// the package may have started (/var/run/openvswitch).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

const (
	ovsInstall = "openvswitch-switch"
	ovsSchema  = "/usr/share/openvswitch/vswitch.ovsschema"
)

var ovsTools = []string{"ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovs-appctl"}

func ovsAfxdpContender() *contender {
	return &contender{
		Name:  "ovs-afxdp",
		Label: "Open vSwitch userspace datapath (afxdp ports)",
		Desc:  "ovs-vswitchd 3.1 --disable-system, a datapath_type=netdev bridge with an afxdp port (xdp-mode=native) on each root end, one PMD thread, flows in_port=A→B and back",
		build: func(ctx context.Context, e *env) error {
			bins, err := lookTools(ovsInstall, ovsTools...)
			if err != nil {
				return err
			}
			if _, err := os.Stat(ovsSchema); err != nil {
				return fmt.Errorf("Open vSwitch's schema: %w (Debian: apt-get install %s)", err, ovsInstall)
			}
			for t, p := range bins {
				e.bins[t] = p
			}
			return nil
		},
		start: func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
			return startOVS(ctx, e, p, []string{p.LinkA, p.LinkB}, false)
		},
	}
}

// ovsAfxdpSwitchContender is Open vSwitch as a learning switch (its
// NORMAL action) with an afxdp port on every root-side link of the hosts
// topology: the peer of xdpfwd --mode switch on the scale workloads.
func ovsAfxdpSwitchContender() *contender {
	c := ovsAfxdpContender()
	c.Name, c.Label = "ovs-afxdp-switch", "Open vSwitch userspace datapath, NORMAL (afxdp ports)"
	c.Desc = "ovs-vswitchd 3.1 --disable-system, a datapath_type=netdev bridge with an afxdp port (xdp-mode=native) on every root-side link of the hosts, one PMD thread, its NORMAL rule (MAC learning)"
	c.Groups = []string{"scale"}
	c.start = func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
		h := e.hosts[p]
		if h == nil {
			return nil, fmt.Errorf("%s runs only on a hosts topology", c.Name)
		}
		return startOVS(ctx, e, p, h.Links, true)
	}
	return c
}

// ovsInstance is one private Open vSwitch: its directory, environment and
// the two daemons.
type ovsInstance struct {
	e            *env
	dir          string
	envv         []string
	br           string
	db, vswitchd *child
	// timeout bounds each ovs-vsctl call: adding a port attaches an XDP
	// program and maps a UMEM, so it grows with the ports.
	timeout time.Duration
	// ownsDPTap: the datapath's tap device (ovsDatapathTap) was not there
	// before this instance started, so it is this instance's to remove.
	ownsDPTap bool
}

// ovsDatapathTap is the netdev datapath's own tap device, which
// ovs-vswitchd makes with its first netdev bridge and leaves behind even
// when it exits cleanly.
const ovsDatapathTap = "ovs-netdev"

// tool runs an Open vSwitch tool for at most 20 s, or ovs-vsctl's own
// timeout (which grows with the ports) and 10 s more, whichever is longer.
func (o *ovsInstance) tool(ctx context.Context, name string, args ...string) (string, error) {
	return runTool(ctx, max(20*time.Second, o.timeout+10*time.Second), o.envv, o.e.bins[name], args...)
}

func (o *ovsInstance) vsctl(ctx context.Context, args ...string) (string, error) {
	return o.tool(ctx, "ovs-vsctl", append([]string{"--db=unix:" + filepath.Join(o.dir, "db.sock"), fmt.Sprintf("--timeout=%d", int(o.timeout.Seconds()))}, args...)...)
}

func (o *ovsInstance) appctl(ctx context.Context, target string, args ...string) (string, error) {
	return o.tool(ctx, "ovs-appctl", append([]string{"-t", filepath.Join(o.dir, target+".ctl"), "--timeout=10"}, args...)...)
}

func (o *ovsInstance) ofctl(ctx context.Context, args ...string) (string, error) {
	return o.tool(ctx, "ovs-ofctl", append(args[:1:1], append([]string{"unix:" + filepath.Join(o.dir, o.br+".mgmt")}, args[1:]...)...)...)
}

// startOVS starts a private Open vSwitch with an afxdp port on each of
// links and waits until a ping crosses it from p's A to B: a learning
// switch (its NORMAL rule) if normal, otherwise two port-to-port rules
// joining links, which are then p's root ends.
func startOVS(ctx context.Context, e *env, p *topo.Pair, links []string, normal bool) (_ stopFunc, err error) {
	cpu, q := e.o.FwdCPU, e.queuesOf(p)
	o := &ovsInstance{e: e, dir: filepath.Join(e.tmp, "ovs-"+pairID(p)), br: "xf" + pairID(p) + "ovs",
		timeout: 15*time.Second + time.Duration(len(links))*time.Second}
	// Every path a daemon or tool would default to (/var/run/openvswitch,
	// /etc/openvswitch, /var/log/openvswitch) points into the private
	// directory instead.
	o.envv = append(os.Environ(), "OVS_RUNDIR="+o.dir, "OVS_DBDIR="+o.dir, "OVS_LOGDIR="+o.dir,
		"OVS_SYSCONFDIR="+o.dir, "OVS_PKGDATADIR="+filepath.Dir(ovsSchema))
	ends, err := snapshotEnds(links...)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(o.dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, err
	}
	// The bridge's internal port is a persistent tap device of that name,
	// which ovs-vswitchd removes only when it exits cleanly; the
	// datapath's, which it never removes, unless another Open vSwitch
	// has one.
	e.res.AddTopology("link " + o.br)
	if _, err := netlink.LinkByName(ovsDatapathTap); err != nil {
		o.ownsDPTap = true
		e.res.AddTopology("link " + ovsDatapathTap)
	}
	stop := func() (map[string]any, error) {
		e.child.Store(nil)
		d := o.stats(p)
		err := errors.Join(o.stop(), ends.restore("ovs-vswitchd", d), o.removeTap(), o.removeDatapathTap())
		if !e.o.KeepBuilds {
			err = errors.Join(err, os.RemoveAll(o.dir))
		}
		return d, err
	}
	defer func() {
		if err != nil {
			_, serr := stop()
			err = errors.Join(err, serr)
		}
	}()

	if _, err := o.tool(ctx, "ovsdb-tool", "create", filepath.Join(o.dir, "conf.db"), ovsSchema); err != nil {
		return nil, err
	}
	// Both daemons on the forwarder CPU: the PMD thread polls there (its
	// pmd-cpu-mask), the rest of them sleep.
	o.db, err = startChildEnv("ovsdb-server", e.bins["ovsdb-server"], []string{
		filepath.Join(o.dir, "conf.db"), "--remote=punix:" + filepath.Join(o.dir, "db.sock"),
		"--unixctl=" + filepath.Join(o.dir, "ovsdb-server.ctl"), "--no-chdir",
	}, o.envv, []int{cpu}, filepath.Join(o.dir, "ovsdb-server.log"))
	if err != nil {
		return nil, err
	}
	if _, err := o.vsctl(ctx, "--retry", "--no-wait", "init"); err != nil {
		return nil, fmt.Errorf("ovsdb-server: %w%s", err, o.db.logTail())
	}
	o.vswitchd, err = startChildEnv("ovs-vswitchd", e.bins["ovs-vswitchd"], []string{
		"unix:" + filepath.Join(o.dir, "db.sock"), "--disable-system",
		"--unixctl=" + filepath.Join(o.dir, "ovs-vswitchd.ctl"), "--no-chdir",
	}, o.envv, []int{cpu}, filepath.Join(o.dir, "ovs-vswitchd.log"))
	if err != nil {
		return nil, err
	}
	port := func(link string) []string {
		a := []string{"--", "add-port", o.br, link, "--", "set", "interface", link, "type=afxdp", "options:xdp-mode=native"}
		if q > 1 {
			a = append(a, "options:n_rxq="+strconv.Itoa(q))
		}
		return a
	}
	// Without --no-wait, ovs-vsctl returns once ovs-vswitchd has applied
	// the change (or the timeout expires).
	args := []string{"--", "set", "Open_vSwitch", ".", "other_config:pmd-cpu-mask=" + cpuMask(cpu),
		"--", "add-br", o.br, "--", "set", "bridge", o.br, "datapath_type=netdev"}
	for _, l := range links {
		args = append(args, port(l)...)
	}
	if _, err := o.vsctl(ctx, args...); err != nil {
		return nil, fmt.Errorf("configure bridge %s: %w%s", o.br, err, o.vswitchd.logTail())
	}
	for _, l := range links {
		if ofport, _ := o.vsctl(ctx, "get", "Interface", l, "ofport"); strings.TrimSpace(ofport) == "-1" || strings.TrimSpace(ofport) == "[]" {
			why, _ := o.vsctl(ctx, "get", "Interface", l, "error")
			types, _ := o.vsctl(ctx, "get", "Open_vSwitch", ".", "iface_types")
			if !strings.Contains(types, "afxdp") {
				return nil, fmt.Errorf("this ovs-vswitchd has no AF_XDP support (interface types %s)", strings.TrimSpace(types))
			}
			return nil, fmt.Errorf("ovs-vswitchd could not add %s: %s%s", l, strings.TrimSpace(why), o.vswitchd.logTail())
		}
	}
	if !normal {
		if err := o.joinPorts(ctx, links[0], links[1]); err != nil {
			return nil, err
		}
	}
	if err := e.waitPath(ctx, p, o.vswitchd); err != nil {
		return nil, err
	}
	e.child.Store(o.vswitchd) // its threads' CPU time is the contender's
	return stop, nil
}

// joinPorts replaces the bridge's NORMAL rule (a learning switch that
// floods to the bridge's own internal port too) by two port-to-port rules,
// a to b and back.
func (o *ovsInstance) joinPorts(ctx context.Context, a, b string) error {
	if _, err := o.ofctl(ctx, "del-flows"); err != nil {
		return err
	}
	for _, f := range []string{"in_port=" + a + ",actions=output:" + b, "in_port=" + b + ",actions=output:" + a} {
		if _, err := o.ofctl(ctx, "add-flow", f); err != nil {
			return err
		}
	}
	return nil
}

// stop shuts ovs-vswitchd down with `exit --cleanup` (it removes its ports,
// so their XDP programs and sockets) and ovsdb-server with `exit`; a daemon
// that does not exit within 10 s is stopped by PID (SIGINT, then SIGKILL).
func (o *ovsInstance) stop() error {
	ctx := context.Background()
	var errs []error
	for _, d := range []struct {
		c      *child
		target string
		args   []string
	}{{o.vswitchd, "ovs-vswitchd", []string{"exit", "--cleanup"}}, {o.db, "ovsdb-server", []string{"exit"}}} {
		if d.c == nil {
			continue
		}
		if !d.c.exited() {
			if _, err := o.appctl(ctx, d.target, d.args...); err != nil {
				errs = append(errs, err)
			}
		}
		if !d.c.waitExit(10 * time.Second) {
			errs = append(errs, fmt.Errorf("%s did not exit within 10s of ovs-appctl %s", d.target, strings.Join(d.args, " ")))
		}
		errs = append(errs, d.c.stop(5*time.Second))
	}
	return errors.Join(errs...)
}

// removeTap removes the bridge's tap device if ovs-vswitchd left it (it was
// killed), and says so.
func (o *ovsInstance) removeTap() error {
	l, err := netlink.LinkByName(o.br)
	if err != nil {
		return nil // gone, as it should be
	}
	if _, ok := l.(*netlink.Tuntap); !ok {
		return fmt.Errorf("%s is a %s, not the bridge's tap device: left alone", o.br, l.Type())
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("ovs-vswitchd left its bridge's tap device %s, and it could not be removed: %w", o.br, err)
	}
	return fmt.Errorf("ovs-vswitchd left its bridge's tap device %s (removed)", o.br)
}

// removeDatapathTap removes the datapath's tap device if this instance
// made it: ovs-vswitchd leaves it, however it exits.
func (o *ovsInstance) removeDatapathTap() error {
	if !o.ownsDPTap {
		return nil
	}
	l, err := netlink.LinkByName(ovsDatapathTap)
	if err != nil {
		return nil
	}
	if _, ok := l.(*netlink.Tuntap); !ok {
		return fmt.Errorf("%s is a %s, not the datapath's tap device: left alone", ovsDatapathTap, l.Type())
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("remove the datapath's tap device %s: %w", ovsDatapathTap, err)
	}
	return nil
}

var (
	ovsPortRE = regexp.MustCompile(`^\s*port \d+: (\S+)(?: \((.*)\))?`)
	ovsRXRE   = regexp.MustCompile(`^\s*RX packets:(\d+) errors:(\S+) dropped:(\S+)`)
	ovsTXRE   = regexp.MustCompile(`^\s*TX packets:(\d+) errors:(\S+) dropped:(\S+)`)
	ovsPMDRE  = regexp.MustCompile(`^\s*(packets received|miss with failed upcall):\s*(\d+)`)
)

// stats reads, before the daemons stop, what ovs-vswitchd counts: over
// its afxdp ports, and for A's root end (a_*) and B's (b_*), the packets
// received and sent and the drops it knows of
// (`ovs-appctl dpctl/show -s`, read live; "?" where the afxdp netdev has no
// such counter), and its PMD threads' packets and failed upcalls
// (`dpif-netdev/pmd-stats-show`). Nothing is returned if it is not running.
func (o *ovsInstance) stats(p *topo.Pair) map[string]any {
	d := map[string]any{}
	if o.vswitchd == nil || o.vswitchd.exited() {
		return d
	}
	ctx := context.Background()
	var rx, tx, drops uint64
	if out, err := o.appctl(ctx, "ovs-vswitchd", "dpctl/show", "-s"); err == nil {
		afxdp, port := false, ""
		for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
			line := sc.Text()
			if m := ovsPortRE.FindStringSubmatch(line); m != nil {
				afxdp, port = strings.HasPrefix(m[2], "afxdp"), map[string]string{p.LinkA: "a", p.LinkB: "b"}[m[1]]
				if _, mode, ok := strings.Cut(m[2], "xdp-mode-in-use="); ok && afxdp {
					d["xdp_mode"] = strings.TrimRight(mode, ",)")
				}
				continue
			}
			if !afxdp {
				continue
			}
			for _, r := range []struct {
				re  *regexp.Regexp
				dir string
				sum *uint64
			}{{ovsRXRE, "rx", &rx}, {ovsTXRE, "tx", &tx}} {
				if m := r.re.FindStringSubmatch(line); m != nil {
					n, _ := strconv.ParseUint(m[1], 10, 64)
					*r.sum += n
					dr, derr := strconv.ParseUint(m[3], 10, 64)
					if derr == nil {
						drops += dr
					}
					if port == "" {
						continue
					}
					d[port+"_"+r.dir+"_packets"] = n
					if derr == nil {
						d[port+"_"+r.dir+"_dropped"] = dr
					}
				}
			}
		}
		d["rx_packets"], d["tx_packets"], d["drops"] = rx, tx, drops
	}
	if out, err := o.appctl(ctx, "ovs-vswitchd", "dpif-netdev/pmd-stats-show"); err == nil {
		var recv, failed uint64
		pmd := false
		for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
			line := sc.Text()
			if !strings.HasPrefix(line, " ") {
				pmd = strings.HasPrefix(line, "pmd thread")
				continue
			}
			if m := ovsPMDRE.FindStringSubmatch(line); m != nil && pmd {
				n, _ := strconv.ParseUint(m[2], 10, 64)
				if m[1] == "packets received" {
					recv += n
				} else {
					failed += n
				}
			}
		}
		d["pmd_packets_received"], d["pmd_failed_upcalls"] = recv, failed
	}
	return d
}

// cpuMask is the hexadecimal mask of one CPU, of any number, as OVS's
// pmd-cpu-mask takes it.
func cpuMask(cpu int) string {
	return "0x" + string("1248"[cpu%4]) + strings.Repeat("0", cpu/4)
}
