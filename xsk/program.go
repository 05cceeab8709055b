package xsk

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// MetaLen is the size of the metadata the program writes in front of each
// packet: the arrival time, bpf_ktime_get_ns, as a native-endian uint64.
const MetaLen = 8

// xdpPass is the XDP_PASS action.
const xdpPass = 2

// ProgramName is the name xdpfwd's XDP program carries, so another
// instance (or an operator) can tell it from a foreign program.
const ProgramName = "xdpfwd_redir"

// XDPMode selects where the XDP program runs.
type XDPMode int

const (
	XDPAuto    XDPMode = iota // native, else generic
	XDPNative                 // in the driver
	XDPGeneric                // on the skb path, any driver
)

// ParseXDPMode parses "auto", "native" or "generic".
func ParseXDPMode(s string) (XDPMode, error) {
	switch s {
	case "auto":
		return XDPAuto, nil
	case "native":
		return XDPNative, nil
	case "generic":
		return XDPGeneric, nil
	}
	return 0, fmt.Errorf("xdp mode %q: want auto, native or generic", s)
}

// ErrForeignProgram is returned when a link already carries an XDP program
// that this process did not attach.
var ErrForeignProgram = errors.New("link already has an XDP program")

// Program is the XDP program of one link and the XSKMAP it redirects into.
type Program struct {
	ifname string
	prog   *ebpf.Program
	xsks   *ebpf.Map
	// passed counts, per CPU, packets the program handed to the kernel's
	// stack because no socket was registered for their RX queue.
	passed *ebpf.Map
	link   link.Link
	mode   string

	ifindex int
	// foreign is the program Attach with force detached, held until
	// Commit, so that Close can put it back in its mode (foreignFlags) if
	// xdpfwd's setup fails.
	foreign      *ebpf.Program
	foreignFlags int
}

// Attach loads the redirect program for a link with up to queues RX queues
// and attaches it through a BPF link, so the kernel removes it when the
// last reference goes, even if this process is killed with SIGKILL.
// A foreign program already on the link is refused unless force is set, in
// which case it is detached first (possible only for programs attached
// through netlink, not through someone else's BPF link). Until Commit, Close
// re-attaches the foreign program, so a setup that fails half-way leaves the
// link as it found it.
func Attach(ifname string, ifindex, queues int, mode XDPMode, force bool) (_ *Program, err error) {
	foreign, foreignFlags, err := checkForeign(ifname, ifindex, force)
	if err != nil {
		return nil, err
	}
	p := &Program{ifname: ifname, ifindex: ifindex, foreign: foreign, foreignFlags: foreignFlags}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	p.xsks, err = ebpf.NewMap(&ebpf.MapSpec{
		Name:       "xdpfwd_xsks",
		Type:       ebpf.XSKMap,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: uint32(max(queues, 1)),
	})
	if err != nil {
		return nil, fmt.Errorf("xdp %s: XSKMAP: %w", ifname, err)
	}
	if p.passed, err = newPassedMap(); err != nil {
		return nil, fmt.Errorf("xdp %s: %w", ifname, err)
	}
	if p.prog, err = loadRedirect(p.xsks, p.passed); err != nil {
		return nil, fmt.Errorf("xdp %s: load program: %w", ifname, err)
	}
	try := []struct {
		flags link.XDPAttachFlags
		name  string
	}{{link.XDPDriverMode, "native"}, {link.XDPGenericMode, "generic"}}
	switch mode {
	case XDPNative:
		try = try[:1]
	case XDPGeneric:
		try = try[1:]
	}
	var errs []error
	for _, t := range try {
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: t.flags})
		if err == nil {
			p.link, p.mode = l, t.name
			return p, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
	}
	return nil, fmt.Errorf("xdp %s: attach: %w", ifname, errors.Join(errs...))
}

