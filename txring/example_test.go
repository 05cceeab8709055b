package txring_test

import (
	"fmt"
	"log"
	"net"
	"time"

	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// A generator: 100,000 broadcast frames written into UMEM frames and sent
// on queue 0 of a link, in batches of 64: reserve TX slots, write the
// descriptors, submit (one kick per batch, and only when the kernel asks
// for it), and reap the completion ring to reuse the frames. Transmitting
// needs no XDP program. It needs root and a link (veth0 here), so it is
// not run as a test.
func ExampleRing() {
	ifc, err := net.InterfaceByName("veth0")
	if err != nil {
		log.Fatal(err)
	}
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 4096})
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	s, err := xsk.Open(r, xsk.Config{Ifname: ifc.Name, Ifindex: ifc.Index, Queue: 0, RingSize: 2048})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // before r.Close: the socket holds the region
	tx := txring.New(s)
	frames := r.Frames.NewCache(256)
	mem := r.Mem()

	const total, batch, size = 100_000, 64, 60
	reaped := make([]uint64, batch)
	reap := func() {
		for {
			n := tx.Reap(reaped)
			for _, addr := range reaped[:n] {
				frames.Free(addr, umem.KernelTX) // the kernel is done with it
			}
			if n < len(reaped) {
				return
			}
		}
	}
	for sent := 0; sent < total; {
		reap()
		got, idx := tx.Reserve(min(batch, uint32(total-sent)))
		k := uint32(0)
		for ; k < got; k++ {
			addr, ok := frames.Alloc(umem.Held)
			if !ok {
				break // every frame in flight: reap first
			}
			pkt := mem[addr : addr+size]
			copy(pkt[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
			copy(pkt[6:12], ifc.HardwareAddr)
			pkt[12], pkt[13] = 0x88, 0xb5 // local experimental EtherType
			r.Frames.Move(addr, umem.Held, umem.KernelTX)
			tx.Set(idx+k, addr, size, 0)
		}
		tx.Cancel(got - k)
		tx.Submit()
		sent += int(k)
		if k == 0 {
			tx.Kick(true) // the ring or the frames are full: make the kernel progress
		}
	}
	// Wait for the kernel to complete everything, then check the books.
	for deadline := time.Now().Add(time.Second); tx.InFlight() > 0 && time.Now().Before(deadline); {
		tx.Kick(true)
		reap()
		time.Sleep(100 * time.Microsecond)
	}
	frames.Flush()
	fmt.Println(total, "sent,", tx.InFlight(), "in flight,", tx.Kicks.Load(), "kicks;", r.Check())
}
