package csum

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// BenchmarkCompleteTCP1500: a 1514-byte IPv4 TCP frame (1500-byte IP
// packet) that is partial on every iteration: detection, a full sum over
// 1480 bytes, the write.
func BenchmarkCompleteTCP1500(b *testing.B) {
	p := build(spec{proto: 6, payload: payload(1460, 1)})
	f := p.partialFrame()
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		binary.BigEndian.PutUint16(f[p.field:], p.partial)
		if Complete(f) != Completed {
			b.Fatal("not completed")
		}
	}
}

// BenchmarkDetectComplete1500: the same frame already complete: the
// header-only cost every non-partial packet pays.
func BenchmarkDetectComplete1500(b *testing.B) {
	p := build(spec{proto: 6, payload: payload(1460, 1)})
	f := p.frame
	b.ReportAllocs()
	b.SetBytes(int64(len(f)))
	for b.Loop() {
		if Complete(f) != AlreadyComplete {
			b.Fatal("not already complete")
		}
	}
}

var sink uint64

func BenchmarkSum(b *testing.B) {
	buf := payload(9000+1, 3)
	for _, n := range []int{64, 1500, 9000} {
		for _, align := range []int{0, 1} {
			name := fmt.Sprint(n)
			if align != 0 {
				name += "-unaligned"
			}
			b.Run(name, func(b *testing.B) {
				d := buf[align : align+n]
				b.ReportAllocs()
				b.SetBytes(int64(n))
				for b.Loop() {
					sink += sum(d, 0)
				}
			})
		}
	}
}

// BenchmarkCompleteChain: a partial 9014-byte IPv4 TCP frame (MTU 9000)
// in the pieces AF_XDP delivers it as: one (Complete, the baseline), six
// of 1792 bytes (2048-byte frames), three of 3840 (4096-byte frames); in
// odd 1801-byte pieces, whose every other piece is summed byte-swapped;
// and with a 100-byte first piece, whose headers are gathered first.
func BenchmarkCompleteChain(b *testing.B) {
	p := build(spec{proto: 6, payload: payload(8948, 1)})
	partial := p.partialFrame()
	for _, c := range []struct {
		name string
		lens []int
	}{
		{"1x9014", nil},
		{"6x1792", []int{1792, 1792, 1792, 1792, 1792}},
		{"3x3840", []int{3840, 3840}},
		{"5x1801-odd", []int{1801, 1801, 1801, 1801}},
		{"gathered", []int{100, 1792, 1792, 1792, 1792}},
	} {
		b.Run(c.name, func(b *testing.B) {
			segs := split(partial, c.lens...)
			hdr := segs[0] // the field is in the first 100 bytes
			b.ReportAllocs()
			b.SetBytes(int64(len(partial)))
			for b.Loop() {
				hdr[p.field], hdr[p.field+1] = byte(p.partial>>8), byte(p.partial)
				if CompleteChain(segs) != Completed {
					b.Fatal("not completed")
				}
			}
		})
	}
}

// BenchmarkDetectCompleteChain: the same frame, already complete, in six
// pieces: the header-only cost.
func BenchmarkDetectCompleteChain(b *testing.B) {
	p := build(spec{proto: 6, payload: payload(8948, 1)})
	segs := split(p.frame, 1792, 1792, 1792, 1792, 1792)
	b.ReportAllocs()
	for b.Loop() {
		if CompleteChain(segs) != AlreadyComplete {
			b.Fatal("not already complete")
		}
	}
}
