package topo

import (
	"encoding/binary"
	"net"
	"net/netip"
)

// UDPFrame builds an Ethernet/IPv4/UDP frame of frameLen bytes (at least
// 42) from src to dst, with a correct IPv4 header checksum and UDP checksum
// 0 (none), for senders that build their own packets (AF_XDP generators).
// The payload, from byte 42 on, is zero.
func UDPFrame(dst, src net.HardwareAddr, from, to netip.Addr, sport, dport uint16, frameLen int) []byte {
	b := make([]byte, max(frameLen, 42))
	copy(b[0:6], dst)
	copy(b[6:12], src)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(len(b)-14))
	ip[8] = 64
	ip[9] = 17
	f4, t4 := from.As4(), to.As4()
	copy(ip[12:16], f4[:])
	copy(ip[16:20], t4[:])
	binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], sport)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(b)-34))
	return b
}
