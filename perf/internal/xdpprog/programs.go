// The XDP programs, assembled here without a C compiler: a fixed action,
// the redirect into a DEVMAP, the MAC swap that reflects, and the counter
// of reflected frames.

package xdpprog

import (
	"encoding/binary"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// XDP actions.
const (
	Aborted = 0
	Drop    = 1
	Pass    = 2
	TX      = 3
)

// LoadAction loads an XDP program that returns action for every frame.
func LoadAction(name string, action int32) (*ebpf.Program, error) {
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

// LoadRedirect assembles, without a C compiler:
//
//	return bpf_redirect_map(&devmap, key, XDP_ABORTED);
//
// A frame the map cannot take is aborted (and counted by the kernel's
// xdp:xdp_exception tracepoint), never passed to the root namespace's stack.
func LoadRedirect(devmap *ebpf.Map, key int32) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "perf_redirect",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.LoadMapPtr(asm.R1, devmap.FD()),
			asm.Mov.Imm(asm.R2, key),
			asm.Mov.Imm(asm.R3, Aborted),
			asm.FnRedirectMap.Call(),
			asm.Return(),
		},
	})
}

// LoadMACSwap assembles an XDP program that swaps a frame's destination
// and source MAC addresses and sends it back out of the link it came in
// on (XDP_TX); a frame shorter than 12 bytes is dropped.
func LoadMACSwap() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "perf_macswap",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 12),
			asm.JGT.Reg(asm.R4, asm.R3, "short"),
			asm.LoadMem(asm.R4, asm.R2, 0, asm.Word), // destination
			asm.LoadMem(asm.R5, asm.R2, 4, asm.Half),
			asm.LoadMem(asm.R6, asm.R2, 6, asm.Word), // source
			asm.LoadMem(asm.R7, asm.R2, 10, asm.Half),
			asm.StoreMem(asm.R2, 0, asm.R6, asm.Word),
			asm.StoreMem(asm.R2, 4, asm.R7, asm.Half),
			asm.StoreMem(asm.R2, 6, asm.R4, asm.Word),
			asm.StoreMem(asm.R2, 10, asm.R5, asm.Half),
			asm.Mov.Imm(asm.R0, TX),
			asm.Return(),
			asm.Mov.Imm(asm.R0, Drop).WithSymbol("short"),
			asm.Return(),
		},
	})
}

// LoadEchoCounter assembles an XDP program that counts, in slot 0 of the
// per-CPU array counts, and drops every frame addressed to dst from src —
// a frame sent from dst to src with its MACs swapped — and passes the rest.
func LoadEchoCounter(counts *ebpf.Map, dst, src net.HardwareAddr) (*ebpf.Program, error) {
	lo := func(mac net.HardwareAddr) int64 { return int64(binary.NativeEndian.Uint32(mac[0:4])) }
	hi := func(mac net.HardwareAddr) int32 { return int32(binary.NativeEndian.Uint16(mac[4:6])) }
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "perf_echo_count",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: append(asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 12),
			asm.JGT.Reg(asm.R4, asm.R3, "pass"),
			asm.LoadMem(asm.R4, asm.R2, 0, asm.Word),
			asm.LoadImm(asm.R5, lo(dst), asm.DWord),
			asm.JNE.Reg(asm.R4, asm.R5, "pass"),
			asm.LoadMem(asm.R4, asm.R2, 4, asm.Half),
			asm.JNE.Imm(asm.R4, hi(dst), "pass"),
			asm.LoadMem(asm.R4, asm.R2, 6, asm.Word),
			asm.LoadImm(asm.R5, lo(src), asm.DWord),
			asm.JNE.Reg(asm.R4, asm.R5, "pass"),
			asm.LoadMem(asm.R4, asm.R2, 10, asm.Half),
			asm.JNE.Imm(asm.R4, hi(src), "pass"),
		}, countAndDrop(counts, 0)...),
	})
}

// countAndDrop ends a program that matched a frame: counts[slot]++ (per
// CPU: no atomic needed), then XDP_DROP; the label "pass" returns
// XDP_PASS, for what it did not match.
func countAndDrop(counts *ebpf.Map, slot uint32) asm.Instructions {
	return asm.Instructions{
		asm.StoreImm(asm.RFP, -4, int64(slot), asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.LoadMapPtr(asm.R1, counts.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "drop"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, Drop).WithSymbol("drop"),
		asm.Return(),
		asm.Mov.Imm(asm.R0, Pass).WithSymbol("pass"),
		asm.Return(),
	}
}

// LoadUDPSink assembles an XDP program that counts, in slot slot of the
// per-CPU array counts, and drops every IPv4 UDP frame, and passes the
// rest (ARP, ICMP: what a host needs to be learned and reached).
func LoadUDPSink(counts *ebpf.Map, slot uint32) (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "perf_udp_sink",
		Type:    ebpf.XDP,
		License: "Dual BSD/GPL",
		Instructions: append(asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 0, asm.Word), // data
			asm.LoadMem(asm.R3, asm.R1, 4, asm.Word), // data_end
			asm.Mov.Reg(asm.R4, asm.R2),
			asm.Add.Imm(asm.R4, 24), // Ethernet header and IPv4's protocol
			asm.JGT.Reg(asm.R4, asm.R3, "pass"),
			asm.LoadMem(asm.R4, asm.R2, 12, asm.Half), // EtherType, network order
			asm.JNE.Imm(asm.R4, int32(binary.NativeEndian.Uint16([]byte{0x08, 0x00})), "pass"),
			asm.LoadMem(asm.R4, asm.R2, 23, asm.Byte), // IPv4 protocol
			asm.JNE.Imm(asm.R4, 17, "pass"),
		}, countAndDrop(counts, slot)...),
	})
}
