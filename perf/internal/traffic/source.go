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

// NewSource starts kind ("txonly" or "sendmmsg") on p's A end towards dst
// until deadline; with macs above 1, txonly sends from that many source
// MACs in turn (gen.Template.SrcMACs), which sendmmsg cannot.
func NewSource(kind string, p *topo.Pair, dst netip.AddrPort, size int, rate float64, deadline time.Time, macs int) (Source, error) {
	if kind == "sendmmsg" {
		if macs > 1 {
			return nil, fmt.Errorf("sendmmsg sends from its socket's MAC only, not %d: use txonly", macs)
		}
		return NewUDPSender(p.A, p.V4A, dst, size, rate, deadline)
	}
	macB, err := p.B.HardwareAddr(p.PeerB)
	if err != nil {
		return nil, fmt.Errorf("txonly: %w", err)
	}
	cfg := gen.Config{Links: []string{p.PeerA}, Sizes: []int{size + 14 + gen.FCS}, Rate: rate, Duration: time.Until(deadline),
		Template: gen.Template{DstMAC: macB, SrcIP: p.V4A, DstIP: p.V4B, DstPort: dst.Port(), SrcMACs: macs}}
	var g *gen.Generator
	if err := p.A.Do(func() (err error) { g, err = gen.New(cfg); return err }); err != nil {
		return nil, fmt.Errorf("txonly: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &txSource{g: g, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- g.Run(ctx) }()
	return s, nil
}
