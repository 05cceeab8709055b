package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ip"
	"github.com/containernetworking/plugins/pkg/ipam"
	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/utils/sysctl"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

func cniErr(code uint, msg string, err error) *types.Error {
	var te *types.Error
	if errors.As(err, &te) {
		return types.NewError(te.Code, msg+": "+te.Msg, te.Details)
	}
	return types.NewError(code, msg, err.Error())
}

// daemonErr is the CNI error for a failed request to the daemon. A
// refusal is definite: the same ADD would be refused again. For a link
// whose MTU the daemon's frames cannot hold it is 7 (invalid network
// configuration: the configuration's "mtu" is what cannot be, and the
// spec's code for a configuration that does not validate); for any other
// (its --max-links taken, a mode that takes no links, ...) the plugin's
// own 100, ErrDaemonRefused: no spec code fits a daemon's limit, and 11
// would have the runtime retry what only a DEL elsewhere, or the
// operator, can change. A request the daemon did not answer, or failed
// to meet without refusing it (a rebuild under way), is 11, try again
// later.
func daemonErr(conf *NetConf, what string, err error) *types.Error {
	var re *linkop.RequestError
	switch {
	case errors.Is(err, linkop.ErrMTU):
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(`xdpfwd refused to %s: "mtu" %d of the network configuration`, what, conf.MTU), err.Error())
	case errors.Is(err, linkop.ErrUnsupported) || errors.Is(err, linkop.ErrExists) || errors.Is(err, linkop.ErrExistsOther) ||
		errors.Is(err, linkop.ErrMACInUse) || errors.Is(err, linkop.ErrMACNoRoom) ||
		errors.Is(err, linkop.ErrUnknownLink) || errors.Is(err, linkop.ErrNoSuchLink) || errors.As(err, &re):
		return types.NewError(ErrDaemonRefused, "xdpfwd refused to "+what, err.Error())
	}
	return types.NewError(types.ErrTryAgainLater, "xdpfwd did not answer to "+what, err.Error())
}

// ipamConf is stdin for the IPAM plugin, and the spec version it is
// called at: the configuration's, if the plugin speaks it, else the
// highest it speaks below that (Debian's host-local, 1.1.1, speaks up to
// 1.0.0: a 1.1.0 network calls it at 1.0.0, whose requests and results
// 1.1.0 only extends; its result is converted up by the library, as any
// IPAM result is). The configuration is the same but for "cniVersion",
// and "prevResult" (CHECK's and DEL's) converted to that version by the
// library. Callers ask the plugin for what that version has: CHECK from
// 0.4.0, STATUS and GC from 1.1.0 (ipamHas).
func ipamConf(conf *NetConf, stdin []byte) ([]byte, string, error) {
	path, err := invoke.FindInPath(conf.IPAM.Type, filepath.SplitList(os.Getenv("CNI_PATH")))
	if err != nil {
		return nil, "", types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("IPAM plugin %q", conf.IPAM.Type), err.Error())
	}
	info, err := invoke.GetVersionInfo(context.TODO(), path, nil)
	if err != nil {
		return nil, "", cniErr(types.ErrIOFailure, fmt.Sprintf("IPAM plugin %s: VERSION", path), err)
	}
	vs := info.SupportedVersions()
	if slices.Contains(vs, conf.CNIVersion) {
		return stdin, conf.CNIVersion, nil
	}
	at := ""
	for _, v := range vs {
		below, err := version.GreaterThan(conf.CNIVersion, v)
		if err != nil || !below {
			continue
		}
		if higher, _ := version.GreaterThan(v, at); at == "" || higher {
			at = v
		}
	}
	// Below 0.3.0 a result has no interfaces; none of the versions this
	// plugin speaks is that old.
	if old, _ := version.GreaterThan("0.3.0", at); at == "" || old {
		return nil, "", types.NewError(types.ErrIncompatibleCNIVersion,
			fmt.Sprintf("IPAM plugin %s speaks CNI %v, none of them from 0.3.0 up to the network's %s", path, vs, conf.CNIVersion), "")
	}
	var m map[string]any
	if err := json.Unmarshal(stdin, &m); err != nil {
		return nil, "", types.NewError(types.ErrDecodingFailure, "decode the network configuration", err.Error())
	}
	m["cniVersion"] = at
	if conf.PrevResult != nil {
		prev, err := conf.PrevResult.GetAsVersion(at)
		if err != nil {
			return nil, "", cniErr(types.ErrIncompatibleCNIVersion, fmt.Sprintf("prevResult for IPAM plugin %s at CNI %s", path, at), err)
		}
		m["prevResult"] = prev
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, "", types.NewError(types.ErrDecodingFailure, "encode the IPAM plugin's configuration", err.Error())
	}
	return b, at, nil
}