// newPassedMap makes the per-CPU counter of packets passed to the stack.
func newPassedMap() (*ebpf.Map, error) {
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "xdpfwd_passed",
		Type:       ebpf.PerCPUArray,
		KeySize:    4,
		ValueSize:  8,
		MaxEntries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("passed counter map: %w", err)
	}
	return m, nil
}

// loadRedirect assembles, without a C compiler:
//
//	act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//	if (act == XDP_PASS)
//		(*bpf_map_lookup_elem(&passed, &zero))++;
//	return act;
//
// The low bits of the flags argument are the action when the map has no
// socket for the queue: such packets go on to the kernel's stack, and are
// counted, since they never reach xdpfwd.
// The program is frags-aware where the kernel allows it, so multi-buffer
// (jumbo) packets reach sockets bound with XDP_USE_SG.
func loadRedirect(xsks, passed *ebpf.Map) (*ebpf.Program, error) {
	// struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index
	const dataOff, metaOff, rxQueueIndexOff = 0, 8, 16
	insns := asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		// Stamp the arrival time into 8 bytes of metadata in front of the
		// packet: user space orders a flow that arrives on several RX
		// queues by it. Best effort: without room, no stamp.
		asm.Mov.Imm(asm.R2, -MetaLen),
		asm.FnXdpAdjustMeta.Call(),
		asm.JNE.Imm(asm.R0, 0, "redirect"),
		asm.FnKtimeGetNs.Call(),
		asm.LoadMem(asm.R2, asm.R6, metaOff, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, dataOff, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, MetaLen),
		asm.JGT.Reg(asm.R4, asm.R3, "redirect"),
		asm.StoreMem(asm.R2, 0, asm.R0, asm.DWord),
		asm.LoadMem(asm.R2, asm.R6, rxQueueIndexOff, asm.Word).WithSymbol("redirect"),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.JNE.Imm(asm.R0, xdpPass, "out"),
		// No socket at this index: count the packet in this CPU's slot.
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, passed.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return().WithSymbol("out"),
	}
	spec := &ebpf.ProgramSpec{
		Name:         ProgramName,
		Type:         ebpf.XDP,
		License:      "Dual BSD/GPL",
		Instructions: insns,
		Flags:        unix.BPF_F_XDP_HAS_FRAGS,
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		spec.Flags = 0
		prog, err = ebpf.NewProgram(spec)
	}
	return prog, err
}

// checkForeign refuses a link that carries an XDP program this process did
// not attach, unless force. With force it detaches the program, keeping a
// reference to it and its attach flags, so that restoreForeign can put it
// back if xdpfwd's own setup then fails.
func checkForeign(ifname string, ifindex int, force bool) (foreign *ebpf.Program, flags int, err error) {
	l, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return nil, 0, fmt.Errorf("xdp %s: %w", ifname, err)
	}
	x := l.Attrs().Xdp
	if x == nil || !x.Attached && x.ProgId == 0 {
		return nil, 0, nil
	}
	name := "?"
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
	if err == nil {
		if info, err := prog.Info(); err == nil {
			name = info.Name
		}
	}
	defer func() {
		if foreign == nil && prog != nil {
			prog.Close()
		}
	}()
	if strings.HasPrefix(name, ProgramName) {
		return nil, 0, fmt.Errorf("xdp %s: %w: program %d (%s) belongs to another xdpfwd instance on this link", ifname, ErrForeignProgram, x.ProgId, name)
	}
	if !force {
		return nil, 0, fmt.Errorf("xdp %s: %w: program %d (%s); refusing to replace it without --force", ifname, ErrForeignProgram, x.ProgId, name)
	}
	// Detach in the mode it sits in (a detach in another mode succeeds
	// and does nothing); a program held by another process's BPF link
	// cannot be removed this way, and says so below.
	mode := map[uint32]int{
		nl.XDP_ATTACHED_DRV: unix.XDP_FLAGS_DRV_MODE,
		nl.XDP_ATTACHED_SKB: unix.XDP_FLAGS_SKB_MODE,
		nl.XDP_ATTACHED_HW:  unix.XDP_FLAGS_HW_MODE,
	}
	flags, known := mode[x.AttachMode]
	if known {
		err = netlink.LinkSetXdpFdWithFlags(l, -1, flags)
	} else {
		for _, fl := range []int{unix.XDP_FLAGS_DRV_MODE, unix.XDP_FLAGS_SKB_MODE, unix.XDP_FLAGS_HW_MODE} {
			err = errors.Join(err, netlink.LinkSetXdpFdWithFlags(l, -1, fl))
		}
	}
	if l, err2 := netlink.LinkByIndex(ifindex); err2 == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.ProgId != 0 {
		return nil, 0, fmt.Errorf("xdp %s: %w: program %d (%s) could not be detached (held by a BPF link?): %v", ifname, ErrForeignProgram, x.ProgId, name, err)
	}
	if prog == nil {
		// Gone between the look-up and the detach: nothing to restore.
		return nil, 0, nil
	}
	return prog, flags, nil
}

