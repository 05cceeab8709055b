package linearize_test

import (
	"fmt"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// The layouts xdpfwd's defaults choose: --inline-max 256, --max-tx-frags 4,
// 2048-byte frames, a frag zone.
func ExamplePolicy_Decide() {
	p := linearize.Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: 2048, FragBlocks: true}
	for _, c := range []struct{ total, descs int }{
		{66, 1},    // a TCP ACK
		{1514, 1},  // a full-MTU frame
		{9014, 5},  // a jumbo frame in five full frames: nothing to save
		{9014, 12}, // the same frame, scattered over twelve
		{200, 2},   // a small packet that arrived in two pieces
	} {
		fmt.Printf("%5d bytes in %2d descriptors: %v\n", c.total, c.descs, p.Decide(c.total, c.descs))
	}
	// Output:
	//    66 bytes in  1 descriptors: inline
	//  1514 bytes in  1 descriptors: frame
	//  9014 bytes in  5 descriptors: chain
	//  9014 bytes in 12 descriptors: frag
	//   200 bytes in  2 descriptors: inline
}

// Cut describes a packet copied to one place as the fewest descriptors of
// at most a chunk each, chained with PktContd.
func ExampleCut() {
	out := make([]xsk.Desc, linearize.MaxDescs)
	n := linearize.Cut(out, 0x10000, 5000, 2048)
	for _, d := range out[:n] {
		fmt.Printf("%#x %4d %d\n", d.Addr, d.Len, d.Options)
	}
	// Output:
	// 0x10000 2048 1
	// 0x10800 2048 1
	// 0x11000  904 0
}