// ipamStdin is ipamConf's stdin, and whether the IPAM plugin is called
// at a version with STATUS and GC.
func ipamStdin(conf *NetConf, stdin []byte) ([]byte, bool, error) {
	b, at, err := ipamConf(conf, stdin)
	return b, err == nil && ipamHas(at, "1.1.0"), err
}

// ipamHas reports whether an IPAM plugin called at spec version v has a
// command that came in spec version since (CHECK 0.4.0, STATUS and GC
// 1.1.0).
func ipamHas(v, since string) bool {
	ok, _ := version.GreaterThanOrEqualTo(v, since)
	return ok
}

// daemonList is the daemon's link list.
func daemonList(conf *NetConf) (linkop.List, error) {
	d, err := linkop.Dial(conf.Control)
	if err != nil {
		return linkop.List{}, err
	}
	defer d.Close()
	return d.ListLinks()
}

// daemonAvailable asks the daemon at control whether it serves pods
// now (linkop.List.Available), and says why not.
func daemonAvailable(control string) error {
	d, err := linkop.Dial(control)
	if err != nil {
		return err
	}
	defer d.Close()
	l, err := d.ListLinks()
	if err != nil {
		return err
	}
	if err := l.Available(); err != nil {
		return fmt.Errorf("control socket %s: %w", control, err)
	}
	return nil
}

// maxQueues bounds the queues a daemon may ask of a veth: the kernel's
// limit for a net device's queues (4096).
const maxQueues = 4096

// errUnavailable is a daemon that answers but cannot take a pod now
// (linkop.List.Available: stopping, stalled): try again later.
// errRefusesLinks is one that says it would refuse any link (its
// AddRefused): a refusal, as its link add's would be.
var (
	errUnavailable  = errors.New("xdpfwd is not available")
	errRefusesLinks = errors.New("xdpfwd refuses every link")
)

// daemonForAdd asks the daemon (link list) how it would take a link: how
// many RX and TX queues an added link needs (List.Queues: one per worker,
// 0 from a daemon that does not say, meaning one) and where its workers
// run (List.CPUs, for RPS). A daemon that says it cannot take the link
// (draining after SIGTERM, a stalled worker, refusing every link) is
// errUnavailable with its reason: ADD fails then, before it builds
// anything, rather than build the pod's veth and lease and wait on a
// link add the daemon will not answer until its socket closes.
func daemonForAdd(conf *NetConf) (linkop.List, error) {
	l, err := daemonList(conf)
	if err != nil {
		return l, err
	}
	if err := l.Available(); err != nil {
		if l.AddRefused != "" {
			return l, fmt.Errorf("control socket %s: %w: %w", conf.Control, errRefusesLinks, err)
		}
		return l, fmt.Errorf("control socket %s: %w: %w", conf.Control, errUnavailable, err)
	}
	if l.Queues > maxQueues {
		return l, fmt.Errorf("control socket %s: the daemon asks for %d queues per link, more than a device has (%d)", conf.Control, l.Queues, maxQueues)
	}
	if conf.vlan != nil && !slices.Contains(l.Features, linkop.FeatureVLAN) {
		// An older daemon would take the add and ignore its VLAN: the
		// pod would be in every network.
		return l, fmt.Errorf("control socket %s: %w: the network has VLANs, and this daemon has none (not a switch, or an older xdpfwd)", conf.Control, errRefusesLinks)
	}
	return l, nil
}

