package xsk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/enum"
)

// The metadata the program writes in front of every packet, MetaLen bytes
// ending where the packet starts:
//
//	addr-16  VLAN tag protocol, big-endian (as on the wire)
//	addr-14  VLAN TCI (PCP, DEI, VID), native-endian
//	addr-12  VLAN flags, native-endian uint32: MetaVLANValid if a tag was
//	         recovered from the receive metadata, else 0
//	addr-8   arrival time, bpf_ktime_get_ns, native-endian uint64; 0 when
//	         the program was attached with AttachConfig.NoStamps
//
// The kernel does not zero metadata, so the program writes all of it on
// every packet it has room for.
const (
	MetaLen       = 16
	MetaStampOff  = 8  // the stamp is at addr-MetaStampOff
	MetaVLANOff   = 16 // the VLAN word is at addr-MetaVLANOff
	MetaVLANValid = 0x564c4e01
)

// MetaStamp reads the arrival stamp in front of the packet at addr in mem.
// The caller checks that addr-MetaStampOff is inside the packet's frame.
func MetaStamp(mem []byte, addr uint64) int64 {
	return int64(binary.NativeEndian.Uint64(mem[addr-MetaStampOff:]))
}

// MetaVLAN reads the VLAN word in front of the packet at addr in mem: the
// tag protocol and TCI the program recovered, and whether it recovered one.
// The caller checks that addr-MetaVLANOff is inside the packet's frame.
func MetaVLAN(mem []byte, addr uint64) (proto, tci uint16, ok bool) {
	w := mem[addr-MetaVLANOff : addr-MetaVLANOff+8]
	if binary.NativeEndian.Uint32(w[4:]) != MetaVLANValid {
		return 0, 0, false
	}
	return binary.BigEndian.Uint16(w), binary.NativeEndian.Uint16(w[2:]), true
}

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

var xdpModeNames = enum.New[XDPMode]("XDPMode", "auto", "native", "generic")

// ParseXDPMode parses "auto", "native" or "generic".
func ParseXDPMode(s string) (XDPMode, error) {
	if m, ok := xdpModeNames.Parse(s); ok {
		return m, nil
	}
	return 0, fmt.Errorf("xdp mode %q: want %s", s, xdpModeNames.Want())
}

// String is m as ParseXDPMode reads it.
func (m XDPMode) String() string { return xdpModeNames.String(m) }

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
	// stamps: the newest arrival stamp per RX queue (LastStamps); nil
	// when the program takes none (AttachConfig.NoStamps).
	stamps *LastStamps
	link   link.Link
	mode   string
	// vlan: the program is device-bound and recovers VLAN tags from the
	// receive metadata; vlanErr says why not, if it is not.
	vlan    bool
	vlanErr error
	// nativeErr is the driver's refusal of native mode, when auto fell
	// back to generic.
	nativeErr error

	ifindex int
	// foreign is the program Attach with force detached, held until
	// Commit, so that Close can put it back in its mode (foreignFlags) if
	// xdpfwd's setup fails.
	foreign      *ebpf.Program
	foreignFlags int
}

// AttachConfig says how Attach puts the program on a link. The zero value
// serves one RX queue, native mode where the driver has it, and stamps.
type AttachConfig struct {
	// Queues is how many RX queues the program redirects (the XSKMAP's
	// size); 0 is 1.
	Queues int
	Mode   XDPMode
	// Force detaches a foreign program first.
	Force bool
	// NoStamps: the program writes 0 for the arrival stamp and keeps no
	// LastStamps, saving a clock read per packet (about 50 ns under
	// kvm-clock, on the CPU the packet arrives on) where nothing reads
	// the stamps.
	NoStamps bool
}

