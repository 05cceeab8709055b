// Command xdpfwd-cni is the CNI plugin (spec 0.3.0 to 1.1.0: results at
// the configuration's version through the CNI library's conversion; CHECK
// from 0.4.0, GC and STATUS from 1.1.0) that plugs containers
// into a node's xdpfwd: for each attachment (container ID and interface
// name) it owns a veth pair, the container end in the container's
// namespace with the IPAM plugin's addresses and routes, the host end
// named after the attachment (HostName) and handed to the daemon over its
// control socket (package control/linkop); the IPAM lease, which it asks
// the configured IPAM plugin for and releases; and a small state record
// per attachment (under stateDir) through which GC finds attachments the
// runtime no longer knows. The daemon owns what it does with the host end.
//
// A network configuration (one plugin of a conflist):
//
//	{
//	  "type": "xdpfwd-cni",
//	  "control": "/run/xdpfwd/eth0.sock",
//	  "mtu": 1500,
//	  "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]]}
//	}
//
// "mac" sets the container end's address, and over it CNI_ARGS MAC=,
// args.cni.mac and runtimeConfig's "mac" (capability "mac"), in the
// reference bridge plugin's order; runtimeConfig's "ips" (capability
// "ips") reach the IPAM plugin, and ADD checks it gave them. "stateDir"
// moves the state records (default /var/lib/cni/xdpfwd). The plugin goes
// first in a chain: its result lists the host end (no sandbox) and the
// container end, for portmap, bandwidth, tuning after it.
//
// `xdpfwd-cni install` (no CNI_COMMAND) copies the binary and a conflist
// into the runtime's directories; with --wait-for-daemon only once the
// daemon is available, for a container beside it in its DaemonSet's pod.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "install" && os.Getenv("CNI_COMMAND") == "" {
		os.Exit(install(os.Args[2:], os.Stderr))
	}
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		Status: cmdStatus,
		GC:     cmdGC,
	}, version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"), "xdpfwd-cni: containers on a node's xdpfwd switch")
}
