package xsk

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestVethRxTimestampKfunc: on veth, bpf_xdp_metadata_rx_timestamp gives
// no arrival time: for a frame its peer's stack sent (an skb) it succeeds
// with the skb's hardware stamp, 0, and for a redirected frame it fails
// (ENODATA). Why the program stamps arrivals with bpf_ktime_get_ns
// instead (Packet.Arrival, the counting sink's latency).
func TestVethRxTimestampKfunc(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := netlink.LinkByName(p.LinkA)
	if err != nil {
		t.Fatal(err)
	}
	kfunc, err := kfuncCall("bpf_xdp_metadata_rx_timestamp")
	if err != nil {
		t.Fatal(err)
	}
	// One value: the kfunc's last return, its last stamp, the runs.
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 24, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	insns := asm.Instructions{
		btf.WithFuncMetadata(asm.Mov.Reg(asm.R6, asm.R1), redirectFunc()),
		asm.StoreImm(asm.R10, -8, 0, asm.Word),
		asm.StoreImm(asm.R10, -4, 0, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -8),
		kfunc, // r0 = bpf_xdp_metadata_rx_timestamp(ctx, &ts)
		asm.Mov.Reg(asm.R7, asm.R0),
		asm.StoreImm(asm.R10, -12, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, -12),
		asm.LoadMapPtr(asm.R1, m.FD()),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.StoreMem(asm.R0, 0, asm.R7, asm.DWord),
		asm.LoadMem(asm.R1, asm.R10, -8, asm.DWord),
		asm.StoreMem(asm.R0, 8, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, 16, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 16, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("out"),
		asm.Return(),
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: ProgramName, Type: ebpf.XDP, License: "Dual BSD/GPL", Instructions: insns,
		Ifindex: uint32(l.Attrs().Index), Flags: unix.BPF_F_XDP_DEV_BOUND_ONLY,
	})
	if err != nil {
		t.Fatalf("load a device-bound program calling the kfunc: %v", err)
	}
	defer prog.Close()
	xl, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
	if err != nil {
		t.Fatalf("attach native on %s: %v", p.LinkA, err)
	}
	defer xl.Close()
	// Frames from A's stack: a datagram to B's address sends ARP
	// requests (nothing answers them here), skbs all.
	send := func() {
		p.A.Do(func() error {
			c, err := net.Dial("udp4", net.JoinHostPort(p.V4B.String(), "9"))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write([]byte("x"))
			return err
		})
	}
	var v [24]byte
	deadline := time.Now().Add(5 * time.Second)
	for {
		send()
		if err := m.Lookup(uint32(0), v[:]); err != nil {
			t.Fatal(err)
		}
		if binary.NativeEndian.Uint64(v[16:]) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	ret := int64(binary.NativeEndian.Uint64(v[0:]))
	ts := binary.NativeEndian.Uint64(v[8:])
	runs := binary.NativeEndian.Uint64(v[16:])
	t.Logf("veth %s: %d runs, last: rx_timestamp returned %d, stamp %d", p.LinkA, runs, ret, ts)
	if runs == 0 {
		t.Fatal("the program never ran: no frame from A in 5 s")
	}
	if !(ret == 0 && ts == 0 || ret == -int64(unix.ENODATA)) {
		t.Fatalf("rx_timestamp on veth returned %d with stamp %d: want 0 with 0 (an skb's hardware stamp) or -ENODATA", ret, ts)
	}
}
