// A switch port's security: the pod's MAC and IPs an add's options give
// (controlSocket.portFor), and the add that secures the link with them.

package main

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// Port security of the links added over the control socket (modes'
// portsec.go): an add that gives the pod's MAC (xdpfwd-cni's, xdpfwd link
// add --mac) gets it in switch mode unless --port-security off or the add
// itself says no; an add without a MAC (an older plugin, a plain xdpfwd
// link add) is a link like the --link ones, learning freely.

// portFor is the port security an add's options ask for: secure says
// whether the link gets p. Options that cannot be met are the request's
// fault.
func (cs *controlSocket) portFor(o linkop.AddOptions) (p modes.Port, secure bool, err error) {
	if o.MAC != "" {
		if p.MAC, err = net.ParseMAC(o.MAC); err != nil || len(p.MAC) != 6 {
			return p, false, fmt.Errorf("mac %q: not an Ethernet address (aa:bb:cc:dd:ee:ff)", o.MAC)
		}
	}
	for _, s := range o.IPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			// An address with its prefix, as CNI results give it.
			pf, perr := netip.ParsePrefix(s)
			if perr != nil {
				return p, false, fmt.Errorf("ip %q: not an IP address", s)
			}
			a = pf.Addr()
		}
		p.IPs = append(p.IPs, a.Unmap())
	}
	secure = cs.portSecurity && p.MAC != nil
	explicit := o.PortSecurity != nil
	if explicit {
		secure = *o.PortSecurity
	}
	switch {
	case secure && cs.sw == nil:
		if explicit {
			return p, false, fmt.Errorf("port security is a switch's: this daemon runs in %s mode", cs.mode)
		}
		secure = false // a MAC given to a reflector or a sink: nothing to secure
	case secure && p.MAC == nil:
		return p, false, errors.New("port security needs the pod's MAC address (mac)")
	}
	return p, secure, nil
}

// AddWith implements linkop.OptionsManager: an add with a pod's MAC, and
// maybe its IPs, is secured (portFor); the switch is told the link's port
// before the forwarder adds it, so that its first frame is checked.
//
// Its bandwidth limits (bandwidth.go) are given to the switch the same
// way, before the link is added.
func (d daemonLinks) AddWith(name string, o linkop.AddOptions) error {
	p, secure, err := d.cs.portFor(o)
	if err == nil {
		var lim modes.Limits
		if lim, err = d.cs.limitsFor(o); err == nil {
			return d.addPort(name, p, secure, lim)
		}
	}
	return linkop.Refused(fmt.Errorf("link add %s: %w", name, err))
}

// addPort adds link name with port security p if secure and limits
// lim, if any.
func (d daemonLinks) addPort(name string, p modes.Port, secure bool, lim modes.Limits) error {
	if (!secure && lim.IsZero()) || d.cs.isGiven(name) {
		return d.Add(name) // a --link link is forwarded already, never secured
	}
	sw := d.cs.sw
	return d.change("add", name, func(lm linkop.LinkManager, name string) error {
		if secure {
			if err := sw.SecurePort(name, p); err != nil {
				return &fwd.InputError{Err: fmt.Errorf("link add %s: %w", name, err)}
			}
		}
		if !lim.IsZero() {
			if err := sw.LimitPort(name, lim); err != nil {
				if secure {
					sw.ReleasePort(name)
				}
				return &fwd.InputError{Err: fmt.Errorf("link add %s: %w", name, err)}
			}
		}
		err := lm.AddLink(name)
		switch {
		case err == nil:
			if d.cs.log != nil && secure {
				d.cs.log.Info("port security", "link", name, "mac", p.MAC.String(), "ips", fmt.Sprint(p.IPs))
			}
			if d.cs.log != nil && !lim.IsZero() {
				d.cs.log.Info("bandwidth limits", "link", name, "limits", limitsString(lim))
			}
		case !errors.Is(err, linkop.ErrExists):
			// Not added: the name keeps no port security, no limits.
			if secure {
				sw.ReleasePort(name)
			}
			sw.ReleaseLimits(name)
		}
		return err
	})
}

// releasePort ends the port security of link name once it is removed, or
// was removed already (its veth deleted with its pod): the pod's address
// may then be another link's.
func (cs *controlSocket) releasePort(name string, err error) {
	if cs.sw != nil && (err == nil || errors.Is(err, linkop.ErrUnknownLink)) {
		cs.sw.ReleasePort(name)
		cs.sw.ReleaseLimits(name)
	}
}
