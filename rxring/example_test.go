package rxring_test

import (
	"fmt"
	"log"

	"github.com/xdpfwd/xdpfwd/rxring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// A sink: lend the kernel frames through the fill ring, read what it
// received, count it, and put every frame straight back on the fill
// ring. The socket here is an in-memory one whose kernel side the example
// plays itself (package xsktest), so it runs anywhere; on a real socket
// (xsk.Open) only the kernel's part goes away.
func ExampleRing() {
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 256, HugePages: umem.HugePagesOff})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	k := xsktest.New(64, 0, 0)
	frames := r.Frames.NewCache(64) // the owner's stock of free frames
	rx := rxring.New(k.Socket, frames)

	rx.Refill(1) // lend the kernel a full fill ring

	// The kernel's part: receive a 60-byte frame, a 3-piece jumbo frame
	// and a descriptor that points outside the UMEM's frames.
	lent := k.Fill.TakeAddrs(4)
	k.RX.Produce(
		xsk.Desc{Addr: lent[0] + 256, Len: 60},
		xsk.Desc{Addr: lent[1] + 256, Len: 1792, Options: xsk.PktContd},
		xsk.Desc{Addr: lent[2] + 256, Len: 1792, Options: xsk.PktContd},
		xsk.Desc{Addr: lent[3] + 256, Len: 1730},
		xsk.Desc{Addr: 1 << 40, Len: 60},
	)
	k.RX.Publish()

	chain := make([]xsk.Desc, 0, rxring.MaxDescs)
	n := rx.Peek(64, 64)
	for rx.More() {
		var total int
		var ok bool
		chain, total, ok = rx.Next(chain)
		if !ok {
			continue // dropped and counted by the ring
		}
		fmt.Println("packet of", total, "bytes in", len(chain), "frames, first frame", r.Frames.StateOf(chain[0].Addr))
		rx.RecycleChain(chain) // done with it: back to the fill ring
	}
	rx.Release()
	fmt.Println(n, "descriptors read,", rx.Invalid.Load(), "invalid,", k.Fill.Ready(), "frames on the fill ring")
	// Output:
	// packet of 60 bytes in 1 frames, first frame held
	// packet of 5314 bytes in 3 frames, first frame held
	// 5 descriptors read, 1 invalid, 128 frames on the fill ring
}
