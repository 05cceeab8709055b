package xsk_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// A reflector: every frame received on queue 0 of a link goes back out of
// it, MAC addresses swapped, from the very frame it arrived in. It shows
// the whole protocol: the region, the socket, the XDP program, the fill
// ring lent frames, the RX ring peeked and released, the TX ring and the
// completion ring through txring, and every frame's state kept in the
// region's bookkeeping, so that Check can prove at the end that none was
// lost. It needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF, CAP_IPC_LOCK)
// and a link with one queue (veth0 here), so it is not run as a test.
func Example() {
	ifc, err := net.InterfaceByName("veth0")
	if err != nil {
		log.Fatal(err)
	}
	const ringSize = 1024
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 4 * ringSize})
	if err != nil {
		log.Fatal(err)
	}
	s, err := xsk.Open(r, xsk.Config{Ifname: ifc.Name, Ifindex: ifc.Index, Queue: 0, RingSize: ringSize})
	if err != nil {
		log.Fatal(err)
	}
	prog, err := xsk.Attach(ifc.Name, ifc.Index, xsk.AttachConfig{})
	if err != nil {
		log.Fatal(err)
	}
	frames := r.Frames.NewCache(512) // this goroutine's stock of free frames
	tx := txring.New(s)

	// refill lends free frames to the kernel through the fill ring.
	refill := func() {
		n, idx := s.Fill.Reserve(s.Fill.Free(s.Fill.Size()))
		k := uint32(0)
		for ; k < n; k++ {
			addr, ok := frames.Alloc(umem.KernelRX)
			if !ok {
				break
			}
			s.Fill.SetAddr(idx+k, addr)
		}
		s.Fill.Cancel(n - k)
		s.Fill.Submit(k)
		if s.Fill.NeedsWakeup() {
			s.WakeRX()
		}
	}
	refill() // before the program points at the socket: the first packet finds a frame
	if err := prog.Register(0, s); err != nil {
		log.Fatal(err)
	}
	prog.Commit()
	fmt.Println("reflecting on", ifc.Name, "in", prog.Mode(), "mode,", s.BindMode())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	mem := r.Mem()
	reaped := make([]uint64, 64)
	for ctx.Err() == nil {
		// Frames the kernel has sent come back on the completion ring.
		for {
			n := tx.Reap(reaped)
			for _, addr := range reaped[:n] {
				frames.Free(addr, umem.KernelTX)
			}
			if n < len(reaped) {
				break
			}
		}
		refill()

		n, idx := s.RX.Peek(64)
		if n == 0 {
			// Nothing received: sleep until the kernel has something.
			unix.Poll([]unix.PollFd{{Fd: int32(s.FD()), Events: unix.POLLIN}}, 100)
			continue
		}
		got, tidx := tx.Reserve(n)
		for k := range n {
			d := s.RX.Desc(idx + k)
			addr := xsk.Flat(d.Addr) // points past the frame's headroom
			r.Frames.Move(addr, umem.KernelRX, umem.Held)
			if k >= got { // TX ring full: drop, the frame is free again
				frames.Free(addr, umem.Held)
				continue
			}
			pkt := mem[addr : addr+uint64(d.Len)]
			var mac [6]byte
			copy(mac[:], pkt[0:6])
			copy(pkt[0:6], pkt[6:12])
			copy(pkt[6:12], mac[:])
			r.Frames.Move(addr, umem.Held, umem.KernelTX)
			tx.Set(tidx+k, addr, d.Len, 0)
		}
		s.RX.Release(n) // the RX entries are read: the kernel may reuse them
		tx.Submit()     // publishes the descriptors, kicks if the kernel asked
	}

	// Teardown: no more packets, then the program, the socket (the kernel
	// lets go of every frame on its rings), and the bookkeeping.
	prog.Unregister(0)
	prog.Close()
	st, _ := s.Stats()
	s.Close()
	frames.Flush()
	r.Frames.Reclaim(umem.KernelRX)
	r.Frames.Reclaim(umem.KernelTX)
	fmt.Println("rx dropped", st.Rx_dropped, "check:", r.Check())
	r.Close()
}
