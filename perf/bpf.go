package main

import (
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// XDP actions.
const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
)

// loadAction loads an XDP program that returns action for every frame.
func loadAction(name string, action int32) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    name,
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, action),
			asm.Return(),
		},
	})
}

// loadRedirect assembles, without a C compiler:
//
//	return bpf_redirect_map(&devmap, key, XDP_ABORTED);
//
// A frame the map cannot take is aborted (and counted by the kernel's
// xdp:xdp_exception tracepoint), never passed to the root namespace's stack.
func loadRedirect(devmap *ebpf.Map, key int32) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "perf_redirect",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R1, devmap.FD()),
			asm.Mov.Imm(asm.R2, key),
			asm.Mov.Imm(asm.R3, xdpAborted),
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
	})
}

// xdpSet is a group of XDP attachments made through BPF links, so that the
// kernel removes them if perf dies, and Close removes them otherwise.
type xdpSet struct {
	links []link.Link
	progs []*ebpf.Program
	maps  []*ebpf.Map
}

// attach attaches prog in native mode to ifname of the root namespace (ns
// nil) or of ns.
func (x *xdpSet) attach(ns *topo.NS, ifname string, prog *ebpf.Program) error {
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

func (x *xdpSet) Close() error {
	var errs []error
	for _, l := range x.links {
		errs = append(errs, l.Close())
	}
	for _, p := range x.progs {
		errs = append(errs, p.Close())
	}
	for _, m := range x.maps {
		errs = append(errs, m.Close())
	}
	x.links, x.progs, x.maps = nil, nil, nil
	return errors.Join(errs...)
}

// xdpAttached reports whether the root-namespace link carries an XDP
// program, and its id.
func xdpAttached(ifname string) (bool, uint32, error) {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return false, 0, err
	}
	if x := l.Attrs().Xdp; x != nil && x.Attached {
		return true, x.ProgId, nil
	}
	return false, 0, nil
}

// detachNetlinkXDP removes an XDP program attached through netlink (as
// asavie/xdp attaches it). Programs held by BPF links cannot be removed this
// way; they go when their link's last reference does.
func detachNetlinkXDP(ifname string) error {
	l, err := netlink.LinkByName(ifname)
	if err != nil {
		return err
	}
	return netlink.LinkSetXdpFd(l, -1)
}
