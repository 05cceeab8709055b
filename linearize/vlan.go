package linearize

import "encoding/binary"

// VLAN tag protocol identifiers InsertVLAN accepts.
const (
	TPID8021Q  = 0x8100 // 802.1Q
	TPID8021AD = 0x88a8 // 802.1ad (QinQ service tag)
)

// vlanTagLen is the size of one VLAN tag: TPID and TCI.
const vlanTagLen = 4

// InsertVLAN inserts a VLAN tag (tpid, tci) after the two MAC addresses of
// the n-byte Ethernet frame at mem[addr:], where the receiving hardware or
// the sender's stack kept it out of the frame. Rather than shift the whole
// frame back, it moves the 12 address bytes 4 bytes earlier into the
// headroom and writes the tag into the 4 bytes they leave, so the frame now
// starts at addr-4 and is n+4 bytes long. The headroom must reach down to
// floor: nothing below floor is written (the caller's frame start, or the
// metadata it still needs).
//
// It reports false, and changes nothing, for a TPID other than 802.1Q or
// 802.1ad, a frame shorter than two addresses, a frame outside mem, or too
// little headroom above floor.
func InsertVLAN(mem []byte, addr uint64, n int, floor uint64, tpid, tci uint16) (newAddr uint64, newLen int, ok bool) {
	const macs = 12
	switch {
	case tpid != TPID8021Q && tpid != TPID8021AD,
		n < macs,
		addr < floor || addr-floor < vlanTagLen,
		addr > uint64(len(mem)) || uint64(n) > uint64(len(mem))-addr:
		return addr, n, false
	}
	newAddr = addr - vlanTagLen
	copy(mem[newAddr:newAddr+macs], mem[addr:addr+macs])
	binary.BigEndian.PutUint16(mem[newAddr+macs:], tpid)
	binary.BigEndian.PutUint16(mem[newAddr+macs+2:], tci)
	return newAddr, n + vlanTagLen, true
}
