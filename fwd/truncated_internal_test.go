package fwd

import (
	"encoding/binary"
	"testing"
)

// frameOf builds an Ethernet frame: the given VLAN tags (TPIDs), then an
// IPv4 or IPv6 header claiming l3 bytes (IPv4 total length; IPv6 40 +
// payload length), then body bytes of anything.
func frameOf(v6 bool, tags []uint16, l3, body int) []byte {
	f := make([]byte, 12, 14+4*len(tags)+40+body)
	for _, tpid := range tags {
		f = binary.BigEndian.AppendUint16(f, tpid)
		f = binary.BigEndian.AppendUint16(f, 7) // VLAN 7
	}
	if v6 {
		f = binary.BigEndian.AppendUint16(f, etherTypeIPv6)
		h := make([]byte, 40)
		h[0] = 0x60
		binary.BigEndian.PutUint16(h[4:], uint16(l3-40))
		h[6] = 17
		f = append(f, h...)
	} else {
		f = binary.BigEndian.AppendUint16(f, etherTypeIPv4)
		h := make([]byte, 20)
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(l3))
		h[9] = 17
		f = append(f, h...)
	}
	return append(f, make([]byte, body)...)
}

// TestTruncated: a frame whose IP length claims more than arrived is
// truncated; exact and padded frames, non-IP frames and lengths that
// cannot be read are not.
func TestTruncated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
		total int // 0: len(frame)
		want  bool
	}{
		{"v4 exact", frameOf(false, nil, 1500, 1480), 0, false},
		{"v4 cut at 1024 (igb, 2048-byte frames)", frameOf(false, nil, 1500, 1480)[:1024], 0, true},
		{"v4 one byte short", frameOf(false, nil, 1500, 1480)[:1513], 0, true},
		{"v4 padded: 46-byte IP in a 60-byte frame", frameOf(false, nil, 28, 8+14), 0, false},
		{"v6 exact", frameOf(true, nil, 1500, 1460), 0, false},
		{"v6 cut", frameOf(true, nil, 1500, 1460)[:1024], 0, true},
		{"v6 padded", frameOf(true, nil, 48, 8+12), 0, false},
		{"v6 payload 0 (jumbogram)", frameOf(true, nil, 40, 100), 0, false},
		{"vlan v4 exact", frameOf(false, []uint16{etherTypeVLAN}, 1500, 1480), 0, false},
		{"vlan v4 cut", frameOf(false, []uint16{etherTypeVLAN}, 1500, 1480)[:1024], 0, true},
		{"qinq v6 cut", frameOf(true, []uint16{etherTypeQinQ, etherTypeVLAN}, 1500, 1460)[:1100], 0, true},
		{"9100 tag v4 cut", frameOf(false, []uint16{etherTypeQinQ9100}, 1500, 1480)[:600], 0, true},
		{"too many tags: not judged", frameOf(false, make9(), 1500, 0), 0, false},
		{"multi-buffer: first segment of a whole packet", frameOf(false, nil, 9000, 2000), 9014, false},
		{"multi-buffer: packet shorter than its IP length", frameOf(false, nil, 9000, 2000), 9013, true},
		{"short frame: no IP length to read", frameOf(false, nil, 1500, 0)[:16], 0, false},
		{"runt", []byte{1, 2, 3}, 0, false},
		{"IPv4 ethertype, wrong version", func() []byte { f := frameOf(false, nil, 1500, 0); f[14] = 0x65; return f }(), 0, false},
		{"ARP", func() []byte { f := frameOf(false, nil, 1500, 0); f[12], f[13] = 0x08, 0x06; return f }(), 0, false},
	} {
		total := tc.total
		if total == 0 {
			total = len(tc.frame)
		}
		if got := truncated(tc.frame, total); got != tc.want {
			t.Errorf("%s: truncated(%d-byte frame, total %d) = %v, want %v", tc.name, len(tc.frame), total, got, tc.want)
		}
	}
}

// make9 is one tag more than truncated skips.
func make9() []uint16 {
	tags := make([]uint16, maxVLANTags+1)
	for i := range tags {
		tags[i] = etherTypeVLAN
	}
	return tags
}

// TestTruncatedAllocs: the check allocates nothing.
func TestTruncatedAllocs(t *testing.T) {
	f := frameOf(false, []uint16{etherTypeVLAN}, 1500, 1480)[:1024]
	if n := testing.AllocsPerRun(1000, func() { truncated(f, len(f)) }); n != 0 {
		t.Fatalf("truncated allocates %v times per call", n)
	}
}

// BenchmarkTruncated is the check's cost per packet, on the header bytes
// alone (in cache): what collect adds to every packet.
func BenchmarkTruncated(b *testing.B) {
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"ipv4", frameOf(false, nil, 1500, 1480)},
		{"vlan-ipv6", frameOf(true, []uint16{etherTypeVLAN}, 1500, 1460)},
		{"non-ip", func() []byte { f := frameOf(false, nil, 1500, 0); f[12], f[13] = 0x88, 0xb5; return f }()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				if truncated(tc.frame, len(tc.frame)) {
					n++
				}
			}
			if n != 0 {
				b.Fatal("whole frame judged truncated")
			}
		})
	}
}
