package inline

import (
	"errors"
	"fmt"
	"time"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// SenderConfig configures a Sender. Zero values are defaults.
type SenderConfig struct {
	Ifname  string
	Ifindex int
	Queue   int
	// InlineMax: packets up to this size go into an inline slot. 0: the
	// default, 256; Off: never inline (see Off).
	InlineMax int
	// FragOrder: 3 or 4 (32/64 KiB blocks). 0: 4.
	FragOrder int
	// ChunkSize is the UMEM chunk size, the most one descriptor carries:
	// 2048 or 4096. 0: 4096.
	ChunkSize int
	// RingSize is the TX ring's size. 0: 2048.
	RingSize uint32
	// MultiBuffer allows packets longer than a chunk (XDP_USE_SG).
	MultiBuffer bool
	ZeroCopy    xsk.ZeroCopy
	HugePages   umem.HugePages
	// Batch is how many packets Send queues before it submits them. 0: 64.
	Batch int
}

// Sender transmits packets that a program builds itself — a traffic
// generator, a library user — on one (link, queue). Each packet is copied
// into an inline slot or a frag block by the same rules the forwarder
// uses, and packets are submitted and kicked in batches. It owns its
// region and socket. One goroutine uses it at a time.
type Sender struct {
	region *umem.Region
	sock   *xsk.Socket
	tx     *txring.Ring
	b      *Builder
	cfg    SenderConfig
	queued int
	reaped []uint64
	out    []xsk.Desc

	Sent, Bytes, Descs uint64
	Paths              [linearize.NumPaths]uint64
}

// ErrTooLong is returned by Send for a packet no layout can carry.
var ErrTooLong = errors.New("packet too long for the sender's layout")

// NewSender opens a socket on cfg's link and queue with a region of its own.
func NewSender(cfg SenderConfig) (_ *Sender, err error) {
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = 4096
	}
	if cfg.RingSize == 0 {
		cfg.RingSize = 2048
	}
	if cfg.Batch == 0 {
		cfg.Batch = 64
	}
	inlineMax, err := ResolveMax(cfg.InlineMax)
	if err != nil {
		return nil, fmt.Errorf("sender %s: %w", cfg.Ifname, err)
	}
	if cfg.FragOrder == 0 {
		cfg.FragOrder = 4
	}
	ucfg := umem.Config{
		FrameSize:   cfg.ChunkSize,
		Frames:      64, // the fill ring wants a few; nothing is received
		InlineSlots: int(cfg.RingSize) * 2,
		FragOrder:   cfg.FragOrder,
		FragBlocks:  64,
		HugePages:   cfg.HugePages,
	}
	if inlineMax == 0 {
		ucfg.InlineSlots = 0
	}
	s := &Sender{cfg: cfg, reaped: make([]uint64, cfg.Batch), out: make([]xsk.Desc, linearize.MaxDescs)}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.region, err = umem.New(ucfg); err != nil {
		return nil, fmt.Errorf("sender %s: %w", cfg.Ifname, err)
	}
	s.sock, err = xsk.Open(s.region, xsk.Config{
		Ifname: cfg.Ifname, Ifindex: cfg.Ifindex, Queue: cfg.Queue,
		RingSize: cfg.RingSize, ZeroCopy: cfg.ZeroCopy, SG: cfg.MultiBuffer,
	})
	if err != nil {
		return nil, fmt.Errorf("sender: %w", err)
	}
	s.tx = txring.New(s.sock)
	align := 64
	if s.sock.ZeroCopy() {
		align = umem.ChunkMax
	}
	s.b = NewBuilder(s.region, linearize.Policy{
		InlineMax: inlineMax, MaxTxFrags: linearize.MaxDescs, ChunkSize: cfg.ChunkSize,
	}, int(cfg.RingSize), align)
	return s, nil
}

// Send copies pkt and queues it for transmission. It returns false, with
// nothing queued, when the TX ring or the zones are full even after
// reaping completions: the caller may retry. It never blocks.
func (s *Sender) Send(pkt []byte) (bool, error) {
	if len(pkt) == 0 {
		return false, fmt.Errorf("sender %s: empty packet", s.cfg.Ifname)
	}
	path := linearize.Inline
	need := 1
	if len(pkt) > s.b.Policy.InlineMax {
		path = linearize.Frag
		need = linearize.Count(len(pkt), s.cfg.ChunkSize)
		if need > 1 && !s.cfg.MultiBuffer || need > linearize.MaxDescs || len(pkt) > s.region.Frags.UnitSize() {
			return false, fmt.Errorf("sender %s: %d bytes: %w", s.cfg.Ifname, len(pkt), ErrTooLong)
		}
	}
	if s.tx.Free(uint32(need)) < uint32(need) {
		// Full: the kernel may have stopped short (a busy device makes
		// copy mode leave descriptors for the next wake-up), so wake it.
		s.Flush()
		s.tx.Kick(true)
		s.Reap()
		if s.tx.Free(uint32(need)) < uint32(need) {
			return false, nil
		}
	}
	n := 0
	if path == linearize.Inline {
		addr, ok := s.b.Inline(pkt)
		if !ok {
			s.Reap()
			addr, ok = s.b.Inline(pkt)
		}
		if ok {
			s.out[0] = xsk.Desc{Addr: addr, Len: uint32(len(pkt))}
			n = 1
		} else {
			path = linearize.Frag
		}
	}
	if n == 0 {
		if n = s.b.Pack(pkt, s.out); n == 0 {
			s.Reap()
			if n = s.b.Pack(pkt, s.out); n == 0 {
				return false, nil
			}
		}
	}
	_, idx := s.tx.Reserve(uint32(n))
	for j, d := range s.out[:n] {
		s.tx.Set(idx+uint32(j), d.Addr, d.Len, d.Options)
	}
	s.Sent++
	s.Bytes += uint64(len(pkt))
	s.Descs += uint64(n)
	s.Paths[path]++
	if s.queued++; s.queued >= s.cfg.Batch {
		s.Flush()
	}
	return true, nil
}

// Flush submits what Send queued and kicks the kernel.
func (s *Sender) Flush() {
	s.tx.Submit()
	s.queued = 0
}

// Reap returns completed slots and blocks for reuse.
func (s *Sender) Reap() {
	for {
		n := s.tx.Reap(s.reaped)
		for _, a := range s.reaped[:n] {
			s.b.Release(a)
		}
		if n < len(s.reaped) {
			return
		}
	}
}

// Wait flushes and waits up to timeout for every queued packet to complete.
func (s *Sender) Wait(timeout time.Duration) error {
	s.Flush()
	deadline := time.Now().Add(timeout)
	for s.tx.InFlight() > 0 {
		s.Reap()
		if s.tx.InFlight() == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sender %s: %d descriptors still in flight after %v", s.cfg.Ifname, s.tx.InFlight(), timeout)
		}
		s.tx.Kick(true)
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

// Region is the sender's UMEM, for accounting checks.
func (s *Sender) Region() *umem.Region { return s.region }

// Socket is the sender's socket (its XDP_STATISTICS, its FD).
func (s *Sender) Socket() *xsk.Socket { return s.sock }

// Close closes the socket and unmaps the region; call Wait first to let
// queued packets leave.
func (s *Sender) Close() error {
	var errs []error
	if s.b != nil {
		s.b.Close()
	}
	if s.sock != nil {
		errs = append(errs, s.sock.Close())
		s.sock = nil
	}
	if s.region != nil {
		errs = append(errs, s.region.Close()) // idempotent; Region() stays usable for Check
	}
	return errors.Join(errs...)
}