// setupVeth makes the veth pair from inside the container's namespace
// (as ip.SetupVethWithName does, which cannot set queues): contName here,
// hostName in hostNS and up, both ends with queues RX and TX queues, the
// MTU and the container end's MAC (nil: the kernel's). It returns the
// host end and the container end.
func setupVeth(contName, hostName string, mtu int, mac net.HardwareAddr, queues int, hostNS ns.NetNS) (net.Interface, net.Interface, error) {
	la := netlink.NewLinkAttrs()
	la.Name = contName
	la.MTU = mtu
	la.NumTxQueues = queues
	la.NumRxQueues = queues
	la.HardwareAddr = mac
	veth := &netlink.Veth{LinkAttrs: la, PeerName: hostName, PeerNamespace: netlink.NsFd(int(hostNS.Fd()))}
	if err := netlink.LinkAdd(veth); err != nil {
		return net.Interface{}, net.Interface{}, fmt.Errorf("make veth pair: %w", err)
	}
	cont, err := netlinksafe.LinkByName(contName)
	if err != nil {
		netlink.LinkDel(veth)
		return net.Interface{}, net.Interface{}, err
	}
	var host netlink.Link
	err = hostNS.Do(func(ns.NetNS) error {
		var err error
		if host, err = netlinksafe.LinkByName(hostName); err != nil {
			return fmt.Errorf("%s in %s: %w", hostName, hostNS.Path(), err)
		}
		if err := netlink.LinkSetUp(host); err != nil {
			return fmt.Errorf("set %s up: %w", hostName, err)
		}
		// The host end carries no addresses of its own: no router
		// advertisements either (as ip.SetupVethWithName does).
		sysctl.Sysctl(fmt.Sprintf("net/ipv6/conf/%s/accept_ra", hostName), "0")
		return nil
	})
	if err != nil {
		netlink.LinkDel(cont)
		return net.Interface{}, net.Interface{}, err
	}
	return iface(host), iface(cont), nil
}

// sameNS says why path no longer names namespace n, which ADD opened
// from it: the runtime unmounted and removed it (the sandbox torn down),
// or another namespace is there now.
func sameNS(path string, n ns.NetNS) error {
	var opened, now unix.Stat_t
	if err := unix.Fstat(int(n.Fd()), &opened); err != nil {
		return fmt.Errorf("container namespace %s: %w", path, err)
	}
	if err := unix.Stat(path, &now); err != nil {
		return fmt.Errorf("container namespace %s: %w", path, err)
	}
	if now.Dev != opened.Dev || now.Ino != opened.Ino {
		return fmt.Errorf("container namespace %s: another namespace is there now", path)
	}
	return nil
}

func iface(l netlink.Link) net.Interface {
	a := l.Attrs()
	return net.Interface{Index: a.Index, MTU: a.MTU, Name: a.Name, HardwareAddr: a.HardwareAddr, Flags: a.Flags}
}

// addSteps are ADD's steps in order: the record (the intent, before
// anything is made), the veth pair (and its container end's RPS), the
// IPAM lease, the container end's addresses and routes, the daemon's
// link. After each the record says it is done (record.Stage), and a
// test build may kill the plugin there (killPoint).
var addSteps = []string{"record", "veth", "ipam", "addresses", "daemon"}

// stageAdded is the record's Stage once ADD has printed its result.
const stageAdded = "added"

