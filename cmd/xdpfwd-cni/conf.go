package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// Defaults of the network configuration.
const (
	DefaultMTU      = 1500
	DefaultStateDir = "/var/lib/cni/xdpfwd"
	hostPrefix      = "xfwd"
)

// NetConf is the plugin's network configuration.
type NetConf struct {
	types.PluginConf
	// Control is the daemon's control socket.
	Control  string `json:"control"`
	MTU      int    `json:"mtu,omitempty"`
	MAC      string `json:"mac,omitempty"`
	StateDir string `json:"stateDir,omitempty"`
	// RPSCPUs is where the pod end's receive processing runs (rps.go):
	// "" or "off", as the kernel has it; "auto", the online CPUs but the
	// daemon's workers'; or a CPU list, "0-3,8".
	RPSCPUs string `json:"rpsCPUs,omitempty"`
	// VLAN and Trunk are the network's VLANs, as ovs-cni's configuration
	// gives them: "vlan": N makes each pod's port an access port of VLAN
	// N (1..4094); "trunk": [{"id": 42}, {"minID": 100, "maxID": 199}] a
	// trunk of those VLANs (0: the untagged network). Neither: a port of
	// every VLAN.
	VLAN  *int         `json:"vlan,omitempty"`
	Trunk []TrunkEntry `json:"trunk,omitempty"`
	// Args is the configuration's "args": args.cni.mac, as the
	// reference bridge plugin reads it.
	Args struct {
		CNI struct {
			MAC string `json:"mac,omitempty"`
		} `json:"cni"`
	} `json:"args"`
	// RuntimeConfig is what the runtime passes for the capabilities the
	// conflist declares: "mac", "ips", which reach the IPAM plugin
	// with the rest of stdin (host-local and static take them), and
	// "bandwidth" (a pod's kubernetes.io/ingress-bandwidth and
	// egress-bandwidth), which the daemon polices.
	RuntimeConfig struct {
		MAC       string          `json:"mac,omitempty"`
		IPs       []string        `json:"ips,omitempty"`
		Bandwidth *BandwidthEntry `json:"bandwidth,omitempty"`
	} `json:"runtimeConfig"`
	// BandwidthEntry: the same limits as keys of the configuration
	// itself, as the reference bandwidth plugin takes them (and, as
	// there, over runtimeConfig's when any is given).
	*BandwidthEntry

	mac net.HardwareAddr
	ips []netip.Addr // runtimeConfig's ips, their addresses
	// bandwidth is the pod's limits (the configuration's, else
	// runtimeConfig's), nil when none.
	bandwidth *linkop.Bandwidth
	// pod is the pod the runtime names in CNI_ARGS (K8S_POD_NAMESPACE,
	// K8S_POD_NAME, K8S_POD_UID, as kubelet's runtimes pass them); nil
	// without both a namespace and a name. Unchecked: see podOf.
	pod *linkop.Pod
	rps rpsPolicy
	// vlan is VLAN's or Trunk's, nil for neither.
	vlan *linkop.VLAN
}

// TrunkEntry is one entry of "trunk", ovs-cni's: a VLAN (id) or a range
// of them (minID to maxID).
type TrunkEntry struct {
	ID    *int `json:"id,omitempty"`
	MinID *int `json:"minID,omitempty"`
	MaxID *int `json:"maxID,omitempty"`
}

