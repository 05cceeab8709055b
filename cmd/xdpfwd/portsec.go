// A switch port's security: the pod's MAC and IPs an add's options give
// (controlSocket.portFor), and the add that secures the link with them.

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"

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
//
// Its VLANs (vlansFor) too, first: a secured access port's address is
// pinned in its VLAN.
//
// The pod it names (pods.go) is recorded once the link is added.
func (d daemonLinks) AddWith(name string, o linkop.AddOptions) error {
	var err error
	if o.Pod != nil {
		err = o.Pod.Check()
	}
	if err == nil {
		var pp portPolicy
		if pp.port, pp.secure, err = d.cs.portFor(o); err == nil {
			if pp.limits, err = d.cs.limitsFor(o); err == nil {
				if pp.vlans, pp.secure, err = d.cs.vlansFor(o, pp.secure); err == nil {
					return d.addPort(name, pp, o.Pod)
				}
			}
		}
	}
	return linkop.Refused(fmt.Errorf("link add %s: %w", name, err))
}

// portPolicy is what an add asks of the switch for its link: port
// security (port, if secure), bandwidth limits and VLANs.
type portPolicy struct {
	port   modes.Port
	secure bool
	limits modes.Limits
	vlans  modes.VLANs
}

// plain reports whether pp asks for nothing: a link like the --link ones.
func (pp portPolicy) plain() bool { return !pp.secure && pp.limits.IsZero() && pp.vlans.IsZero() }

// equal reports whether pp and q ask for the same.
func (pp portPolicy) equal(q portPolicy) bool {
	return pp.secure == q.secure && (!pp.secure || pp.port.Equal(q.port)) && pp.limits == q.limits && pp.vlans.Equal(q.vlans)
}

func (pp portPolicy) String() string {
	s := "no port security"
	if pp.secure {
		s = fmt.Sprintf("port security for MAC %s, IPs %v", pp.port.MAC, pp.port.IPs)
	}
	if !pp.limits.IsZero() {
		s += ", limits " + limitsString(pp.limits)
	} else {
		s += ", no limits"
	}
	if !pp.vlans.IsZero() {
		s += ", VLANs " + pp.vlans.String()
	}
	return s
}

// vlansFor is the VLANs an add's options ask for (the zero VLANs for
// none), and whether the port is secured: VLANs are a switch's, and port
// security an access port's, so a trunk is secured only if the add asks
// for it, which is refused; the daemon's default (--port-security on)
// leaves a trunk unsecured, as a router's or a bridge's port.
func (cs *controlSocket) vlansFor(o linkop.AddOptions, secure bool) (modes.VLANs, bool, error) {
	if o.VLAN == nil {
		return modes.VLANs{}, secure, nil
	}
	v := modes.VLANs{Access: o.VLAN.Access, Trunk: o.VLAN.Trunk}
	switch err := v.Check(); {
	case err != nil:
		return v, false, err
	case cs.sw == nil:
		return v, false, fmt.Errorf("VLANs are a switch's: this daemon runs in %s mode", cs.mode)
	case secure && len(v.Trunk) > 0 && o.PortSecurity != nil:
		return v, false, errors.New("trunk: port security is an access port's (give vlan, or port security off)")
	case len(v.Trunk) > 0:
		secure = false
	}
	return v, secure, nil
}

// addPort adds link name, serving pod, with policy pp. A refusal changes
// nothing: a link forwarded already is refused before anything is
// touched (ErrExists for an add retried as it was made, ErrExistsOther
// for one that asks for another policy, or names another pod than the
// one it serves), and an add that fails after the switch was told its
// policy puts it back as it was.
func (d daemonLinks) addPort(name string, pp portPolicy, pod *linkop.Pod) error {
	if d.cs.isGiven(name) {
		return d.Add(name) // a --link link is forwarded already, never secured, no pod's
	}
	sw := d.cs.sw
	return d.change("add", name, func(lm linkop.LinkManager, name string) error {
		if f := d.cs.fw.Load(); f != nil && slices.Contains(f.Links(), name) {
			if err := d.cs.servesOther(name, pod); err != nil {
				return err
			}
			if pp.plain() {
				return lm.AddLink(name) // the forwarder's "exists"
			}
			return forwardedAs(sw, name, pp)
		}
		if pp.plain() {
			err := lm.AddLink(name)
			if err == nil {
				d.cs.serves(name, pod)
			}
			return err
		}
		restore := sw.Checkpoint()
		err := givePort(sw, name, pp)
		if err == nil {
			err = lm.AddLink(name)
		}
		if err != nil {
			restore()
			return err
		}
		d.cs.serves(name, pod)
		if d.cs.log != nil && pp.secure {
			d.cs.log.Info("port security", "link", name, "mac", pp.port.MAC.String(), "ips", fmt.Sprint(pp.port.IPs))
		}
		if d.cs.log != nil && !pp.limits.IsZero() {
			d.cs.log.Info("bandwidth limits", "link", name, "limits", limitsString(pp.limits))
		}
		if d.cs.log != nil && !pp.vlans.IsZero() {
			d.cs.log.Info("vlans", "link", name, "vlans", pp.vlans.String())
		}
		return nil
	})
}