// cmdAdd attaches the container. A second ADD of an attachment whose
// interface is in the container already (a runtime retrying an ADD it
// thought had timed out) is an error that changes nothing: the spec's
// rule for an interface name taken, and the bridge plugin's. Succeeding
// instead would mean returning the first ADD's result, which would have
// to be kept and checked against what is there now, to answer a call
// the spec says a runtime should not make (ADD twice without DEL); the
// error is plain, and the runtime's DEL that must follow a failed ADD
// undoes the attachment whole.
func cmdAdd(args *skel.CmdArgs) (err error) {
	conf, err := parseConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	pod, err := conf.podOf()
	if err != nil {
		return err
	}
	host := HostName(args.ContainerID, args.IfName)
	// The daemon first: with none to hand the link to, build nothing;
	// and it says how many queues the veth needs (its workers). (Asked
	// again at the end: the IPAM plugin, a DHCP client say, may take
	// longer than the daemon waits on an idle connection.)
	daemon, err := daemonForAdd(conf)
	if err != nil {
		return addErr(conf, host, err)
	}
	// Where the pod's receive work goes (RPS: off the daemon's workers'
	// CPUs), settled before anything is built: a CPU the configuration
	// names that is not online is its fault.
	rpsCPUs, err := conf.rpsTargets(daemon.CPUs)
	if err != nil {
		return err
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("container namespace %q", args.Netns), err.Error())
	}
	defer netns.Close()
	stdin, err := conf.clearForAdd(args, host, netns)
	if err != nil {
		return err
	}
	a := &adding{conf: conf, args: args, netns: netns, rec: conf.recordOf(args, host)}
	// The record first, then each step and the record saying it is
	// done: whenever the plugin stops, the record is there for DEL and
	// GC, which undo an attachment whatever step it reached.
	defer func() {
		if err != nil {
			// Best effort: what cannot be undone now is still in the
			// record, for the DEL that follows a failed ADD, or GC.
			detach(conf, a.rec, args.StdinData)
		}
	}()
	res, err := a.build(max(daemon.Queues, 1), rpsCPUs, stdin, pod)
	if err != nil {
		return err
	}
	a.rec.Stage = stageAdded
	if err = conf.saveRecord(a.rec); err != nil {
		return types.NewError(types.ErrIOFailure, "state record", err.Error())
	}
	return types.PrintResult(res, conf.CNIVersion)
}

// clearForAdd checks that ADD may build host's attachment in the
// container's namespace netns and undoes whatever an earlier ADD of it
// left; it returns the IPAM plugin's stdin.
func (conf *NetConf) clearForAdd(args *skel.CmdArgs, host string, netns ns.NetNS) ([]byte, error) {
	if _, err := conf.trustStateDir(true); err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, `"stateDir": `+err.Error(), "")
	}
	prior, hasPrior := conf.loadRecord(host)
	// An ADD of this attachment that did not finish (killed: its record
	// is short of "added") leaves an interface that is ours to replace;
	// any other is not.
	unfinished := hasPrior && prior.Stage != stageAdded && prior.Netns == args.Netns
	if !unfinished && netns.Do(func(ns.NetNS) error { _, err := netlinksafe.LinkByName(args.IfName); return err }) == nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables,
			fmt.Sprintf("CNI_IFNAME %q: the container's namespace %s has an interface by that name already (ADD twice without DEL?): left as it is", args.IfName, args.Netns), "")
	}
	stdin, _, err := ipamStdin(conf, args.StdinData)
	if err != nil {
		return nil, err
	}
	// What an earlier ADD of this attachment left (it did not finish, or
	// its container's namespace is gone or another now: the interface is
	// not in this one): undone first, whole. The host end's name is this
	// attachment's, and the IPAM plugin refuses a second lease to it.
	if _, lerr := netlink.LinkByName(host); lerr == nil || hasPrior {
		if err := detach(conf, conf.recordOf(args, host), args.StdinData); err != nil {
			return nil, cniErr(types.ErrTryAgainLater, "undo what an earlier ADD of "+host+" left", err)
		}
	}
	return stdin, nil
}

// recordOf is the record of attachment host before its first step.
func (conf *NetConf) recordOf(args *skel.CmdArgs, host string) record {
	return record{ContainerID: args.ContainerID, IfName: args.IfName, Host: host, Netns: args.Netns, Control: conf.Control}
}

// adding is an ADD building its attachment, step by step (addSteps),
// rec saying how far it got.
type adding struct {
	conf  *NetConf
	args  *skel.CmdArgs
	netns ns.NetNS
	rec   record
}

