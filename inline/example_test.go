package inline_test

import (
	"bytes"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// A worker's copies, over a region of its own: a small packet copied whole
// into an inline slot (its receive frame can go straight back to the fill
// ring), and a multi-buffer packet that arrived as five frames repacked
// into two adjacent chunks of a frag block. Releasing the TX addresses, as
// a worker does when the completion ring returns them, puts every unit back.
func ExampleBuilder() {
	r, err := umem.New(umem.Config{
		FrameSize: 2048, Frames: 16, InlineSlots: 64,
		FragOrder: 3, FragBlocks: 4, HugePages: umem.HugePagesOff,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	mem := r.Mem()
	policy := linearize.Policy{InlineMax: 256, MaxTxFrags: 4}
	b := inline.NewBuilder(r, policy, 64, 64) // 64-byte packing: copy mode

	// A 60-byte frame, as received.
	ack := bytes.Repeat([]byte{0xa5}, 60)
	fmt.Println(b.Policy.Decide(len(ack), 1))
	slot, ok := b.Inline(ack)
	fmt.Printf("slot %#x %v %v\n", slot, ok, r.Inline.StateOf(slot))

	// A 4000-byte packet that arrived as five frames of 800 bytes.
	frames := r.Frames.NewCache(16)
	var chain []xsk.Desc
	for i := range 5 {
		a, _ := frames.Alloc(umem.Held)
		copy(mem[a:a+800], bytes.Repeat([]byte{byte(i)}, 800))
		chain = append(chain, xsk.Desc{Addr: a, Len: 800, Options: xsk.PktContd})
	}
	chain[4].Options = 0
	fmt.Println(b.Policy.Decide(linearize.Total(chain), len(chain)))
	out := make([]xsk.Desc, linearize.MaxDescs)
	n := b.Repack(chain, out)
	for _, d := range out[:n] {
		fmt.Printf("desc %#x len %d contd %v\n", d.Addr, d.Len, d.Options&xsk.PktContd != 0)
	}
	fmt.Println(mem[out[0].Addr+799], mem[out[0].Addr+800], mem[out[1].Addr+1951])
	for _, d := range chain { // copied: the frames are free again
		frames.Free(d.Addr, umem.Held)
	}

	// The kernel completes the three TX descriptors.
	b.Release(slot)
	for _, d := range out[:n] {
		b.Release(d.Addr)
	}
	b.Close()
	frames.Flush()
	fmt.Println(r.InUse(), r.Check())
	// Output:
	// inline
	// slot 0x0 true kernel-tx
	// frag
	// desc 0x8000 len 2048 contd true
	// desc 0x8800 len 1952 contd false
	// 0 1 4
	// 0 <nil>
}

// A Sender transmits packets the program builds itself on one (link,
// queue), through a region and a socket of its own. It needs root and a
// link (veth0 here), so it is not run as a test.
func ExampleSender() {
	ifc, err := net.InterfaceByName("veth0")
	if err != nil {
		log.Fatal(err)
	}
	s, err := inline.NewSender(inline.SenderConfig{Ifname: ifc.Name, Ifindex: ifc.Index, Queue: 0})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	frame := make([]byte, 64) // Ethernet header and payload, built by the program
	copy(frame[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(frame[6:12], ifc.HardwareAddr)
	frame[12], frame[13] = 0x88, 0xb5 // local experimental EtherType
	for sent := 0; sent < 1000; {
		ok, err := s.Send(frame)
		if err != nil {
			log.Fatal(err)
		}
		if ok {
			sent++
		} // else the ring is full: Send reaped; try again
	}
	if err := s.Wait(time.Second); err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Sent, "packets,", s.Descs, "descriptors,", s.Paths[linearize.Inline], "inline")
}
