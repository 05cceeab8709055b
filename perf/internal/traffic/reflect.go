// The reflect workload's sender: one frame, as fast as an AF_XDP socket
// takes it.

package traffic

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// ReflectSender sends one UDP frame (Ethernet from src to dst, the
// root-side end's MAC) as fast as it can from an AF_XDP socket
// (inline.Sender) on queue 0 of host 0's eth0, until stopped, its deadline
// or limit: the reflect workload's traffic, counted back by an XDP
// program on the same eth0.
type ReflectSender struct {
	snd   *inline.Sender
	Sent  atomic.Uint64
	stop  atomic.Bool
	limit uint64
	done  chan error
}

// NewReflectSender starts a ReflectSender of size-byte frames on p.A.
func NewReflectSender(p *topo.Pair, dst, src net.HardwareAddr, size int, limit uint64, deadline time.Time) (*ReflectSender, error) {
	s := &ReflectSender{limit: min(limit, MaxPackets), done: make(chan error, 1)}
	if err := p.A.Do(func() error {
		ifi, err := net.InterfaceByName(p.PeerA)
		if err != nil {
			return err
		}
		s.snd, err = inline.NewSender(inline.SenderConfig{Ifname: p.PeerA, Ifindex: ifi.Index, Queue: 0, RingSize: 512})
		return err
	}); err != nil {
		return nil, fmt.Errorf("AF_XDP sender on %s in %s: %w", p.PeerA, p.A.Name, err)
	}
	// Any IPv4 destination: nothing routes it, the reflector returns it.
	frame := topo.UDPFrame(dst, src, p.V4A, netip.MustParseAddr("198.18.0.254"), 9, 9, size)
	go func() { s.done <- s.run(frame, deadline) }()
	return s, nil
}

func (s *ReflectSender) run(frame []byte, deadline time.Time) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer s.snd.Flush()
	for i := 0; !s.stop.Load() && s.Sent.Load() < s.limit; i++ {
		if i%1024 == 0 && !time.Now().Before(deadline) {
			return nil
		}
		ok, err := s.snd.Send(frame)
		if err != nil {
			return err
		}
		if ok {
			s.Sent.Add(1)
		}
	}
	return nil
}

// Close stops the sender and closes its AF_XDP socket.
func (s *ReflectSender) Close() error {
	s.stop.Store(true)
	err := <-s.done // bounded by the deadline check every 1,024 sends
	s.snd.Wait(100 * time.Millisecond)
	return errors.Join(err, s.snd.Close())
}