// build makes the attachment: the veth of queues queues (its pod's
// receive work on rpsCPUs), the IPAM lease (stdin: the IPAM plugin's),
// the addresses and routes, and the link handed to the daemon for pod;
// it returns the result ADD prints.
func (a *adding) build(queues int, rpsCPUs []int, stdin []byte, pod *linkop.Pod) (*current.Result, error) {
	conf, args := a.conf, a.args
	if err := a.step("record"); err != nil {
		return nil, err
	}
	var hostIf, contIf net.Interface
	err := a.netns.Do(func(hostNS ns.NetNS) error {
		var err error
		hostIf, contIf, err = setupVeth(args.IfName, a.rec.Host, conf.MTU, conf.mac, queues, hostNS)
		return err
	})
	if err == nil {
		a.rec.RPSCPUs, err = conf.rps.set(args.Netns, args.IfName, rpsCPUs)
	}
	if err != nil {
		return nil, types.NewError(types.ErrIOFailure, fmt.Sprintf("veth %s (host) / %s (container)", a.rec.Host, args.IfName), err.Error())
	}
	if err := a.step("veth"); err != nil {
		return nil, err
	}
	r, err := ipam.ExecAdd(conf.IPAM.Type, stdin)
	if err != nil {
		return nil, cniErr(types.ErrIOFailure, "IPAM "+conf.IPAM.Type+" ADD", err)
	}
	if err := a.step("ipam"); err != nil {
		return nil, err
	}
	res, err := conf.ipamResult(r, hostIf, contIf, args)
	if err != nil {
		return nil, err
	}
	if err := a.netns.Do(func(ns.NetNS) error { return ipam.ConfigureIface(args.IfName, res) }); err != nil {
		return nil, types.NewError(types.ErrIOFailure, "addresses and routes on "+args.IfName, err.Error())
	}
	if err := a.step("addresses"); err != nil {
		return nil, err
	}
	if err := conf.handOver(a.rec.Host, contIf.HardwareAddr, res, pod); err != nil {
		return nil, err
	}
	return res, a.step("daemon")
}

// step records that ADD finished step name, and fails if the
// container's namespace is no longer at its path. A runtime that tears
// the sandbox down while ADD runs deletes it, and what ADD holds open of
// it lives on only until the plugin exits: an ADD that went on would
// report a pod attached whose interface the kernel deletes a moment
// later; it fails instead, undoing what it made. The code is 8 (invalid
// network namespace, the library's ErrInvalidNetNS, as for a path that
// is not one at the start) and not 3 (unknown container): 3 tells the
// runtime it need not call DEL, and DEL is what undoes what this undo
// could not. Nor 11: trying again cannot bring the namespace back.
func (a *adding) step(name string) error {
	a.rec.Stage = name
	if err := a.conf.saveRecord(a.rec); err != nil {
		return types.NewError(types.ErrIOFailure, "state record", err.Error())
	}
	killPoint(name)
	if err := sameNS(a.args.Netns, a.netns); err != nil {
		return types.NewError(types.ErrInvalidNetNS,
			fmt.Sprintf("container namespace %q deleted during ADD (after its step %q): the attachment undone", a.args.Netns, name), err.Error())
	}
	return nil
}

// addErr is the error of an ADD whose daemon, asked first (daemonForAdd),
// cannot take link host: a refusal (100), a daemon that cannot now (11,
// try again later), or one that does not answer.
func addErr(conf *NetConf, host string, err error) error {
	switch {
	case errors.Is(err, errRefusesLinks):
		return types.NewError(ErrDaemonRefused, "xdpfwd refused to add "+host, err.Error())
	case errors.Is(err, errUnavailable):
		return types.NewError(types.ErrTryAgainLater, "xdpfwd cannot add "+host+" now", err.Error())
	}
	return daemonErr(conf, "add "+host, err)
}

