package gen

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"

	"github.com/xdpfwd/xdpfwd/csum"
)

var testTemplate = Template{
	SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
	SrcIP: netip.MustParseAddr("198.18.0.1"), DstIP: netip.MustParseAddr("198.18.0.2"),
	SrcPort: 1024, DstPort: 9,
}

// checksumsOK recomputes the frame's IPv4 header and UDP checksums from
// scratch.
func checksumsOK(t *testing.T, f []byte) {
	t.Helper()
	off := 14
	if binary.BigEndian.Uint16(f[12:]) == 0x8100 {
		off += 4
	}
	ip := f[off:]
	if got := fold(sum(ip[:20], 0)); got != 0xffff {
		t.Fatalf("IPv4 header checksum: sum %#04x, want 0xffff", got)
	}
	l3 := int(binary.BigEndian.Uint16(ip[2:]))
	if off+l3 != len(f) {
		t.Fatalf("IPv4 total length %d: frame has %d bytes after L2", l3, len(f)-off)
	}
	udp := ip[20:l3]
	if binary.BigEndian.Uint16(udp[6:]) == 0 {
		t.Fatal("UDP checksum 0 (none)")
	}
	if got := fold(sum(udp, sum(ip[12:20], 17+uint64(len(udp))))); got != 0xffff {
		t.Fatalf("UDP checksum: sum %#04x, want 0xffff", got)
	}
}

// TestFrameAndStamp: every size, tagged or not, flow by port or by
// address: the frame has the size asked for, valid checksums after any
// number of Stamps and source port rewrites, and Parse reads back what
// Stamp wrote.
func TestFrameAndStamp(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name string
		vlan int
		byIP bool
		size int
	}{
		{"64", 0, false, 64},
		{"65-odd", 0, false, 65},
		{"vlan-68", 100, false, 68},
		{"byip-512", 0, true, 512},
		{"1518", 0, false, 1518},
		{"vlan-1522", 4094, true, 1522},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := testTemplate
			tp.VLAN, tp.ByIP, tp.Run = tc.vlan, tc.byIP, 0xdeadbeef
			buf := make([]byte, 2048)
			const flow = 77
			n, lay := tp.Frame(buf, tc.size, flow)
			if n != tc.size-FCS {
				t.Fatalf("frame length %d, want %d (size %d less the FCS)", n, tc.size-FCS, tc.size)
			}
			f := buf[:n]
			checksumsOK(t, f)
			if tc.vlan > 0 && binary.BigEndian.Uint16(f[14:])&0xfff != uint16(tc.vlan) {
				t.Fatalf("VLAN %d, want %d", binary.BigEndian.Uint16(f[14:])&0xfff, tc.vlan)
			}
			ipOff := 14 + map[bool]int{true: 4}[tc.vlan > 0]
			sport := binary.BigEndian.Uint16(f[ipOff+20:])
			src := netip.AddrFrom4([4]byte(f[ipOff+12 : ipOff+16]))
			if tc.byIP {
				if sport != 1024 || src != netip.MustParseAddr("198.18.0.78") {
					t.Fatalf("flow by address: source %v port %d, want 198.18.0.78 port 1024", src, sport)
				}
			} else if sport != 1024+flow || src != tp.SrcIP {
				t.Fatalf("flow by port: source %v port %d, want %v port %d", src, sport, tp.SrcIP, 1024+flow)
			}
			for range 1000 {
				seq, stamp := rng.Uint32(), int64(rng.Uint64()>>1)
				if rng.IntN(10) == 0 {
					seq, stamp = ^uint32(0), 0 // extremes
				}
				Stamp(f, lay, seq, stamp)
				checksumsOK(t, f)
				if rng.IntN(2) == 0 {
					port := uint16(rng.Uint32())
					SetSrcPort(f, lay, port)
					checksumsOK(t, f)
					if got := SrcPort(f, lay); got != port || binary.BigEndian.Uint16(f[ipOff+20:]) != port {
						t.Fatalf("SetSrcPort(%d): SrcPort %d, header %d", port, got, binary.BigEndian.Uint16(f[ipOff+20:]))
					}
				}
				p, ok := Parse(f)
				at := stamp + rng.Int64N(1<<40) // the arrival, up to 18 minutes later
				if !ok || p.Flow != flow || p.Seq != seq || p.Run != 0xdeadbeef || p.TXTime(at) != stamp {
					t.Fatalf("Parse = %+v (TX time %d), %v; want flow %d seq %d run 0xdeadbeef stamp %d", p, p.TXTime(at), ok, flow, seq, stamp)
				}
			}
		})
	}
}

