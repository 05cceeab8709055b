package fwd

import (
	"encoding/binary"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// vlanTagLen is the size of the VLAN tag restoreVLAN puts back.
const vlanTagLen = 4

// restoreVLAN puts back into the frame the VLAN tag that the sender's (or
// the NIC's) VLAN offload kept out of it and the XDP program recovered
// from the receive metadata (xsk.MetaVLAN); without it the packet would
// leave untagged. d is the packet's first descriptor: it starts 4 bytes
// earlier and is 4 bytes longer afterwards.
func (w *worker) restoreVLAN(d *xsk.Desc) bool {
	unit := w.rx.frameStart(d.Addr)
	if d.Addr < unit+xsk.MetaLen {
		return false // no metadata in front of the packet
	}
	tpid, tci, ok := xsk.MetaVLAN(w.rx.mem, d.Addr)
	if !ok {
		return false
	}
	return w.pushTag(d, tpid, tci)
}

// pushTag inserts a VLAN tag (tpid, tci) after the frame's MAC addresses,
// in the headroom: d starts 4 bytes earlier and is 4 bytes longer. The
// arrival stamp is moved in front of the new start, so stampOf still
// finds it. False, with nothing changed, when the headroom has no room
// for the tag and the metadata.
func (w *worker) pushTag(d *xsk.Desc, tpid, tci uint16) bool {
	unit := w.rx.frameStart(d.Addr)
	if d.Addr < unit+xsk.MetaLen {
		return false
	}
	stamp := xsk.MetaStamp(w.rx.mem, d.Addr)
	// The floor keeps room for the stamp in front of the new start.
	addr, n, ok := linearize.InsertVLAN(w.rx.mem, d.Addr, int(d.Len), unit+xsk.MetaStampOff, tpid, tci)
	if !ok {
		return false
	}
	binary.NativeEndian.PutUint64(w.rx.mem[addr-xsk.MetaStampOff:], uint64(stamp))
	d.Addr, d.Len = addr, uint32(n)
	return true
}

// popTag removes the frame's outer VLAN tag: d starts 4 bytes later and
// is 4 bytes shorter, its arrival stamp moved with it.
func (w *worker) popTag(d *xsk.Desc) bool {
	const macs = 12
	if d.Len < macs+vlanTagLen+2 || d.Addr < w.rx.frameStart(d.Addr)+xsk.MetaStampOff {
		return false
	}
	stamp := xsk.MetaStamp(w.rx.mem, d.Addr)
	f := w.rx.mem[d.Addr : d.Addr+macs+vlanTagLen]
	copy(f[vlanTagLen:], f[:macs])
	d.Addr, d.Len = d.Addr+vlanTagLen, d.Len-vlanTagLen
	binary.NativeEndian.PutUint64(w.rx.mem[d.Addr-xsk.MetaStampOff:], uint64(stamp))
	return true
}

// retag makes p's frame leave link o as v's SetVLAN says: with an outer
// 802.1Q tag of v.vid, or without one; a tag popped for one link of a
// flood and pushed for the next keeps its priority. A flood's copies are
// made of the frame as it is when each is sent, so each link gets its
// own. A frame it cannot retag (no headroom for the tag, a tag cut
// short) is abandoned for link o, counted (tx_no_layout): false. last
// says it is the packet's last send, which releases it.
func (w *worker) retag(p *rxPkt, v verdict, o int, last bool) bool {
	if v.vid == 0 {
		return true
	}
	d := &p.descs[0]
	if d.Len < 14 {
		return true // the handler passed a runt: nothing to tag
	}
	f := w.rx.mem[d.Addr : d.Addr+uint64(d.Len)]
	tagged := binary.BigEndian.Uint16(f[12:]) == linearize.TPID8021Q && d.Len >= 16
	ok := true
	switch want := !v.untagged.Has(o); {
	case tagged && want:
		tci := binary.BigEndian.Uint16(f[14:])
		binary.BigEndian.PutUint16(f[14:], tci&^0xfff|v.vid) // the priority kept
		return true
	case tagged:
		p.prio = binary.BigEndian.Uint16(f[14:]) &^ 0xfff
		if ok = w.popTag(d); ok {
			p.total -= vlanTagLen
		}
	case want:
		if ok = w.pushTag(d, linearize.TPID8021Q, p.prio|v.vid); ok {
			p.total += vlanTagLen
		}
	}
	if !ok {
		at := atCopy
		if last {
			at = atRX
		}
		l := w.lanes.tx[o]
		w.abandon(lost{why: dropNoRoom, at: at, rx: *p, link: o, queue: w.q, total: p.total}, &l.bc)
		w.lanes.touch(l)
	}
	return ok
}

// warnVLANLoss logs, for each link whose program cannot recover VLAN tags
// kept out of the frame (generic mode, a kernel before 6.8, a driver
// without the VLAN RX metadata hook), whether such tags would be lost, and
// what to turn off so that they stay in the frame: on a veth the tag of a
// frame from a VLAN device rides in skb metadata when its peer has TX VLAN
// offload (the default); on a NIC, RX VLAN offload strips it.
func (f *Forwarder) warnVLANLoss() {
	for i, l := range f.links {
		if f.progs[i] == nil {
			continue // a removed link's hole
		}
		ok, why := f.progs[i].VLAN()
		if ok {
			continue
		}
		log := f.plan.Logger.With("link", l.name, "why", why)
		if _, ok := f.env.(kernel); !ok {
			// What turns the offload off is the kernel's to say.
			log.Warn("VLAN tags kept out of the frame cannot be recovered and would be lost")
			continue
		}
		link, err := netlink.LinkByIndex(l.index)
		if err != nil {
			continue
		}
		if _, veth := link.(*netlink.Veth); !veth {
			if _, rx, err := ethtool.VLANOffload(l.name); err == nil && rx {
				log.Warn("VLAN tags the NIC strips (rx-vlan-offload) cannot be recovered and would be lost; turn it off: ethtool -K " + l.name + " rxvlan off")
			}
			continue
		}
		peer := link.Attrs().ParentIndex
		if link.Attrs().NetNsID < 0 {
			if p, err := netlink.LinkByIndex(peer); err == nil {
				if tx, _, err := ethtool.VLANOffload(p.Attrs().Name); err == nil && !tx {
					continue
				}
				log.Warn("VLAN tags its veth peer offloads (tx-vlan-offload) cannot be recovered and would be lost; turn it off: ethtool -K " + p.Attrs().Name + " txvlan off")
				continue
			}
		}
		log.Warn("VLAN tags its veth peer offloads (tx-vlan-offload, on by default) cannot be recovered and would be lost; in the peer's network namespace run ethtool -K <peer> txvlan off", "peer_ifindex", peer, "peer_netnsid", link.Attrs().NetNsID)
	}
}
