package fwd

import "encoding/binary"

// Ethernet and IP header fields truncated reads.
const (
	etherTypeIPv4     = 0x0800
	etherTypeIPv6     = 0x86dd
	etherTypeVLAN     = 0x8100
	etherTypeQinQ     = 0x88a8
	etherTypeQinQ9100 = 0x9100
	maxVLANTags       = 8
)

// truncated reports whether a received packet of total bytes, whose first
// segment is frame, carries an IPv4 or IPv6 header that claims more bytes
// than arrived: the IPv4 total length, or the IPv6 payload length plus the
// 40-byte header, counted from the IP header past the Ethernet header and
// any VLAN tags. Such a frame was cut on its way in — by a NIC whose
// receive buffer is shorter than the frame (igb in zero-copy mode with
// 2048-byte chunks: package zcbuf) — and is dropped (rx_truncated) rather
// than sent on cut. A frame padded beyond its IP length is fine. It reads
// at most the first bytes of the IP header, and only from frame: a length
// it cannot read there is not judged.
func truncated(frame []byte, total int) bool {
	if len(frame) < 14 {
		return false
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := 14
	for tags := 0; et == etherTypeVLAN || et == etherTypeQinQ || et == etherTypeQinQ9100; tags++ {
		if tags == maxVLANTags || off+4 > len(frame) {
			return false
		}
		et = binary.BigEndian.Uint16(frame[off+2:])
		off += 4
	}
	switch et {
	case etherTypeIPv4:
		if off+4 > len(frame) || frame[off]>>4 != 4 {
			return false
		}
		return off+int(binary.BigEndian.Uint16(frame[off+2:])) > total
	case etherTypeIPv6:
		if off+6 > len(frame) || frame[off]>>4 != 6 {
			return false
		}
		return off+40+int(binary.BigEndian.Uint16(frame[off+4:])) > total
	}
	return false
}