// vlanOf is the network's "vlan" or "trunk" as the daemon takes it.
func vlanOf(vlan *int, trunk []TrunkEntry) (*linkop.VLAN, error) {
	switch {
	case vlan != nil && trunk != nil:
		return nil, errors.New(`"vlan" and "trunk": a pod's port is an access port of one VLAN or a trunk, not both`)
	case vlan != nil:
		if *vlan < 1 || *vlan > linkop.MaxVID {
			return nil, fmt.Errorf(`"vlan" %d: want 1..%d`, *vlan, linkop.MaxVID)
		}
		return &linkop.VLAN{Access: uint16(*vlan)}, nil
	case trunk == nil:
		return nil, nil
	case len(trunk) == 0:
		return nil, errors.New(`"trunk": empty; list the VLANs (omit it for a port of every VLAN)`)
	}
	var ids []uint16
	for _, e := range trunk {
		lo, hi := -1, -1
		switch {
		case e.ID != nil && e.MinID == nil && e.MaxID == nil:
			lo, hi = *e.ID, *e.ID
		case e.ID == nil && e.MinID != nil && e.MaxID != nil:
			lo, hi = *e.MinID, *e.MaxID
		}
		if lo < 0 || hi > linkop.MaxVID || hi < lo {
			b, _ := json.Marshal(e)
			return nil, fmt.Errorf(`"trunk" entry %s: want {"id": N} or {"minID": N, "maxID": M}, 0 <= N <= M <= %d`, b, linkop.MaxVID)
		}
		for id := lo; id <= hi; id++ {
			ids = append(ids, uint16(id))
		}
	}
	slices.Sort(ids)
	return &linkop.VLAN{Trunk: slices.Compact(ids)}, nil
}

// BandwidthEntry is CNI's "bandwidth" capability, in the reference
// bandwidth plugin's (containernetworking/plugins meta/bandwidth) units
// and meanings: rates in bits per second, bursts in bits, 0 for no limit;
// ingress is the traffic the pod receives, egress the traffic it sends;
// each rate needs its burst. xdpfwd's switch polices them (drops what is
// over the rate): the qdiscs the reference plugin would install never see
// the pod's frames, which XDP takes before them.
type BandwidthEntry struct {
	IngressRate  uint64 `json:"ingressRate,omitempty"`
	IngressBurst uint64 `json:"ingressBurst,omitempty"`
	EgressRate   uint64 `json:"egressRate,omitempty"`
	EgressBurst  uint64 `json:"egressBurst,omitempty"`
}

// maxBurst is the reference plugin's largest burst, in bits (burst/8
// under 2^32-1), and the switch's policer's (modes.MaxBurst).
const maxBurst = math.MaxUint32*8 - 1

// check is the reference plugin's validation of e.
func (e *BandwidthEntry) check() error {
	for _, d := range []struct {
		name        string
		rate, burst uint64
	}{{"ingress", e.IngressRate, e.IngressBurst}, {"egress", e.EgressRate, e.EgressBurst}} {
		switch {
		case d.rate != 0 && d.burst == 0:
			return fmt.Errorf("bandwidth: %sRate %d without %sBurst: if a rate is set, its burst must be too", d.name, d.rate, d.name)
		case d.rate == 0 && d.burst != 0:
			return fmt.Errorf("bandwidth: %sBurst %d without %sRate: if a burst is set, its rate must be too", d.name, d.burst, d.name)
		case d.burst > maxBurst:
			return fmt.Errorf("bandwidth: %sBurst %d bits: want at most %d (under 4 GiB)", d.name, d.burst, uint64(maxBurst))
		}
	}
	return nil
}

// Plugin-specific error codes (the spec gives 100 and up to plugins).
const (
	// ErrDaemonRefused: the daemon answered, and refused the link.
	ErrDaemonRefused uint = 100
)