// ipamResult is the IPAM plugin's result r as ADD returns it, checked:
// at least one address, and every address runtimeConfig's ips asked for;
// the host end and the container end as its interfaces, the addresses
// the container end's.
func (conf *NetConf) ipamResult(r types.Result, hostIf, contIf net.Interface, args *skel.CmdArgs) (*current.Result, error) {
	res, err := current.NewResultFromResult(r)
	if err != nil {
		return nil, cniErr(types.ErrDecodingFailure, "IPAM "+conf.IPAM.Type+" result", err)
	}
	if len(res.IPs) == 0 {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, "IPAM "+conf.IPAM.Type+" gave no address", "")
	}
	for _, want := range conf.ips {
		if !slices.ContainsFunc(res.IPs, func(ipc *current.IPConfig) bool {
			a, _ := netip.AddrFromSlice(ipc.Address.IP)
			return a.Unmap() == want
		}) {
			return nil, types.NewError(types.ErrInvalidNetworkConfig,
				fmt.Sprintf("IPAM %s did not give %s, asked for in runtimeConfig ips (does it take them?)", conf.IPAM.Type, want), "")
		}
	}
	res.Interfaces = []*current.Interface{
		{Name: hostIf.Name, Mac: hostIf.HardwareAddr.String(), Mtu: conf.MTU},
		{Name: args.IfName, Mac: contIf.HardwareAddr.String(), Mtu: conf.MTU, Sandbox: args.Netns},
	}
	for _, ipc := range res.IPs {
		ipc.Interface = current.Int(1)
	}
	return res, nil
}

// handOver asks the daemon to forward link host, the pod's: with the
// pod's MAC and addresses (its switch secures the port), the network's
// bandwidth limits (it polices them) and VLANs, and the pod's name (shown
// wherever the link is). A link it forwards already is fine (a retried
// ADD's).
func (conf *NetConf) handOver(host string, podMAC net.HardwareAddr, res *current.Result, pod *linkop.Pod) error {
	d, err := linkop.Dial(conf.Control)
	if err != nil {
		return daemonErr(conf, "add "+host, err)
	}
	defer d.Close()
	podIPs := make([]net.IP, 0, len(res.IPs))
	for _, ipc := range res.IPs {
		podIPs = append(podIPs, ipc.Address.IP)
	}
	opts := linkop.PodOptions(podMAC, podIPs)
	opts.Bandwidth, opts.Pod, opts.VLAN = conf.bandwidth, pod, conf.vlan
	if err := d.AddLinkWith(host, opts); err != nil && !errors.Is(err, linkop.ErrExists) {
		return daemonErr(conf, "add "+host, err)
	}
	return nil
}

func cmdDel(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	host := HostName(args.ContainerID, args.IfName)
	if err := detach(conf, record{ContainerID: args.ContainerID, IfName: args.IfName, Host: host}, args.StdinData); err != nil {
		return err
	}
	return nil
}

// detach undoes an attachment, whatever is left of it: the daemon's link
// (a daemon that is gone, or never had it, is fine), the veth (gone with
// its namespace is fine), the IPAM lease and the record.
func detach(conf *NetConf, r record, confStdin []byte) error {
	if d, err := linkop.Dial(conf.Control); err == nil {
		// Not of a daemon stopping (SIGTERM): that one answers no link
		// del until it is gone, and DEL must not fail on what is going
		// anyway. The kernel's deleting the veth below removes it from
		// a daemon that does not remove it itself. (A link the daemon
		// does not list is asked all the same: it may hold it out,
		// waiting for it, and the del ends that.)
		l, err := d.ListLinks()
		if err != nil || l.Health != linkop.HealthStopping {
			err = d.DelLink(r.Host)
		}
		d.Close()
		if err != nil && !errors.Is(err, linkop.ErrUnknownLink) && !errors.Is(err, linkop.ErrUnsupported) {
			return daemonErr(conf, "del "+r.Host, err)
		}
	}
	if err := ip.DelLinkByName(r.Host); err != nil && !errors.Is(err, ip.ErrLinkNotFound) {
		return types.NewError(types.ErrIOFailure, "delete veth "+r.Host, err.Error())
	}
	stdin, _, err := ipamStdin(conf, confStdin)
	if err != nil {
		return err
	}
	if err := ipam.ExecDel(conf.IPAM.Type, stdin); err != nil {
		return cniErr(types.ErrIOFailure, "IPAM "+conf.IPAM.Type+" DEL", err)
	}
	if err := conf.removeRecord(r.Host); err != nil {
		return types.NewError(types.ErrIOFailure, "state record", err.Error())
	}
	return nil
}