// TestParseRejects: frames that are not the generator's are not parsed.
func TestParseRejects(t *testing.T) {
	buf := make([]byte, 2048)
	n, _ := testTemplate.Frame(buf, 64, 1)
	good := buf[:n]
	mutate := func(f func(b []byte) []byte) []byte {
		b := append([]byte(nil), good...)
		return f(b)
	}
	for _, tc := range []struct {
		name string
		f    []byte
	}{
		{"short", good[:40]},
		{"magic", mutate(func(b []byte) []byte { b[42] ^= 1; return b })},
		{"ipv6-ethertype", mutate(func(b []byte) []byte { b[12], b[13] = 0x86, 0xdd; return b })},
		{"tcp", mutate(func(b []byte) []byte { b[14+9] = 6; return b })},
		{"udp-length", mutate(func(b []byte) []byte { binary.BigEndian.PutUint16(b[38:], 8); return b })},
	} {
		if _, ok := Parse(tc.f); ok {
			t.Errorf("%s: parsed", tc.name)
		}
	}
	if _, ok := Parse(good); !ok {
		t.Fatal("the unmutated frame does not parse")
	}
}

// TestStampAllocs: a Stamp and a Parse allocate nothing.
func TestStampAllocs(t *testing.T) {
	buf := make([]byte, 2048)
	n, lay := testTemplate.Frame(buf, 64, 1)
	f := buf[:n]
	var seq uint32
	if a := testing.AllocsPerRun(1000, func() {
		seq++
		Stamp(f, lay, seq, int64(seq))
		Parse(f)
	}); a != 0 {
		t.Fatalf("%v allocations per Stamp+Parse", a)
	}
}

// TestMinSize: the payload fits the smallest size, tag or not.
func TestMinSize(t *testing.T) {
	if MinSize(false) != 64 || MinSize(true) != 68 {
		t.Fatalf("MinSize = %d untagged, %d tagged; want 64 and 68", MinSize(false), MinSize(true))
	}
}

func BenchmarkStamp(b *testing.B) {
	buf := make([]byte, 2048)
	n, lay := testTemplate.Frame(buf, 64, 1)
	for i := range b.N {
		Stamp(buf[:n], lay, uint32(i), int64(i))
	}
}

// TestParseV1: a version 1 payload (magic "XG", the stamp whole, no run
// id), as earlier generators sent, still parses, with run id 0.
func TestParseV1(t *testing.T) {
	buf := make([]byte, 2048)
	n, lay := testTemplate.Frame(buf, 64, 9)
	f := buf[:n]
	p := f[lay.Payload:]
	binary.BigEndian.PutUint16(p[0:], MagicV1)
	binary.BigEndian.PutUint32(p[4:], 12345)
	binary.BigEndian.PutUint64(p[8:], 1<<60+7)
	got, ok := Parse(f)
	if !ok || got.Flow != 9 || got.Seq != 12345 || got.Run != 0 || got.TXTime(5) != 1<<60+7 {
		t.Fatalf("Parse = %+v, %v; want flow 9 seq 12345 run 0 stamp %d", got, ok, int64(1<<60+7))
	}
}

// TestTXTimeUnwrap: the 48-bit stamp is restored from any reference within
// 2^47 ns, on either side of a 2^48 boundary.
func TestTXTimeUnwrap(t *testing.T) {
	const span = int64(1) << 48
	for _, tc := range []struct{ tx, ref int64 }{
		{1000, 5000}, {span - 10, span + 10}, {span + 10, span - 10}, {5 * span, 5*span + span/2 - 1}, {3*span + 1, 3*span - span/2 + 2},
	} {
		p := Payload{Stamp: tc.tx & (span - 1)}
		if got := p.TXTime(tc.ref); got != tc.tx {
			t.Errorf("stamp %#x with reference %#x: TX time %#x, want %#x", p.Stamp, tc.ref, got, tc.tx)
		}
	}
}