// parseConf decodes and checks stdin's network configuration; args is
// CNI_ARGS. The container end's MAC is, the last found winning, the
// configuration's "mac", CNI_ARGS MAC=, args.cni.mac, runtimeConfig's
// mac: the reference bridge plugin's order, with "mac" below them all.
func parseConf(stdin []byte, args string) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(stdin, conf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decode the network configuration", err.Error())
	}
	if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
		return nil, types.NewError(types.ErrDecodingFailure, "decode prevResult", err.Error())
	}
	bad := func(format string, a ...any) error {
		return types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(format, a...), "")
	}
	switch {
	case conf.Control == "":
		return nil, bad(`"control": the daemon's control socket is required (e.g. "/run/xdpfwd/eth0.sock")`)
	case !filepath.IsAbs(conf.Control):
		return nil, bad(`"control" %q: want an absolute path`, conf.Control)
	case conf.IPAM.Type == "":
		return nil, bad(`"ipam": an IPAM plugin ("type", e.g. "host-local") is required`)
	case conf.MTU == 0:
		conf.MTU = DefaultMTU
	case conf.MTU < 68 || conf.MTU > 65535:
		return nil, bad(`"mtu" %d: want 68..65535`, conf.MTU)
	}
	if conf.StateDir == "" {
		conf.StateDir = DefaultStateDir
	} else if !filepath.IsAbs(conf.StateDir) {
		return nil, bad(`"stateDir" %q: want an absolute path`, conf.StateDir)
	}
	var err error
	if conf.rps, err = parseRPS(conf.RPSCPUs); err != nil {
		return nil, bad("%v", err)
	}
	if conf.vlan, err = vlanOf(conf.VLAN, conf.Trunk); err != nil {
		return nil, bad("%v", err)
	}
	mac := conf.MAC
	var pod linkop.Pod
	for _, kv := range strings.Split(args, ";") {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
		case k == "MAC":
			mac = v
		case k == "K8S_POD_NAMESPACE":
			pod.Namespace = v
		case k == "K8S_POD_NAME":
			pod.Name = v
		case k == "K8S_POD_UID":
			pod.UID = v
		}
	}
	if pod.Namespace != "" && pod.Name != "" {
		conf.pod = &pod // checked by ADD (podOf): DEL never fails on it
	}
	for _, m := range []string{conf.Args.CNI.MAC, conf.RuntimeConfig.MAC} {
		if m != "" {
			mac = m
		}
	}
	if mac != "" {
		m, err := net.ParseMAC(mac)
		if err != nil || len(m) != 6 {
			return nil, bad("mac %q: want a 6-byte Ethernet address", mac)
		}
		if m[0]&1 != 0 {
			return nil, bad("mac %q: a multicast address", mac)
		}
		conf.mac = m
	}
	// The IPAM plugin reads them; the plugin checks that it gave them
	// (an IPAM plugin that ignores them would give others silently).
	// host-local takes an address with or without a prefix, static
	// only with one.
	for _, s := range conf.RuntimeConfig.IPs {
		p, err := netip.ParsePrefix(s)
		a := p.Addr()
		if err != nil {
			if a, err = netip.ParseAddr(s); err != nil {
				return nil, bad("runtimeConfig ips %q: want an address, as 10.1.2.3/24 or 10.1.2.3", s)
			}
		}
		conf.ips = append(conf.ips, a.Unmap())
	}
	if conf.Name == "" {
		return nil, bad(`"name": the network's name is required`)
	}
	bw := conf.BandwidthEntry // the reference plugin's precedence
	if bw == nil {
		bw = conf.RuntimeConfig.Bandwidth
	}
	if bw != nil {
		if err := bw.check(); err != nil {
			return nil, bad("%v", err)
		}
		if *bw != (BandwidthEntry{}) {
			conf.bandwidth = &linkop.Bandwidth{IngressRate: bw.IngressRate, IngressBurst: bw.IngressBurst, EgressRate: bw.EgressRate, EgressBurst: bw.EgressBurst}
		}
	}
	return conf, nil
}

// HostName is the host end's name for an attachment: "xfwd" and 11 hex
// digits of a hash of the container ID and interface name, 15 bytes (the
// longest a Linux interface name is). The same attachment always gets the
// same name, so DEL, CHECK and GC find it without a record; two
// attachments share one with odds of 2^-44.
func HostName(containerID, ifname string) string {
	h := sha256.Sum256([]byte(containerID + "\x00" + ifname))
	return hostPrefix + hex.EncodeToString(h[:])[:15-len(hostPrefix)]
}

// podOf is the pod ADD names to the daemon: conf.pod, checked. A runtime
// that names a pod the daemon would refuse fails the ADD, saying which
// argument (DEL and CHECK never read it so).
func (conf *NetConf) podOf() (*linkop.Pod, error) {
	if conf.pod == nil {
		return nil, nil
	}
	if err := conf.pod.Check(); err != nil {
		return nil, types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS K8S_POD_*", err.Error())
	}
	return conf.pod, nil
}
