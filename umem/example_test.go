package umem_test

import (
	"fmt"

	"github.com/xdpfwd/xdpfwd/umem"
)

// A small region on 4 KiB pages, and one frame's trip through a worker's
// cache: lent to the kernel for RX, held by the worker, sent from the frame
// it arrived in, and freed when the kernel completes it. Check proves that
// every unit is back in place; a double free is caught, never listed twice.
func Example() {
	r, err := umem.New(umem.Config{
		FrameSize:   2048,
		Frames:      8,
		InlineSlots: 16,
		FragOrder:   3, // 32 KiB blocks
		FragBlocks:  2,
		HugePages:   umem.HugePagesOff,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	fmt.Println(r.Backing(), r.Size()>>20, "MiB")
	for _, z := range r.Zones() {
		fmt.Printf("%-6s %2d units of %5d bytes at %#x\n", z.Name(), z.Len(), z.UnitSize(), z.Base())
	}

	frames := r.Frames.NewCache(4) // one per worker
	addr, ok := frames.Alloc(umem.KernelRX)
	fmt.Printf("%#x %v %v\n", addr, ok, r.Frames.StateOf(addr))

	// An RX descriptor points into the frame, past the headroom: any
	// address inside the unit names it.
	rx := addr + 256
	r.Frames.Move(rx, umem.KernelRX, umem.Held)
	r.Frames.Move(rx, umem.Held, umem.KernelTX)
	fmt.Println(r.Frames.StateOf(addr), r.InUse())

	frames.Free(rx, umem.KernelTX) // the completion ring returned it
	frames.Flush()
	fmt.Println(r.InUse(), r.Check())

	frames.Free(rx, umem.KernelTX) // again: a bug, caught
	fmt.Println(r.Frames.Violations())
	fmt.Println(r.Check())
	// Output:
	// 4KiB 2 MiB
	// inline 16 units of   256 bytes at 0x0
	// frags   2 units of 32768 bytes at 0x8000
	// frames  8 units of  2048 bytes at 0x18000
	// 0x18000 true kernel-rx
	// kernel-tx 1
	// 0 <nil>
	// 1
	// umem zone frames: 1 ownership violations, 0 units listed free twice, 0 listed free while in use, 0 free but in no list
}

// A Packer fills a frag block at increasing offsets, one reference per
// descriptor placed in it; the block returns to the pool when the last
// descriptor completes and the packer has moved on.
func ExampleZone_NewPacker() {
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 1, FragOrder: 3, FragBlocks: 2, HugePages: umem.HugePagesOff})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	p := r.Frags.NewPacker(4, 2048)
	a, _ := p.Place(3000, 2) // a 3000-byte packet, as two 2048-byte descriptors
	b, _ := p.Place(100, 1)
	fmt.Printf("%#x %#x %v\n", a, b, r.Frags.StateOf(a))

	p.Release(a)
	p.Release(a + 2048)
	p.Release(b)
	fmt.Println(r.Frags.StateOf(a)) // still the packer's current block
	p.Close()
	fmt.Println(r.Frags.StateOf(a), r.Check())
	// Output:
	// 0x0 0x1000 held
	// held
	// free <nil>
}

// The page meter of a TX path that copies small packets into a few
// recycled inline slots, next to one that sends each from its own frame.
func ExamplePageMeter() {
	var inline, frames umem.PageMeter
	for i := range 1000 {
		inline.Touch(uint64(i%64)*umem.InlineSlotSize, 64) // 64 slots in flight
		frames.Touch(2<<20+uint64(i)*2048, 64)             // 1,000 frames
	}
	p4k, p2m, _ := inline.PagesPer1K()
	fmt.Println("inline:", p4k, "4 KiB pages,", p2m, "2 MiB page")
	p4k, p2m, _ = frames.PagesPer1K()
	fmt.Println("frames:", p4k, "4 KiB pages,", p2m, "2 MiB page")
	// Output:
	// inline: 4 4 KiB pages, 1 2 MiB page
	// frames: 500 4 KiB pages, 1 2 MiB page
}
