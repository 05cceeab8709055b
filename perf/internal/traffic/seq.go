// Sequenced flows alternating between two TX queues: the reordering
// workload's sender.

package traffic

import (
	"encoding/binary"
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

// reorderFrameOffset is where a datagram's flow id (4 bytes) and sequence
// number (4 bytes) start: after the Ethernet, IPv4 and UDP headers.
const reorderFrameOffset = 14 + 20 + 8

// SeqSender sends sequenced flows alternately on two queues of A's eth0.
type SeqSender struct {
	senders [2]*inline.Sender
	frames  [][]byte // one template per flow
	burst   int
	gap     time.Duration
	Sent    atomic.Uint64
	stop    atomic.Bool
	done    chan error
}

// NewSeqSender starts flows sequenced flows of size-byte IP packets to
// dstPort on p.B, burst datagrams of each per turn, gap between turns.
func NewSeqSender(p *topo.Pair, dstPort, flows, burst, size int, gap time.Duration, deadline time.Time) (*SeqSender, error) {
	if size < UDPHeaders+8 || size > 1500 {
		return nil, fmt.Errorf("sequenced udp packet size %d out of range %d..1500", size, UDPHeaders+8)
	}
	s := &SeqSender{burst: max(1, burst), gap: gap, done: make(chan error, 1)}
	var srcMAC, dstMAC net.HardwareAddr
	if err := p.B.Do(func() error {
		ifi, err := net.InterfaceByName(p.PeerB)
		if err == nil {
			dstMAC = ifi.HardwareAddr
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s in %s: %w", p.PeerB, p.B.Name, err)
	}
	if err := p.A.Do(func() error {
		ifi, err := net.InterfaceByName(p.PeerA)
		if err != nil {
			return err
		}
		srcMAC = ifi.HardwareAddr
		for q := range s.senders {
			snd, err := inline.NewSender(inline.SenderConfig{Ifname: p.PeerA, Ifindex: ifi.Index, Queue: q, RingSize: 512})
			if err != nil {
				return fmt.Errorf("queue %d: %w", q, err)
			}
			s.senders[q] = snd
		}
		return nil
	}); err != nil {
		s.closeSenders()
		return nil, fmt.Errorf("AF_XDP senders on %s in %s: %w", p.PeerA, p.A.Name, err)
	}
	for f := range flows {
		s.frames = append(s.frames, seqFrame(dstMAC, srcMAC, p.V4A, p.V4B, uint16(20000+f), uint16(dstPort), size))
	}
	go func() { s.done <- s.run(deadline) }()
	return s, nil
}

// seqFrame builds an Ethernet/IPv4/UDP frame whose IP packet is size bytes
// long, UDP checksum 0 (none), with room for a flow id and a sequence
// number at reorderFrameOffset.
func seqFrame(dst, src net.HardwareAddr, from, to netip.Addr, sport, dport uint16, size int) []byte {
	b := topo.UDPFrame(dst, src, from, to, sport, dport, 14+size)
	for i := reorderFrameOffset + 8; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}

func (s *SeqSender) run(deadline time.Time) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	seq := make([]uint32, len(s.frames))
	for round := 0; !s.stop.Load() && s.Sent.Load() < MaxPackets; round++ {
		if round%64 == 0 && !time.Now().Before(deadline) {
			return nil
		}
		snd := s.senders[round%2]
		for range s.burst {
			for f, fr := range s.frames {
				binary.BigEndian.PutUint32(fr[reorderFrameOffset:], uint32(f))
				binary.BigEndian.PutUint32(fr[reorderFrameOffset+4:], seq[f])
				for tries := 0; ; tries++ {
					ok, err := snd.Send(fr)
					if err != nil {
						return err
					}
					if ok {
						break
					}
					// A full ring: the kernel has not consumed the
					// previous round yet. Bounded like every loop.
					if tries%1024 == 1023 && (s.stop.Load() || !time.Now().Before(deadline)) {
						return nil
					}
				}
				seq[f]++
			}
		}
		// Everything of this round has left before the other queue is
		// used: the sender does not reorder by itself.
		if err := snd.Wait(time.Second); err != nil {
			return err
		}
		s.Sent.Add(uint64(s.burst * len(s.frames)))
		for end := time.Now().Add(s.gap); time.Now().Before(end); {
		}
	}
	return nil
}

func (s *SeqSender) closeSenders() error {
	var errs []error
	for i, snd := range s.senders {
		if snd != nil {
			snd.Wait(100 * time.Millisecond)
			errs = append(errs, snd.Close())
			s.senders[i] = nil
		}
	}
	return errors.Join(errs...)
}

// Close stops the sender and closes its AF_XDP sockets.
func (s *SeqSender) Close() error {
	s.stop.Store(true)
	err := <-s.done // a round is bounded by Wait's second
	return errors.Join(err, s.closeSenders())
}
