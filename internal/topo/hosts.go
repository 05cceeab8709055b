package topo

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
)

// Hosts is n network namespaces, each joined to the root namespace by a
// veth pair, all in one IPv4 and one IPv6 subnet: the containers of one
// node, for a forwarder that switches between the root-side ends (Links).
// Host i is 198.18.0.(i+1)/24 and fd00:5844:5046::(i+1)/64 on its "eth0".
type Hosts struct {
	Name  string
	NS    []*NS
	Links []string // root-side ends, in host order
	V4    []netip.Addr
	V6    []netip.Addr
	roots []rootLink
}

// NewHosts builds n hosts (1..200) with fresh, unique names. opt applies
// to every veth as for NewPair (VLAN is not supported). On error
// everything created so far is removed.
func NewHosts(n int, opt Options) (_ *Hosts, err error) {
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	h := &Hosts{Name: "xdpfwd-" + id}
	if n < 1 || n > 200 || opt.VLAN != 0 {
		return nil, fmt.Errorf("topo: hosts %s: want 1..200 hosts and no VLAN, got %d, VLAN %d", h.Name, n, opt.VLAN)
	}
	if err := opt.validate(); err != nil {
		return nil, fmt.Errorf("topo: hosts %s: %w", h.Name, err)
	}
	if opt.Queues == 0 {
		opt.Queues = 1
	}
	if opt.MTU == 0 {
		opt.MTU = 1500
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("topo: hosts %s: %w", h.Name, errors.Join(err, h.Close()))
		}
	}()
	h.roots = make([]rootLink, n)
	for i := range n {
		ns, err := newNS(h.Name + "-h" + strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		h.NS = append(h.NS, ns)
		v4 := netip.AddrFrom4([4]byte{198, 18, 0, byte(i + 1)})
		v6 := v6A.As16()
		v6[15] = byte(i + 1)
		h.V4 = append(h.V4, v4)
		h.V6 = append(h.V6, netip.AddrFrom16(v6))
		h.roots[i].name = "xf" + id + "h" + strconv.Itoa(i)
		h.Links = append(h.Links, h.roots[i].name)
		var p Pair
		if err := p.addSide(ns, &h.roots[i], v4, h.V6[i], netip.Addr{}, opt); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Close removes every veth and namespace the Hosts created; safe to call
// more than once and on a partial Hosts.
func (h *Hosts) Close() error {
	if h == nil {
		return nil
	}
	var errs []error
	for i := range h.roots {
		if err := h.roots[i].remove(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range h.NS {
		if err := ns.close(); err != nil {
			errs = append(errs, err)
		}
	}
	h.NS = nil
	return errors.Join(errs...)
}