// Attach loads the redirect program for a link and attaches it through a
// BPF link, so the kernel removes it when the last reference goes, even if
// this process is killed with SIGKILL. A foreign program already on the
// link is refused unless cfg.Force is set, in which case it is detached
// first (possible only for programs attached through netlink, not through
// someone else's BPF link). Until Commit, Close re-attaches the foreign
// program, so a setup that fails half-way leaves the link as it found it.
func Attach(ifname string, ifindex int, cfg AttachConfig) (_ *Program, err error) {
	queues, mode := max(cfg.Queues, 1), cfg.Mode
	foreign, foreignFlags, err := checkForeign(ifname, ifindex, cfg.Force)
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
		MaxEntries: uint32(queues),
	})
	if err != nil {
		return nil, fmt.Errorf("xdp %s: XSKMAP: %w", ifname, err)
	}
	if p.passed, err = newPassedMap(); err != nil {
		return nil, fmt.Errorf("xdp %s: %w", ifname, err)
	}
	if !cfg.NoStamps {
		if p.stamps, err = newLastStamps(queues); err != nil {
			return nil, fmt.Errorf("xdp %s: %w", ifname, err)
		}
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
		if err := p.load(t.flags == link.XDPDriverMode); err != nil {
			return nil, fmt.Errorf("xdp %s: load program: %w", ifname, err)
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: t.flags})
		if err == nil {
			p.link, p.mode = l, t.name
			// Auto fell back: say why native was refused (igb's at
			// an MTU beyond its XDP buffer, say).
			p.nativeErr = errors.Join(errs...)
			return p, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", t.name, err))
	}
	return nil, fmt.Errorf("xdp %s: attach: %w", ifname, errors.Join(errs...))
}