// restoreForeign re-attaches, through netlink and in its original mode, the
// foreign program checkForeign detached. It never replaces a program that
// appeared on the link meanwhile.
func (p *Program) restoreForeign() error {
	l, err := netlink.LinkByIndex(p.ifindex)
	if err != nil {
		return fmt.Errorf("xdp %s: restore foreign program: %w", p.ifname, err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, p.foreign.FD(), p.foreignFlags|unix.XDP_FLAGS_UPDATE_IF_NOEXIST); err != nil {
		return fmt.Errorf("xdp %s: restore foreign program: %w", p.ifname, err)
	}
	return nil
}

// Commit declares xdpfwd's setup on the link complete: from now on Close
// only detaches xdpfwd's program and no longer puts back the foreign
// program that Attach with force replaced.
func (p *Program) Commit() {
	if p.foreign != nil {
		p.foreign.Close()
		p.foreign = nil
	}
}

// Register points the program at a socket for RX queue q.
func (p *Program) Register(q int, s *Socket) error {
	if err := p.xsks.Update(uint32(q), uint32(s.FD()), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("xdp %s: XSKMAP[%d] = socket: %w", p.ifname, q, err)
	}
	return nil
}

// Unregister removes the socket for queue q; its packets go to the stack.
func (p *Program) Unregister(q int) error {
	if err := p.xsks.Delete(uint32(q)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp %s: XSKMAP delete %d: %w", p.ifname, q, err)
	}
	return nil
}

// Passed returns how many packets the program handed to the kernel's stack
// because no socket was registered for their RX queue, summed over CPUs.
func (p *Program) Passed() (uint64, error) {
	if p.passed == nil {
		return 0, fmt.Errorf("xdp %s: program closed", p.ifname)
	}
	var perCPU []uint64
	if err := p.passed.Lookup(uint32(0), &perCPU); err != nil {
		return 0, fmt.Errorf("xdp %s: read passed counter: %w", p.ifname, err)
	}
	var n uint64
	for _, v := range perCPU {
		n += v
	}
	return n, nil
}

// Mode is "native" or "generic": where the program got attached.
func (p *Program) Mode() string { return p.mode }

// Close detaches the program and frees its maps. Before Commit, it puts
// back the foreign program Attach with force replaced.
func (p *Program) Close() error {
	var errs []error
	if p.link != nil {
		errs = append(errs, p.link.Close())
		p.link = nil
	}
	if p.foreign != nil {
		errs = append(errs, p.restoreForeign())
		p.foreign.Close()
		p.foreign = nil
	}
	if p.prog != nil {
		errs = append(errs, p.prog.Close())
		p.prog = nil
	}
	if p.xsks != nil {
		errs = append(errs, p.xsks.Close())
		p.xsks = nil
	}
	if p.passed != nil {
		errs = append(errs, p.passed.Close())
		p.passed = nil
	}
	return errors.Join(errs...)
}