// TestParseChecked: a frame as Frame and Stamp write it is Valid at any
// size, odd ones included, tagged or not, and with a zero checksum (none
// sent); a flipped bit in the payload or the pseudo-header's addresses, or
// a frame cut short of its UDP length, is BadChecksum; a frame without the
// payload is NotOurs.
func TestParseChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		vlan int
	}{{"64", 64, 0}, {"65-odd", 65, 0}, {"vlan-68", 68, 7}, {"1518", 1518, 0}, {"1001-odd-vlan", 1001, 9}} {
		t.Run(tc.name, func(t *testing.T) {
			tpl := testTemplate
			tpl.VLAN = tc.vlan
			buf := make([]byte, 2048)
			n, lay := tpl.Frame(buf, tc.size, 3)
			Stamp(buf[:n], lay, 0xdeadbeef, 0x123456789abc)
			good := buf[:n]
			mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
			for _, c := range []struct {
				name string
				f    []byte
				want Check
			}{
				{"good", good, Valid},
				{"padded", append(append([]byte(nil), good...), 0, 0, 0, 0), Valid},
				{"zero-checksum", mutate(func(b []byte) []byte { b[lay.UDPSum], b[lay.UDPSum+1] = 0, 0; b[lay.Payload+5] ^= 1; return b }), Valid},
				{"payload-bit", mutate(func(b []byte) []byte { b[lay.Payload+5] ^= 1; return b }), BadChecksum},
				{"last-byte", mutate(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }), BadChecksum},
				{"src-addr", mutate(func(b []byte) []byte { b[lay.UDPSum-6-20+12] ^= 4; return b }), BadChecksum},
				// Cut short of the UDP length: bad; of the payload: not ours.
				{"truncated", good[:n-1], map[bool]Check{true: BadChecksum, false: NotOurs}[n-1 >= lay.Payload+PayloadLen]},
				{"not-ours", mutate(func(b []byte) []byte { b[lay.Payload] ^= 1; return b }), NotOurs},
			} {
				if _, got := ParseChecked(c.f); got != c.want {
					t.Errorf("%s: %v, want %v", c.name, got, c.want)
				}
			}
			if a := testing.AllocsPerRun(100, func() { ParseChecked(good) }); a != 0 {
				t.Fatalf("%v allocations", a)
			}
		})
	}
}

// BenchmarkParse: Parse against ParseChecked (the UDP checksum verified)
// on 64 and 1518-byte frames: the checksum's cost per frame.
func BenchmarkParse(b *testing.B) {
	for _, size := range []int{64, 1518} {
		buf := make([]byte, 2048)
		n, lay := testTemplate.Frame(buf, size, 3)
		Stamp(buf[:n], lay, 7, 1234)
		f := buf[:n]
		b.Run(fmt.Sprintf("%d/parse", size), func(b *testing.B) {
			for b.Loop() {
				if _, ok := Parse(f); !ok {
					b.Fatal("not parsed")
				}
			}
		})
		b.Run(fmt.Sprintf("%d/checked", size), func(b *testing.B) {
			for b.Loop() {
				if _, c := ParseChecked(f); c != Valid {
					b.Fatal(c)
				}
			}
		})
	}
}

// TestSumAgrees: csum.Sum, which the sink's check uses, folds to what the
// plain sum the generator writes checksums with does, any length, any
// start, all-ones bytes (the carries) included.
func TestSumAgrees(t *testing.T) {
	buf := make([]byte, 3000)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	ones := bytes.Repeat([]byte{0xff}, 3000)
	for _, b := range [][]byte{buf, ones} {
		for n := 0; n < 1600; n += 1 + n/16 {
			for _, off := range []int{0, 2, 6} {
				for _, init := range []uint64{0, 17 + 1480, 1<<32 - 1} {
					if got, want := csum.Fold(csum.Sum(b[off:off+n], init)), fold(sum(b[off:off+n], init)); got != want {
						t.Fatalf("n %d off %d init %d: csum.Sum folds to %#x, sum to %#x", n, off, init, got, want)
					}
				}
			}
		}
	}
}
