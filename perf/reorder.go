package main

import (
	"context"
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

// The reordering workload reproduces fwd/xps_test.go's scenario (Flavio
// Leitner, "Poor TCP performance with XPS enabled after scrubbing skb",
// netdev, 2018): every one of w.Flows sequenced UDP flows reaches the
// contender on two RX queues of its ingress link, and the receiver counts,
// per flow, the datagrams that arrive after one with a higher sequence
// number.
//
// The sender is two AF_XDP sockets (inline.Sender) on queues 0 and 1 of the
// source namespace's eth0; a veth delivers TX queue i into RX queue i of its
// peer, the contender's ingress link. They take turns, one round each: a
// round is w.Burst datagrams of every flow on one queue; before the other
// queue is used, the sender waits until the kernel has consumed the round
// (Sender.Wait), so the sender itself never reorders; then it spins for
// w.Gap, so that the load stays one the forwarder sustains (reordering
// measured with backed-up RX rings would measure the backlog).

// reorderFrameOffset is where a datagram's flow id (4 bytes) and sequence
// number (4 bytes) start: after the Ethernet, IPv4 and UDP headers.
const reorderFrameOffset = 14 + 20 + 8

// seqSender sends sequenced flows alternately on two queues of A's eth0.
type seqSender struct {
	senders [2]*inline.Sender
	frames  [][]byte // one template per flow
	burst   int
	gap     time.Duration
	sent    atomic.Uint64
	stop    atomic.Bool
	done    chan error
}

func newSeqSender(p *topo.Pair, dstPort, flows, burst, size int, gap time.Duration, deadline time.Time) (*seqSender, error) {
	if size < udpHeaders+8 || size > 1500 {
		return nil, fmt.Errorf("sequenced udp packet size %d out of range %d..1500", size, udpHeaders+8)
	}
	s := &seqSender{burst: max(1, burst), gap: gap, done: make(chan error, 1)}
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

func (s *seqSender) run(deadline time.Time) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	seq := make([]uint32, len(s.frames))
	for round := 0; !s.stop.Load() && s.sent.Load() < maxPackets; round++ {
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
		s.sent.Add(uint64(s.burst * len(s.frames)))
		for end := time.Now().Add(s.gap); time.Now().Before(end); {
		}
	}
	return nil
}

func (s *seqSender) closeSenders() error {
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

func (s *seqSender) close() error {
	s.stop.Store(true)
	err := <-s.done // a round is bounded by Wait's second
	return errors.Join(err, s.closeSenders())
}

// runReorder runs the reordering workload on p, whose veths have (at least)
// two queues: out-of-order datagrams per million received.
func runReorder(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	if q := e.queuesOf(p); q < 2 {
		return nil, fmt.Errorf("the reordering workload needs two queues per veth, %s has %d", p.Name, q)
	}
	deadline := time.Now().Add(e.o.Warmup + e.o.Duration + 2*time.Second)
	rx, err := newSeqReceiver(p.B, p.V4B, w.Flows, deadline.Add(time.Second))
	if err != nil {
		return nil, err
	}
	tx, err := newSeqSender(p, rx.port, w.Flows, w.Burst, w.Size, w.Gap, deadline)
	if err != nil {
		rx.close()
		return nil, err
	}
	a, b, werr := e.window(ctx, func() [3]float64 {
		return [3]float64{float64(tx.sent.Load()), float64(rx.packets.Load()), float64(rx.outOfOrder.Load())}
	})
	err = errors.Join(werr, tx.close(), rx.close())
	if err != nil {
		return nil, err
	}
	secs := b.cpu.At.Sub(a.cpu.At).Seconds()
	sent, got, ooo := b.n[0]-a.n[0], b.n[1]-a.n[1], b.n[2]-a.n[2]
	m := map[string]float64{
		"sent_pps":     sent / secs,
		"pps":          got / secs,
		"received":     got,
		"out_of_order": ooo,
	}
	if sent > 0 {
		m["loss_pct"] = max(0, 100*(1-got/sent))
	}
	e.cpuMetrics(m, a, b)
	if got == 0 {
		return m, fmt.Errorf("no datagram arrived (%.0f sent)", sent)
	}
	m["ooo_per_million"] = 1e6 * ooo / got
	return m, nil
}
