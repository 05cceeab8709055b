package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
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
	// Args is the configuration's "args": args.cni.mac, as the
	// reference bridge plugin reads it.
	Args struct {
		CNI struct {
			MAC string `json:"mac,omitempty"`
		} `json:"cni"`
	} `json:"args"`
	// RuntimeConfig is what the runtime passes for the capabilities the
	// conflist declares: "mac", and "ips", which reach the IPAM plugin
	// with the rest of stdin (host-local and static take them).
	RuntimeConfig struct {
		MAC string   `json:"mac,omitempty"`
		IPs []string `json:"ips,omitempty"`
	} `json:"runtimeConfig"`

	mac net.HardwareAddr
	ips []netip.Addr // runtimeConfig's ips, their addresses
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
	mac := conf.MAC
	for _, kv := range strings.Split(args, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == "MAC" {
			mac = v
		}
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