func cmdCheck(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if conf.PrevResult == nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "CHECK needs prevResult", "")
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return cniErr(types.ErrDecodingFailure, "prevResult", err)
	}
	host := HostName(args.ContainerID, args.IfName)
	hl, err := netlink.LinkByName(host)
	if err != nil {
		return types.NewError(types.ErrIOFailure, "host veth "+host, err.Error())
	}
	if _, ok := hl.(*netlink.Veth); !ok {
		return types.NewError(types.ErrIOFailure, "host end "+host+" is a "+hl.Type()+", not a veth", "")
	}
	if hl.Attrs().Flags&net.FlagUp == 0 {
		return types.NewError(types.ErrIOFailure, "host veth "+host+" is down", "")
	}
	netns, err := ns.GetNS(args.Netns)
	if err != nil {
		return types.NewError(types.ErrInvalidNetNS, fmt.Sprintf("container namespace %q", args.Netns), err.Error())
	}
	defer netns.Close()
	var ips []*current.IPConfig
	for _, ipc := range prev.IPs {
		if ipc.Interface == nil || *ipc.Interface < 0 || *ipc.Interface >= len(prev.Interfaces) || prev.Interfaces[*ipc.Interface].Name == args.IfName {
			ips = append(ips, ipc)
		}
	}
	var podMAC net.HardwareAddr
	err = netns.Do(func(ns.NetNS) error {
		cl, peer, err := ip.GetVethPeerIfindex(args.IfName)
		if err != nil {
			return err
		}
		podMAC = cl.Attrs().HardwareAddr
		if peer != hl.Attrs().Index {
			return fmt.Errorf("%s's peer is ifindex %d, not %s (%d)", args.IfName, peer, host, hl.Attrs().Index)
		}
		if cl.Attrs().MTU != conf.MTU {
			return fmt.Errorf("%s: MTU %d, configured %d", args.IfName, cl.Attrs().MTU, conf.MTU)
		}
		// Its MAC, as the chain left it (tuning may change it after ADD).
		for _, pi := range prev.Interfaces {
			if pi.Name == args.IfName && pi.Sandbox != "" && pi.Mac != "" && pi.Mac != cl.Attrs().HardwareAddr.String() {
				return fmt.Errorf("%s: MAC %s, prevResult says %s", args.IfName, cl.Attrs().HardwareAddr, pi.Mac)
			}
		}
		if err := ip.ValidateExpectedInterfaceIPs(args.IfName, ips); err != nil {
			return err
		}
		return ip.ValidateExpectedRoute(prev.Routes)
	})
	if err == nil {
		// The masks ADD set, if it set any: a pod's receive work back
		// on the daemon's workers' CPUs takes them from the datapath.
		if rec, ok := conf.loadRecord(host); ok {
			err = checkRPS(args.Netns, args.IfName, rec.RPSCPUs)
		}
	}
	if err != nil {
		return types.NewError(types.ErrIOFailure, "container end "+args.IfName, err.Error())
	}
	stdin, at, err := ipamConf(conf, args.StdinData)
	if err != nil {
		return err
	}
	if ipamHas(at, "0.4.0") {
		if err := ipam.ExecCheck(conf.IPAM.Type, stdin); err != nil {
			return cniErr(types.ErrIOFailure, "IPAM "+conf.IPAM.Type+" CHECK", err)
		}
	}
	d, err := linkop.Dial(conf.Control)
	if err != nil {
		return daemonErr(conf, "list links", err)
	}
	defer d.Close()
	l, err := d.ListLinks()
	if err != nil {
		return daemonErr(conf, "list links", err)
	}
	k, ok := l.Link(host)
	if !ok {
		return types.NewError(types.ErrIOFailure, "xdpfwd does not forward "+host, "")
	}
	if err := checkPolicy(k, podMAC, conf.bandwidth, conf.vlan); err != nil {
		return types.NewError(types.ErrIOFailure, "xdpfwd's link "+host, err.Error())
	}
	if p := conf.pod; p != nil && k.Pod != nil && *k.Pod != *p {
		return types.NewError(types.ErrIOFailure, "xdpfwd's link "+host, fmt.Sprintf("serves pod %s (uid %q), not %s (uid %q)", k.Pod, k.Pod.UID, p, p.UID))
	}
	return nil
}

