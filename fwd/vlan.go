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
// earlier and is 4 bytes longer afterwards. The arrival stamp is copied in
// front of the new start, so stampOf still finds it.
func (w *worker) restoreVLAN(d *xsk.Desc) bool {
	unit := w.rx.frameStart(d.Addr)
	if d.Addr < unit+xsk.MetaLen {
		return false // no metadata in front of the packet
	}
	tpid, tci, ok := xsk.MetaVLAN(w.rx.mem, d.Addr)
	if !ok {
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
		log := f.cfg.Logger.With("link", l.name, "why", why)
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
