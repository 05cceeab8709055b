package topo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// OffloadedVLANFrames is VLANFrames with the tag offloaded by the sender:
// the frames leave src's packet socket untagged, and a TC egress program on
// src's eth0 tags them with bpf_skb_vlan_push, which on a device with TX
// VLAN offload (veth's default) keeps the tag in skb metadata, as a VLAN
// device would, not in the frame. The frames must arrive at dst tagged, with
// VLAN id vid, byte for byte as if the tag had been in the frame data all
// along. The TC program is removed before it returns.
func OffloadedVLANFrames(src, dst *NS, vid uint16, count int, timeout time.Duration) (int, error) {
	r, err := offloadedVLANFrames(src, dst, vid, count, timeout)
	return r.Matched, err
}

func offloadedVLANFrames(src, dst *NS, vid uint16, count int, timeout time.Duration) (_ vlanResult, err error) {
	name := fmt.Sprintf("offloaded vlan frames %s -> %s (VLAN %d)", src.Name, dst.Name, vid)
	if vid < 1 || vid > 4094 {
		return vlanResult{}, fmt.Errorf("%s: VLAN id out of range 1..4094", name)
	}
	remove, err := pushVLAN(src, vid)
	if err != nil {
		return vlanResult{}, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if rerr := remove(); rerr != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", name, rerr))
		}
	}()
	return runVLANFrames(name, src, dst, vid, count, timeout, true)
}

// pushVLAN attaches to the egress of eth0 in ns, through a TCX BPF link,
// a program that tags every frame of EtherType localEtherType with 802.1Q
// VLAN id vid:
//
//	if (load_half(skb, 12) == localEtherType)
//		bpf_skb_vlan_push(skb, htons(ETH_P_8021Q), vid);
//	return TCX_PASS;
//
// The returned function detaches and unloads it. A BPF link, unlike a tc
// filter, also goes when this process dies or the device is deleted.
func pushVLAN(ns *NS, vid uint16) (remove func() error, err error) {
	var tpid [2]byte
	binary.BigEndian.PutUint16(tpid[:], unix.ETH_P_8021Q)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "xdpfwd_vlanpush",
		Type:    ebpf.SchedCLS,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Reg(asm.R6, asm.R1), // LD_ABS reads the skb in r6
			asm.LoadAbs(12, asm.Half),   // the EtherType, host order
			asm.JNE.Imm(asm.R0, localEtherType, "out"),
			asm.Mov.Reg(asm.R1, asm.R6),
			asm.Mov.Imm(asm.R2, int32(binary.NativeEndian.Uint16(tpid[:]))),
			asm.Mov.Imm(asm.R3, int32(vid)),
			asm.FnSkbVlanPush.Call(),
			asm.Mov.Imm(asm.R0, 0).WithSymbol("out"), // TCX_PASS
			asm.Return(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("load VLAN push program: %w", err)
	}
	var l link.Link
	err = ns.Do(func() error {
		// The ifindex is resolved in the calling thread's namespace.
		ifi, err := net.InterfaceByName(peerName)
		if err != nil {
			return err
		}
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: prog, Attach: ebpf.AttachTCXEgress})
		return err
	})
	if err != nil {
		prog.Close()
		return nil, fmt.Errorf("attach VLAN push program to %s egress in %s: %w", peerName, ns.Name, err)
	}
	return func() error {
		return errors.Join(l.Close(), prog.Close())
	}, nil
}
