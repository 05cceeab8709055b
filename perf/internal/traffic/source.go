// The UDP workloads' sender: txonly or sendmmsg (--source).

package traffic

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// Source is the UDP throughput and cost workloads' traffic source (--source): by
// default xdpfwd's txonly generator (package gen), an AF_XDP socket on A's
// eth0 that costs about half what the sendmmsg sender does per packet
// (gencost), so less of the machine goes to making the traffic and more
// of a forwarder's limit shows; --source sendmmsg keeps perf's UDP socket
// sender (UDPSender). Both send one flow of size-byte IP packets with a
// sequence number first in the payload (txonly's is gen.Payload: magic,
// flow id, then the sequence, so the receiver's 64-bit in-order check
// holds for the one flow), to the receiver's port in B.
type Source interface {
	Packets() uint64 // sent so far
	Close() error
}

// Packets is the datagrams sent so far.
func (s *UDPSender) Packets() uint64 { return s.Sent.Load() }

// txSource is a running txonly generator.
type txSource struct {
	g      *gen.Generator
	cancel context.CancelFunc
	done   chan error
}

func (s *txSource) Packets() uint64 { return s.g.Stats().Sent }

func (s *txSource) Close() error {
	s.cancel()
	return errors.Join(<-s.done, s.g.Close())
}

// Shape is what a source varies beyond its one flow, as hosts and flows
// behind a link; txonly only (gen.Template's fields of the same names).
// The zero Shape is one flow from one MAC to B.
type Shape struct {
	SrcMACs int // source MACs, in turn
	// DstHosts, if set, replace B: flow i goes to DstHosts[i], on
	// dst's port.
	DstHosts []gen.Host
	SrcPorts int // source ports per flow, in turn
}

// NewSource starts kind ("txonly" or "sendmmsg") on p's A end towards dst
// until deadline, in shape, which sendmmsg cannot vary.
func NewSource(kind string, p *topo.Pair, dst netip.AddrPort, size int, rate float64, deadline time.Time, shape Shape) (Source, error) {
	if kind == "sendmmsg" {
		if shape.SrcMACs > 1 || len(shape.DstHosts) > 0 || shape.SrcPorts > 1 {
			return nil, fmt.Errorf("sendmmsg sends one flow from its socket's MAC, not %+v: use txonly", shape)
		}
		return NewUDPSender(p.A, p.V4A, dst, size, rate, deadline)
	}
	macB, err := p.B.HardwareAddr(p.PeerB)
	if err != nil {
		return nil, fmt.Errorf("txonly: %w", err)
	}
	cfg := gen.Config{Links: []string{p.PeerA}, Sizes: []int{size + 14 + gen.FCS}, Rate: rate, Duration: time.Until(deadline),
		Flows: len(shape.DstHosts),
		Template: gen.Template{DstMAC: macB, SrcIP: p.V4A, DstIP: p.V4B, DstPort: dst.Port(),
			SrcMACs: shape.SrcMACs, DstHosts: shape.DstHosts, SrcPorts: shape.SrcPorts}}
	var g *gen.Generator
	if err := p.A.Do(func() (err error) { g, err = gen.New(cfg); return err }); err != nil {
		return nil, fmt.Errorf("txonly: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &txSource{g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- g.Run(ctx) }()
	return s, nil
}
