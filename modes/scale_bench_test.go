package modes_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// BenchmarkSwitchScale: the switch's cost per frame as the work grows,
// in batches of 64 from the uplink (link 0) to the pods (links 1..): 2 or
// 64 links, the frames from 1, 1,024 or 16,384 source MACs behind the
// uplink, each learned (refreshed) as it comes, in a table of 32,768.
// ns/pkt is the handler's alone; the frames are written in place, as a
// worker's are.
func BenchmarkSwitchScale(b *testing.B) {
	for _, links := range []int{2, 64} {
		for _, macs := range []int{1, 1024, 16384} {
			b.Run(fmt.Sprintf("links=%d/macs=%d", links, macs), func(b *testing.B) {
				sw := modes.NewSwitch(links, 32768, 0)
				var pod, host [6]byte
				pod[0], host[0] = 0x02, 0x02
				f := make([]byte, 64)
				for l := 1; l < links; l++ { // each pod heard once
					copy(f[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
					pod[5] = byte(l)
					copy(f[6:12], pod[:])
					sw.Handle([]fwd.Packet{{Data: f, Len: 64, Link: l}})
				}
				pkts := make([]fwd.Packet, 64)
				frames := make([][]byte, 64)
				for i := range frames {
					frames[i] = make([]byte, 64)
				}
				n := 0
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					for i := range pkts {
						fr := frames[i]
						pod[5] = byte(1 + n%(links-1))
						binary.BigEndian.PutUint32(host[2:], uint32(n%macs))
						copy(fr[0:6], pod[:])
						copy(fr[6:12], host[:])
						n++
						pkts[i] = fwd.Packet{Data: fr, Len: 64, Link: 0}
					}
					sw.Handle(pkts)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pkts)), "ns/pkt")
			})
		}
	}
}
