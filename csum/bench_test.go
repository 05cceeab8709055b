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