// checkPolicy says how the daemon's link k fails the pod: secured for
// another MAC than the pod's (a chained plugin, tuning say, changed it
// after ADD: its frames are dropped as spoofed_source), or policed to
// other limits than the network's (none: not policed), or in other VLANs
// than the network's.
func checkPolicy(k linkop.Link, podMAC net.HardwareAddr, want *linkop.Bandwidth, vlan *linkop.VLAN) error {
	if (k.VLAN == nil) != (vlan == nil) || vlan != nil && (k.VLAN.Access != vlan.Access || !slices.Equal(k.VLAN.Trunk, vlan.Trunk)) {
		return fmt.Errorf("in VLANs %s, the network's are %s", vlanString(k.VLAN), vlanString(vlan))
	}
	if k.MAC != "" && k.MAC != podMAC.String() {
		return fmt.Errorf("port security for MAC %s, but the pod's is %s: its frames are dropped (spoofed_source)", k.MAC, podMAC)
	}
	if k.PortState == "revoked" {
		return fmt.Errorf("port security revoked: the pod's MAC %s is heard on another of the switch's links, so its frames are dropped (spoofed_source)", podMAC)
	}
	switch {
	case want == nil && k.Bandwidth != nil:
		return fmt.Errorf("policed to %+v, the network gives no limits", *k.Bandwidth)
	case want != nil && k.Bandwidth == nil:
		return fmt.Errorf("not policed, the network gives limits %+v", *want)
	case want != nil && *want != *k.Bandwidth:
		return fmt.Errorf("policed to %+v, the network gives %+v", *k.Bandwidth, *want)
	}
	return nil
}

// vlanString is v for a message.
func vlanString(v *linkop.VLAN) string {
	switch {
	case v == nil:
		return "all"
	case v.Access != 0:
		return fmt.Sprintf("access %d", v.Access)
	}
	return fmt.Sprintf("trunk %v", v.Trunk)
}

// cmdStatus: the daemon answers, forwards and takes links
// (linkop.List.Available): one that is gone, draining (SIGTERM), has a
// stalled worker, or would refuse every ADD is not available (50); one
// with no link yet (a switch before its first pod) is. And the IPAM
// plugin is ready, if it can say.
func cmdStatus(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	if err := daemonAvailable(conf.Control); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "xdpfwd is not available", err.Error())
	}
	stdin, has11, err := ipamStdin(conf, args.StdinData)
	if err != nil {
		return err
	}
	if has11 {
		return ipam.ExecStatus(conf.IPAM.Type, stdin)
	}
	return nil
}

// cmdGC detaches every attachment of the network with a record that is
// not in cni.dev/valid-attachments.
func cmdGC(args *skel.CmdArgs) error {
	conf, err := parseConf(args.StdinData, args.Args)
	if err != nil {
		return err
	}
	valid := map[string]bool{}
	for _, a := range conf.ValidAttachments {
		valid[a.ContainerID+"\x00"+a.IfName] = true
	}
	if _, err := conf.trustStateDir(false); err != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, `GC: "stateDir": `+err.Error(), "")
	}
	recs, errs, err := conf.records()
	if err != nil {
		return types.NewError(types.ErrIOFailure, "GC", err.Error())
	}
	for _, r := range recs {
		if valid[r.ContainerID+"\x00"+r.IfName] {
			continue
		}
		// The IPAM plugin releases by container ID and interface name,
		// which it reads from the environment.
		os.Setenv("CNI_CONTAINERID", r.ContainerID)
		os.Setenv("CNI_IFNAME", r.IfName)
		os.Setenv("CNI_NETNS", "")
		if err := detach(conf, r, args.StdinData); err != nil {
			errs = append(errs, fmt.Errorf("%s (%s/%s): %w", r.Host, r.ContainerID, r.IfName, err))
		}
	}
	os.Unsetenv("CNI_CONTAINERID")
	os.Unsetenv("CNI_IFNAME")
	stdin, has11, err := ipamStdin(conf, args.StdinData)
	if err == nil && has11 {
		err = invoke.DelegateGC(context.TODO(), conf.IPAM.Type, stdin, nil)
	}
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return types.NewError(types.ErrIOFailure, "GC", errors.Join(errs...).Error())
	}
	return nil
}