// givePort tells sw link name's policy pp before it is added: its VLANs
// first (a secured access port's address is pinned in its VLAN), its
// port security, its limits. An address the switch cannot pin is the
// add's fault, with the code that names why.
func givePort(sw *modes.Switch, name string, pp portPolicy) error {
	if !pp.vlans.IsZero() {
		if err := sw.SetVLANs(name, pp.vlans); err != nil {
			return &fwd.InputError{Err: fmt.Errorf("link add %s: %w", name, err)}
		}
	}
	if pp.secure {
		if err := sw.SecurePort(name, pp.port); err != nil {
			err = fmt.Errorf("link add %s: %w", name, err)
			switch {
			case errors.Is(err, modes.ErrPortInUse):
				err = linkop.Mark(err, linkop.ErrMACInUse)
			case errors.Is(err, modes.ErrPortNoRoom):
				err = linkop.Mark(err, linkop.ErrMACNoRoom)
			}
			return &fwd.InputError{Err: err}
		}
	}
	if !pp.limits.IsZero() {
		if err := sw.LimitPort(name, pp.limits); err != nil {
			return &fwd.InputError{Err: fmt.Errorf("link add %s: %w", name, err)}
		}
	}
	return nil
}

// forwardedAs is the refusal of an add of link name, which the switch
// forwards already: ErrExists if it has the policy the add asks for (a
// retried add), else ErrExistsOther, naming both.
func forwardedAs(sw *modes.Switch, name string, pp portPolicy) error {
	has, hasPort := sw.Ports()[name]
	now := portPolicy{port: has, secure: hasPort, limits: sw.PortLimits()[name], vlans: sw.PortVLANs()[name]}
	if now.equal(pp) {
		return fmt.Errorf("link add %s: %w", name, linkop.ErrExists)
	}
	return linkop.Refused(fmt.Errorf("link add %s: forwarded with %s; the add asks for %s (link del it first): %w",
		name, now, pp, linkop.ErrExistsOther))
}

// serves records that link name, just added, serves pod (nil: none), and
// logs it.
func (cs *controlSocket) serves(name string, pod *linkop.Pod) {
	cs.pods.set(name, pod)
	if cs.log != nil && pod != nil {
		cs.log.Info("link serves pod", "link", name, "pod", pod.String(), "uid", pod.UID)
	}
}

// servesOther is the refusal of an add naming pod for link name, which
// is forwarded already serving another pod (ErrExistsOther); nil when
// the add names none, or the link serves none (added before pods were
// named: the retry of an add an older plugin made).
func (cs *controlSocket) servesOther(name string, pod *linkop.Pod) error {
	has, ok := cs.pods.of(name)
	if pod == nil || !ok || has == *pod {
		return nil
	}
	return linkop.Refused(fmt.Errorf("link add %s: serves pod %s (uid %q); the add names pod %s (uid %q) (link del it first): %w",
		name, has, has.UID, *pod, pod.UID, linkop.ErrExistsOther))
}

// releasePort ends the port security of link name once it is removed, or
// was removed already (its veth deleted with its pod): the pod's address
// may then be another link's.
func (cs *controlSocket) releasePort(name string, err error) {
	if cs.sw != nil && (err == nil || errors.Is(err, linkop.ErrUnknownLink)) {
		cs.sw.ReleasePort(name)
		cs.sw.ReleaseLimits(name)
		cs.sw.ReleaseVLANs(name)
	}
}

// logPortEvents logs what the switch did to secured ports on its own
// (modes.PortEvent) until ctx is done: a pod's MAC taken over from the
// link it was learned on, and one lost when heard there again.
func (cs *controlSocket) logPortEvents(ctx context.Context, logger *slog.Logger) {
	name := func(i int) string {
		if f := cs.fw.Load(); f != nil && i >= 0 && i < len(f.Links()) {
			return f.Links()[i]
		}
		return fmt.Sprint(i)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-cs.sw.Events():
			switch {
			case e.Status == modes.PortProvisional:
				logger.Warn("port security: the pod's MAC was learned on another link; taken over as a pod that moved would be, provisionally: heard there again within --fdb-age, the pod loses it",
					"link", e.Name, "mac", e.MAC.String(), "learned_on", name(e.Other))
			case e.Other < 0:
				logger.Error("port security: the pod's MAC could not be pinned; every frame from its link is dropped (spoofed_source): remove and add it again",
					"link", e.Name, "mac", e.MAC.String())
			default:
				logger.Error("port security revoked: the pod's MAC was heard again on the link it was taken from, so it is not the pod's; every frame from its link is dropped (spoofed_source), and the MAC is forwarded where it speaks",
					"link", e.Name, "mac", e.MAC.String(), "heard_on", name(e.Other))
			}
			if e.Status == modes.PortRevoked {
				cs.saveRevoked(logger)
			}
		}
	}
}

// saveRevoked writes the link state file after a port was revoked, so
// that a daemon started again restores it revoked.
func (cs *controlSocket) saveRevoked(logger *slog.Logger) {
	f := cs.fw.Load()
	if f == nil {
		return
	}
	cs.linkOps.Lock()
	defer cs.linkOps.Unlock()
	if err := cs.saveLinks(f, cs.given); err != nil {
		logger.Error("link state not written: a revoked port is restored provisional if the daemon restarts", "err", err)
	}
}
