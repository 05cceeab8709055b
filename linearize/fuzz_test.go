package linearize

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// Fuzz input layout: raw[0] % (MaxDescs+3) is the descriptor count; then one
// 13-byte record per descriptor (missing bytes read as zero):
//
//	flags   1 byte: bit 0 takes addr as is, else addr % (fuzzMem+512) (near
//	        or just past mem); bit 1 takes len as is, else len % 4097
//	addr    8 bytes, little endian
//	len     4 bytes, little endian
//
// chunk selects the chunk size (1 + chunk%4096); room is the size of the
// destination buffer.
const (
	fuzzMem    = 64 << 10
	fuzzRecord = 13
)

func fuzzDescs(raw []byte, descs []xsk.Desc) []xsk.Desc {
	descs = descs[:0]
	if len(raw) == 0 {
		return descs
	}
	count := int(raw[0]) % (MaxDescs + 3)
	raw = raw[1:]
	var rec [fuzzRecord]byte
	for range count {
		clear(rec[:])
		raw = raw[copy(rec[:], raw):]
		addr := binary.LittleEndian.Uint64(rec[1:9])
		l := binary.LittleEndian.Uint32(rec[9:13])
		if rec[0]&1 == 0 {
			addr %= fuzzMem + 512
		}
		if rec[0]&2 == 0 {
			l %= 4097
		}
		descs = append(descs, xsk.Desc{Addr: addr, Len: l})
	}
	return descs
}

// fuzzEncode is the inverse of fuzzDescs for seeds: every record raw.
func fuzzEncode(descs ...xsk.Desc) []byte {
	b := []byte{byte(len(descs))}
	for _, d := range descs {
		b = append(b, 3)
		b = binary.LittleEndian.AppendUint64(b, d.Addr)
		b = binary.LittleEndian.AppendUint32(b, d.Len)
	}
	return b
}

func FuzzGatherCut(f *testing.F) {
	f.Add(fuzzEncode(scattered9000()...), uint16(4095), uint16(9000))
	f.Add(fuzzEncode(xsk.Desc{Addr: 0, Len: 0}, xsk.Desc{Addr: fuzzMem, Len: 0}), uint16(4095), uint16(100))
	f.Add(fuzzEncode(xsk.Desc{Addr: fuzzMem - 1, Len: 2}), uint16(2047), uint16(100))
	f.Add(fuzzEncode(xsk.Desc{Addr: 10, Len: 10}, xsk.Desc{Addr: ^uint64(0) - 5, Len: 100}), uint16(4095), uint16(1000))
	f.Add([]byte{}, uint16(0), uint16(0))

	backing := make([]byte, fuzzMem+4096)
	copy(backing, testMem(fuzzMem))
	for i := fuzzMem; i < len(backing); i++ {
		backing[i] = guardByte
	}
	mem := backing[:fuzzMem]
	dstBuf := make([]byte, 1<<16)
	region := make([]byte, 4096+(MaxDescs+3)*4097)
	back := make([]byte, len(region))
	var descs []xsk.Desc

	f.Fuzz(func(t *testing.T, raw []byte, chunkSel, room uint16) {
		descs = fuzzDescs(raw, descs)
		chunk := 1 + int(chunkSel)%4096
		dst := dstBuf[:room]
		clear(dst)

		var total uint64
		allIn := true
		for _, d := range descs {
			total += uint64(d.Len)
			if end := d.Addr + uint64(d.Len); end < d.Addr || end > fuzzMem {
				allIn = false
			}
		}
		g := Gather(dst, mem, descs)
		if g < 0 || g > len(dst) || uint64(g) > total {
			t.Fatalf("Gather = %d with room %d and total %d", g, len(dst), total)
		}
		ref := refGather(mem, descs, len(dst))
		if g != len(ref) || !bytes.Equal(dst[:g], ref) {
			t.Fatalf("Gather = %d bytes, reference %d, or bytes differ", g, len(ref))
		}
		if allIn && uint64(g) != min(total, uint64(len(dst))) {
			t.Fatalf("all in bounds: Gather = %d, want min(total %d, room %d)", g, total, len(dst))
		}
		if bytes.IndexByte(dst[:g], guardByte) >= 0 {
			t.Fatal("gathered bytes from past the end of mem")
		}

		// Cut the gathered bytes, as Repack does, and gather them back.
		var out [MaxDescs]xsk.Desc
		for i := range out {
			out[i].Addr = 0xdead
		}
		addr := uint64(room) % 4096
		copy(region[addr:], dst[:g])
		n := Cut(out[:], addr, g, chunk)
		if Count(g, chunk) > MaxDescs {
			if n != 0 {
				t.Fatalf("Cut of %d bytes by %d into %d = %d, want 0", g, chunk, MaxDescs, n)
			}
			for i, d := range out {
				if d.Addr != 0xdead {
					t.Fatalf("Cut returned 0 but wrote out[%d]", i)
				}
			}
			return
		}
		checkCut(t, out[:n], addr, g, chunk)
		if got := Gather(back, region, out[:n]); got != g || !bytes.Equal(back[:g], dst[:g]) {
			t.Fatalf("round trip through %d cut descriptors: %d of %d bytes, or bytes differ", n, got, g)
		}
	})
}