// load makes p.prog the program to attach: for native mode the
// device-bound one that recovers VLAN tags, where the kernel and the
// driver allow it, else the plain one, which generic mode needs (the
// kernel refuses device-bound programs there).
func (p *Program) load(native bool) error {
	if !native {
		p.vlanErr = errors.New("generic XDP mode: receive metadata kfuncs need native mode")
	}
	if p.prog != nil {
		if native || !p.vlan {
			return nil
		}
		p.prog.Close()
		p.prog, p.vlan = nil, false
	}
	if native {
		ok, err := rxVLANMetadata(p.ifindex)
		switch {
		case err != nil:
			p.vlanErr = err
		case !ok:
			p.vlanErr = errors.New("the driver has no VLAN tag RX metadata (bpf_xdp_metadata_rx_vlan_tag)")
		default:
			prog, err := loadRedirect(p.xsks, p.passed, p.stamps, p.ifindex)
			if err == nil {
				p.prog, p.vlan, p.vlanErr = prog, true, nil
				return nil
			}
			p.vlanErr = err
		}
	}
	prog, err := loadRedirect(p.xsks, p.passed, p.stamps, 0)
	if err != nil {
		return err
	}
	p.prog = prog
	return nil
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
//	meta = ctx->data - MetaLen (bpf_xdp_adjust_meta), if there is room:
//		if (stamps && ctx->rx_queue_index < nstamps)
//			stamps[ctx->rx_queue_index] = StampBusy;
//		meta->stamp = stamps ? bpf_ktime_get_ns() : 0;
//		if (stamps && ctx->rx_queue_index < nstamps)
//			stamps[ctx->rx_queue_index] = meta->stamp;
//		meta->vlan = 0;
//		if (vlanIfindex && !bpf_xdp_metadata_rx_vlan_tag(ctx, &meta->proto, &meta->tci))
//			meta->flags = MetaVLANValid;
//	act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
//	if (act == XDP_PASS)
//		(*bpf_map_lookup_elem(&passed, &zero))++;
//	return act;
//
// The low bits of the flags argument are the action when the map has no
// socket for the queue: such packets go on to the kernel's stack, and are
// counted, since they never reach xdpfwd.
//
// With vlanIfindex > 0 the program is bound to that device
// (BPF_F_XDP_DEV_BOUND_ONLY), which the RX metadata kfunc needs: it
// recovers a VLAN tag the driver (or, on veth, the sending stack) kept out
// of the frame, in the receive metadata, so that user space can put it back.
// The program is frags-aware where the kernel allows it, so multi-buffer
// (jumbo) packets reach sockets bound with XDP_USE_SG.
func loadRedirect(xsks, passed *ebpf.Map, stamps *LastStamps, vlanIfindex int) (*ebpf.Program, error) {
	spec, err := redirectSpec(xsks, passed, stamps, vlanIfindex)
	if err != nil {
		return nil, err
	}
	prog, err := ebpf.NewProgram(spec)
	if err != nil {
		spec.Flags &^= unix.BPF_F_XDP_HAS_FRAGS
		prog, err = ebpf.NewProgram(spec)
	}
	return prog, err
}

// storeQueueStamp stores src as the newest stamp of the packet's RX
// queue, what names it in the listing, and goes on at label next; a queue
// beyond the stamps' goes on at once. R1 and R3 are clobbered; R6 is the
// context.
func storeQueueStamp(stamps *LastStamps, src asm.Register, next, what string) asm.Instructions {
	const rxQueueIndexOff = 16 // struct xdp_md
	return asm.Instructions{
		asm.LoadMem(asm.R3, asm.R6, rxQueueIndexOff, asm.Word).
			WithSource(asm.Comment("if (ctx->rx_queue_index < nstamps) stamps[ctx->rx_queue_index] = " + what + ";")),
		asm.JGE.Imm(asm.R3, int32(stamps.n), next),
		asm.LSh.Imm(asm.R3, 3),
		asm.LoadMapValue(asm.R1, stamps.m.FD(), 0),
		asm.Add.Reg(asm.R1, asm.R3),
		asm.StoreMem(asm.R1, 0, src, asm.DWord),
	}
}

// redirectSpec assembles the program loadRedirect loads.
func redirectSpec(xsks, passed *ebpf.Map, stamps *LastStamps, vlanIfindex int) (*ebpf.ProgramSpec, error) {
	// struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index
	const dataOff, metaOff, rxQueueIndexOff = 0, 8, 16
	// Offsets into the metadata, from its start (addr-MetaLen).
	const (
		vlanProto = MetaLen - MetaVLANOff
		vlanTCI   = vlanProto + 2
		vlanFlags = vlanProto + 4
		stamp     = MetaLen - MetaStampOff
	)
	var kfunc asm.Instruction
	if vlanIfindex > 0 {
		var err error
		if kfunc, err = kfuncCall("bpf_xdp_metadata_rx_vlan_tag"); err != nil {
			return nil, err
		}
	}
	// r2 = meta, after checking MetaLen bytes of it lie before data;
	// else on to the redirect.
	loadMeta := func() asm.Instructions {
		return asm.Instructions{
			asm.LoadMem(asm.R2, asm.R6, metaOff, asm.Word),
			asm.LoadMem(asm.R3, asm.R6, dataOff, asm.Word),
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, MetaLen),
			asm.JGT.Reg(asm.R4, asm.R3, "redirect"),
		}
	}
	insns := asm.Instructions{
		// The function and line info make the program traceable like a
		// compiled one: xdpdump attaches fentry/fexit to it by its BTF
		// function, and bpftool prints the lines with the instructions.
		btf.WithFuncMetadata(asm.Mov.Reg(asm.R6, asm.R1), redirectFunc()).
			WithSource(asm.Comment("int " + ProgramName + "(struct xdp_md *ctx)")),
		// Best effort: without room, no metadata.
		asm.Mov.Imm(asm.R2, -MetaLen).
			WithSource(asm.Comment("if (bpf_xdp_adjust_meta(ctx, -MetaLen) == 0) {")),
		asm.FnXdpAdjustMeta.Call(),
		asm.JNE.Imm(asm.R0, 0, "redirect"),
	}
	if stamps != nil {
		// The queue's newest stamp is StampBusy from before the clock
		// read until the stamp is stored (LastStamps): a reader never
		// takes the queue for caught up while a packet it has not seen
		// holds an older stamp than the reader's clock.
		insns = append(insns, asm.Mov.Imm(asm.R4, StampBusy)) // 64 bits, sign-extended
		insns = append(insns, storeQueueStamp(stamps, asm.R4, "busy", "StampBusy")...)
		// The arrival time: user space orders a flow that arrives on
		// several RX queues by it, and hands it to a Handler.
		insns = append(insns,
			asm.FnKtimeGetNs.Call().WithSymbol("busy").
				WithSource(asm.Comment("meta->stamp = bpf_ktime_get_ns(); meta->vlan = 0;")),
			asm.Mov.Reg(asm.R7, asm.R0),
		)
	} else {
		insns = append(insns, asm.Mov.Imm(asm.R7, 0).
			WithSource(asm.Comment("meta->stamp = 0; meta->vlan = 0;")))
	}
	insns = append(insns, loadMeta()...)
	insns = append(insns, asm.StoreMem(asm.R2, stamp, asm.R7, asm.DWord))
	if stamps != nil {
		// Then, not before, the queue's newest stamp (LastStamps).
		insns = append(insns, storeQueueStamp(stamps, asm.R7, "stamped", "meta->stamp")...)
	}
	insns = append(insns,
		// (Two words: cilium/ebpf's asm has no 64-bit store of an immediate.)
		asm.StoreImm(asm.R2, vlanProto, 0, asm.Word).WithSymbol("stamped"),
		asm.StoreImm(asm.R2, vlanFlags, 0, asm.Word),
	)
	if vlanIfindex > 0 {
		insns = append(insns,
			asm.Mov.Reg(asm.R1, asm.R6).
				WithSource(asm.Comment("if (!bpf_xdp_metadata_rx_vlan_tag(ctx, &meta->proto, &meta->tci)) meta->flags = MetaVLANValid;")),
			asm.Mov.Reg(asm.R3, asm.R2),
			asm.Add.Imm(asm.R3, vlanTCI),
			kfunc,
			asm.JNE.Imm(asm.R0, 0, "redirect"),
		)
		insns = append(insns, loadMeta()...)
		insns = append(insns, asm.StoreImm(asm.R2, vlanFlags, MetaVLANValid, asm.Word))
	}
	insns = append(insns,
		asm.LoadMem(asm.R2, asm.R6, rxQueueIndexOff, asm.Word).WithSymbol("redirect").
			WithSource(asm.Comment("act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);")),
		asm.LoadMapPtr(asm.R1, xsks.FD()),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.JNE.Imm(asm.R0, xdpPass, "out"),
		// No socket at this index: count the packet in this CPU's slot.
		asm.StoreImm(asm.R10, -4, 0, asm.Word).
			WithSource(asm.Comment("if (act == XDP_PASS) (*bpf_map_lookup_elem(&passed, &zero))++;")),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, passed.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return().WithSymbol("out").
			WithSource(asm.Comment("return act;")),
	)
	spec := &ebpf.ProgramSpec{
		Name:         ProgramName,
		Type:         ebpf.XDP,
		License:      "Dual BSD/GPL",
		Instructions: insns,
		Flags:        unix.BPF_F_XDP_HAS_FRAGS,
	}
	if vlanIfindex > 0 {
		spec.Ifindex = uint32(vlanIfindex)
		spec.Flags |= unix.BPF_F_XDP_DEV_BOUND_ONLY
	}
	return spec, nil
}

