// Attaching XDP programs to links, and finding one left behind.

package xdpprog

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// Set is a group of XDP attachments made through BPF links, so that the
// kernel removes them if perf dies, and Close removes them otherwise.
type Set struct {
	links []link.Link
	Progs []*ebpf.Program // closed by Close, after the links
	Maps  []*ebpf.Map     // closed by Close, last
}

// Attach attaches prog in native mode to ifname of the root namespace (ns
// nil) or of ns.
func (x *Set) Attach(ns *topo.NS, ifname string, prog *ebpf.Program) error {
	do := func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPDriverMode})
		if err != nil {
			return err
		}
		x.links = append(x.links, l)
		return nil
	}
	var err error
	where := "root namespace"
	if ns == nil {
		err = do()
	} else {
		where = ns.Name
		err = ns.Do(do)
	}
	if err != nil {
		return fmt.Errorf("attach XDP program to %s in %s: %w", ifname, where, err)
	}
	return nil
}

// Close detaches every program of the set and closes its programs and
// maps.
func (x *Set) Close() error {
	var errs []error
	for _, l := range x.links {
		errs = append(errs, l.Close())
	}
	for _, p := range x.Progs {
		errs = append(errs, p.Close())
	}
	for _, m := range x.Maps {
		errs = append(errs, m.Close())
	}
	x.links, x.Progs, x.Maps = nil, nil, nil
	return errors.Join(errs...)
}

// Attached reports whether the root-namespace link carries an XDP
// program, and its id.
func Attached(ifname string) (bool, uint32, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return false, 0, err
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return true, x.ProgId, nil
	}
	return false, 0, nil
}

// DetachNetlink removes an XDP program attached through netlink (as
// asavie/xdp attaches it). Programs held by BPF links cannot be removed this
// way; they go when their link's last reference does.
func DetachNetlink(ifname string) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	return netlink.LinkSetXdpFd(l, -1)
}