// redirectFunc returns the program's BTF function, int xdpfwd_redir(struct
// xdp_md *ctx), as clang would describe it. Tools find the program's entry
// by this name (xdpdump looks for a function named like the program, which
// is why the two are the same), and the kernel hands a tracing program
// attached to it the context as the struct xdp_buff it is when the
// parameter points to a struct named xdp_md, as in a compiled program. The
// BTF is metadata loaded beside the instructions: the verifier and the JIT
// produce the same code with or without it, so it costs nothing per packet.
func redirectFunc() *btf.Func {
	u32 := &btf.Int{Name: "__u32", Size: 4}
	member := func(name string, i int) btf.Member {
		return btf.Member{Name: name, Type: u32, Offset: btf.Bits(32 * i)}
	}
	xdpMD := &btf.Struct{Name: "xdp_md", Size: 24, Members: []btf.Member{
		member("data", 0), member("data_end", 1), member("data_meta", 2),
		member("ingress_ifindex", 3), member("rx_queue_index", 4), member("egress_ifindex", 5),
	}}
	return &btf.Func{
		Name: ProgramName,
		Type: &btf.FuncProto{
			Return: &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed},
			Params: []btf.FuncParam{{Name: "ctx", Type: &btf.Pointer{Target: xdpMD}}},
		},
		Linkage: btf.GlobalFunc,
	}
}

// kfuncCall is a call of the kernel function name, by its BTF id in
// vmlinux. cilium/ebpf resolves kfuncs by name only for programs loaded
// from ELF, so a hand-assembled program looks the id up itself.
func kfuncCall(name string) (asm.Instruction, error) {
	id, err := kfuncIDs.lookup(name)
	if err != nil {
		return asm.Instruction{}, err
	}
	return asm.Instruction{
		OpCode:   asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call),
		Src:      asm.PseudoKfuncCall,
		Constant: int64(id),
	}, nil
}

// kfuncIDs are the vmlinux BTF ids of the kfuncs looked up so far. The
// kernel's BTF is megabytes to parse (25 ms here), once per program
// otherwise: a switch of 64 links spent 1.6 s of its start in it. The ids
// stay while the kernel runs; the parsed BTF is not kept.
var kfuncIDs = kfuncTable{ids: map[string]btf.TypeID{}}

type kfuncTable struct {
	mu  sync.Mutex
	ids map[string]btf.TypeID
}

func (t *kfuncTable) lookup(name string) (btf.TypeID, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[name]; ok {
		return id, nil
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("kfunc %s: kernel BTF: %w", name, err)
	}
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		return 0, fmt.Errorf("kfunc %s: %w", name, err)
	}
	id, err := spec.TypeID(fn)
	if err != nil {
		return 0, fmt.Errorf("kfunc %s: %w", name, err)
	}
	t.ids[name] = id
	return id, nil
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

// VLAN reports whether the program recovers VLAN tags kept out of the frame
// (see MetaVLAN), and if not, why.
func (p *Program) VLAN() (bool, error) { return p.vlan, p.vlanErr }

// LastStamps is the program's newest arrival stamp per RX queue; nil when
// it takes no stamps (AttachConfig.NoStamps).
func (p *Program) LastStamps() *LastStamps { return p.stamps }

// Mode is "native" or "generic": where the program got attached.
func (p *Program) Mode() string { return p.mode }

// NativeRefused is why the driver refused native mode when auto mode fell
// back to generic; nil otherwise.
func (p *Program) NativeRefused() error { return p.nativeErr }

// ProgramFiles are a Program's kernel objects as file descriptors, for a
// process that takes it over (AdoptProgram): its BPF link (which holds
// the program on the link), its XSKMAP, its counter of packets passed to
// the stack and its arrival stamps (-1: none).
type ProgramFiles struct {
	Link, XSKs, Passed, Stamps int
}

// Files are p's kernel objects, valid while p is open: the caller passes
// copies (SCM_RIGHTS duplicates them), p keeps its own.
func (p *Program) Files() ProgramFiles {
	f := ProgramFiles{Link: -1, XSKs: p.xsks.FD(), Passed: p.passed.FD(), Stamps: -1}
	if fl, ok := p.link.(interface{ FD() int }); ok {
		f.Link = fl.FD()
	}
	if p.stamps != nil {
		f.Stamps = p.stamps.m.FD()
	}
	return f
}

// AdoptProgram takes over the program another process attached to link
// ifname (ifindex) through a BPF link, from its files: it stays attached
// and redirecting into its XSKMAP (of queues entries) as it was, in mode
// ("native" or "generic"), recovering VLAN tags if vlan. The Program owns
// the descriptors from then on, whether AdoptProgram succeeds or not.
func AdoptProgram(ifname string, ifindex, queues int, mode string, vlan bool, f ProgramFiles) (_ *Program, err error) {
	p := &Program{ifname: ifname, ifindex: ifindex, mode: mode, vlan: vlan}
	defer func() {
		if err != nil {
			p.Close()
			err = fmt.Errorf("xdp %s: adopt: %w", ifname, err)
		}
	}()
	own := []int{f.Link, f.XSKs, f.Passed, f.Stamps}
	take := func(fd int) int { // the fd is the Program's now: not closed below
		for i, o := range own {
			if o == fd {
				own[i] = -1
			}
		}
		return fd
	}
	defer func() {
		for _, fd := range own {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	if f.Link < 0 || f.XSKs < 0 || f.Passed < 0 {
		return nil, fmt.Errorf("files %+v: want a link, an XSKMAP and a counter", f)
	}
	if p.link, err = link.NewFromFD(take(f.Link)); err != nil {
		return nil, fmt.Errorf("BPF link: %w", err)
	}
	if p.xsks, err = ebpf.NewMapFromFD(take(f.XSKs)); err != nil {
		return nil, fmt.Errorf("XSKMAP: %w", err)
	}
	if p.passed, err = ebpf.NewMapFromFD(take(f.Passed)); err != nil {
		return nil, fmt.Errorf("passed counter: %w", err)
	}
	if f.Stamps >= 0 {
		m, err := ebpf.NewMapFromFD(take(f.Stamps))
		if err != nil {
			return nil, fmt.Errorf("last-stamp map: %w", err)
		}
		if p.stamps, err = mapLastStamps(m, queues); err != nil {
			return nil, err
		}
	}
	return p, nil
}

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
	if p.stamps != nil {
		errs = append(errs, p.stamps.close())
		p.stamps = nil
	}
	return errors.Join(errs...)
}
