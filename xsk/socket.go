package xsk

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/enum"
	"github.com/xdpfwd/xdpfwd/umem"
)

const xdpRingNeedWakeup = unix.XDP_RING_NEED_WAKEUP

// ZeroCopy selects how a socket is bound.
type ZeroCopy int

const (
	ZeroCopyAuto ZeroCopy = iota // zero-copy if the driver can, else copy
	ZeroCopyOn                   // zero-copy or fail
	ZeroCopyOff                  // copy mode
)

var zeroCopyNames = enum.New[ZeroCopy]("ZeroCopy", "auto", "on", "off")

// ParseZeroCopy parses "auto", "on" or "off".
func ParseZeroCopy(s string) (ZeroCopy, error) {
	if z, ok := zeroCopyNames.Parse(s); ok {
		return z, nil
	}
	return 0, fmt.Errorf("zerocopy %q: want %s", s, zeroCopyNames.Want())
}

// String is z as ParseZeroCopy reads it.
func (z ZeroCopy) String() string { return zeroCopyNames.String(z) }

// ErrZeroCopyUnsupported is returned when zero-copy was demanded and the
// driver cannot do it.
var ErrZeroCopyUnsupported = errors.New("driver does not support AF_XDP zero-copy")

// Config describes one socket.
type Config struct {
	Ifname   string // for messages
	Ifindex  int
	Queue    int
	RingSize uint32 // entries in the RX and TX rings; a power of two
	// RXSize, if set, is the entries in the RX ring instead: descriptors
	// cost 16 bytes, frames lent a page, so an RX ring may be sized for
	// a burst while its fill ring lends fewer frames (rxring's lend).
	RXSize uint32
	// FillSize is the entries in the fill and completion rings; 0 means
	// twice RingSize, so a worker that is scheduled out for a while loses
	// packets to a full RX ring, not to an empty fill ring.
	FillSize uint32
	// Shared is a socket bound to the UMEM (the one that registered it,
	// or one sharing it); nil makes this socket register it. Shared sockets take their fill and completion rings of
	// their own (one per link-queue, as the kernel requires) and inherit
	// the owner's bind mode.
	Shared   *Socket
	ZeroCopy ZeroCopy // owner only
	SG       bool     // owner only: XDP_USE_SG, multi-buffer packets
	// BusyPoll, if positive, sets SO_PREFER_BUSY_POLL, SO_BUSY_POLL (µs)
	// and SO_BUSY_POLL_BUDGET (BusyPollBudget): a recvfrom, sendto or
	// poll on the socket then runs the NAPI context that feeds its queue
	// (the kernel learns it from the first packet in copy mode).
	BusyPoll       time.Duration
	BusyPollBudget int
}

// Socket is one AF_XDP socket bound to one (link, queue).
type Socket struct {
	fd       int
	cfg      Config
	zeroCopy bool
	// mem plays the kernel's part in Kick and WakeRX for a socket of
	// NewMemSocket's (SetMemHooks); nil for a bound one.
	mem *MemHooks

	Fill Producer // frames lent to the kernel for RX
	Comp Consumer // TX frames the kernel is done with
	RX   Consumer
	TX   Producer
}

// sizes sets the ring sizes left 0 to their defaults and checks that
// every one is a power of two.
func (c *Config) sizes() error {
	if c.FillSize == 0 {
		c.FillSize = 2 * c.RingSize
	}
	if c.RXSize == 0 {
		c.RXSize = c.RingSize
	}
	for _, n := range []struct {
		what string
		size uint32
	}{{"ring", c.RingSize}, {"RX ring", c.RXSize}, {"fill ring", c.FillSize}} {
		if n.size == 0 || n.size&(n.size-1) != 0 {
			return fmt.Errorf("%s size %d is not a power of two", n.what, n.size)
		}
	}
	return nil
}

// Open creates, maps and binds a socket on r. With ZeroCopyAuto a failed
// zero-copy bind is retried in copy mode on a fresh socket.
func Open(r *umem.Region, cfg Config) (*Socket, error) {
	if err := cfg.sizes(); err != nil {
		return nil, fmt.Errorf("xsk %s queue %d: %w", cfg.Ifname, cfg.Queue, err)
	}
	if cfg.Shared != nil {
		return open(r, cfg, unix.XDP_SHARED_UMEM)
	}
	var flags uint16 = unix.XDP_USE_NEED_WAKEUP
	if cfg.SG {
		flags |= unix.XDP_USE_SG
	}
	switch cfg.ZeroCopy {
	case ZeroCopyOff:
		return open(r, cfg, flags|unix.XDP_COPY)
	case ZeroCopyOn:
		s, err := open(r, cfg, flags|unix.XDP_ZEROCOPY)
		if err != nil && errors.Is(err, unix.EOPNOTSUPP) {
			err = fmt.Errorf("xsk %s queue %d: %w (bind: %w); use --zerocopy auto or off", cfg.Ifname, cfg.Queue, ErrZeroCopyUnsupported, unix.EOPNOTSUPP)
		}
		return s, err
	}
	if s, err := open(r, cfg, flags|unix.XDP_ZEROCOPY); err == nil {
		return s, nil
	}
	return open(r, cfg, flags|unix.XDP_COPY)
}

func open(r *umem.Region, cfg Config, flags uint16) (_ *Socket, err error) {
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("xsk %s queue %d: socket: %w", cfg.Ifname, cfg.Queue, err)
	}
	s := &Socket{fd: fd, cfg: cfg}
	defer func() {
		if err != nil {
			s.Close()
			err = fmt.Errorf("xsk %s queue %d: %w", cfg.Ifname, cfg.Queue, err)
		}
	}()
	if cfg.BusyPoll > 0 {
		if err := busyPoll(fd, cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Shared == nil {
		reg := unix.XDPUmemReg{
			Addr:     r.Addr(),
			Len:      uint64(r.Size()),
			Size:     uint32(r.ChunkSize()),
			Headroom: uint32(r.Config().Headroom),
			// Unaligned chunks: inline slots and frag-block descriptors
			// start anywhere, not on chunk boundaries.
			Flags: unix.XDP_UMEM_UNALIGNED_CHUNK_FLAG,
		}
		if err := setsockopt(fd, unix.XDP_UMEM_REG, unsafe.Pointer(&reg), unsafe.Sizeof(reg)); err != nil {
			return nil, fmt.Errorf("XDP_UMEM_REG (%d bytes, chunk %d): %w", reg.Len, reg.Size, err)
		}
	}
	for _, o := range []struct {
		opt  int
		size uint32
	}{{unix.XDP_UMEM_FILL_RING, cfg.FillSize}, {unix.XDP_UMEM_COMPLETION_RING, cfg.FillSize}, {unix.XDP_RX_RING, cfg.RXSize}, {unix.XDP_TX_RING, cfg.RingSize}} {
		if err := unix.SetsockoptInt(fd, unix.SOL_XDP, o.opt, int(o.size)); err != nil {
			return nil, fmt.Errorf("ring size option %d (%d entries): %w", o.opt, o.size, err)
		}
	}
	if err := s.mapRings(r); err != nil {
		return nil, err
	}

	sa := unix.SockaddrXDP{Flags: flags, Ifindex: uint32(cfg.Ifindex), QueueID: uint32(cfg.Queue)}
	if cfg.Shared != nil {
		sa.SharedUmemFD = uint32(cfg.Shared.fd)
	}
	// The kernel frees a queue's binding in deferred work after close
	// returns, so a bind right after a close (a restart, or the fallback
	// from zero-copy to copy) may see EBUSY for some milliseconds.
	for deadline := time.Now().Add(time.Second); ; {
		err = unix.Bind(fd, &sa)
		if err != unix.EBUSY || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("bind (flags %#x): %w", flags, err)
	}
	// Let one sendto in copy mode move a whole ring's worth instead of the
	// default 32 descriptors (on Linux 6.18 one sendto was seen to send
	// 128 pending descriptors). Older kernels lack the option; that is
	// fine: txring.PollBudget is the floor the owner counts on.
	_ = unix.SetsockoptInt(fd, unix.SOL_XDP, unix.XDP_MAX_TX_SKB_BUDGET, int(cfg.RingSize))
	s.zeroCopy = boundZeroCopy(fd)
	return s, nil
}

// boundZeroCopy reports whether the kernel bound socket fd in zero-copy
// mode.
func boundZeroCopy(fd int) bool {
	var opts struct{ flags uint32 }
	optlen := uint32(unsafe.Sizeof(opts))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_OPTIONS,
		uintptr(unsafe.Pointer(&opts)), uintptr(unsafe.Pointer(&optlen)), 0)
	return e == 0 && opts.flags&unix.XDP_OPTIONS_ZEROCOPY != 0
}

// mapRings maps the socket's four rings, of the sizes in its config, and
// reads where each side stands.
func (s *Socket) mapRings(r *umem.Region) error {
	fd, cfg := s.fd, s.cfg
	var off unix.XDPMmapOffsets
	optlen := uint32(unsafe.Sizeof(off))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_MMAP_OFFSETS,
		uintptr(unsafe.Pointer(&off)), uintptr(unsafe.Pointer(&optlen)), 0); e != 0 {
		return fmt.Errorf("XDP_MMAP_OFFSETS: %w", e)
	}
	mapRing := func(o unix.XDPRingOffset, pgoff int64, n uint32, elem uint64) (ring, error) {
		mem, err := unix.Mmap(fd, pgoff, int(o.Desc+uint64(n)*elem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err != nil {
			return ring{}, fmt.Errorf("mmap ring at %#x: %w", pgoff, err)
		}
		return newRing(mem, o.Producer, o.Consumer, o.Flags, o.Desc, n), nil
	}
	descSize := uint64(unsafe.Sizeof(Desc{}))
	var err error
	if s.Fill.ring, err = mapRing(off.Fr, unix.XDP_UMEM_PGOFF_FILL_RING, cfg.FillSize, 8); err != nil {
		return err
	}
	if s.Comp.ring, err = mapRing(off.Cr, unix.XDP_UMEM_PGOFF_COMPLETION_RING, cfg.FillSize, 8); err != nil {
		return err
	}
	if s.RX.ring, err = mapRing(off.Rx, unix.XDP_PGOFF_RX_RING, cfg.RXSize, descSize); err != nil {
		return err
	}
	if s.TX.ring, err = mapRing(off.Tx, unix.XDP_PGOFF_TX_RING, cfg.RingSize, descSize); err != nil {
		return err
	}
	s.Resync()
	// Every ring of a socket names addresses of its UMEM, r: the kernel
	// sees them less r's place in the mapping (umem.NewSpace).
	for _, rg := range []*ring{&s.Fill.ring, &s.Comp.ring, &s.RX.ring, &s.TX.ring} {
		rg.base = r.Base()
	}
	return nil
}

// Resync reads where each side of the four rings stands from the rings
// themselves: for a socket adopted from another process (Adopt), whose
// rings that process may have moved since.
func (s *Socket) Resync() {
	s.Fill.initProducer()
	s.TX.initProducer()
	s.Comp.initConsumer()
	s.RX.initConsumer()
}

// Adopt takes over socket fd, which another process opened and bound on
// the region r maps too (umem.MapSpace) with the ring sizes cfg gives:
// its rings are mapped here, where they stand; it is bound as it was.
// The Socket owns fd from then on, closed with it, whether Adopt succeeds
// or not. The other process must not touch the rings any more: call
// Resync before using them if it did since.
func Adopt(r *umem.Region, fd int, cfg Config) (_ *Socket, err error) {
	serr := cfg.sizes()
	s := &Socket{fd: fd, cfg: cfg}
	defer func() {
		if err != nil {
			s.Close()
			err = fmt.Errorf("xsk %s queue %d: adopt: %w", cfg.Ifname, cfg.Queue, err)
		}
	}()
	if serr != nil {
		return nil, serr
	}
	if err := s.mapRings(r); err != nil {
		return nil, err
	}
	s.zeroCopy = boundZeroCopy(fd)
	return s, nil
}

func setsockopt(fd, opt int, p unsafe.Pointer, n uintptr) error {
	if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, uintptr(opt), uintptr(p), n, 0); e != 0 {
		return e
	}
	return nil
}

// FD is the socket's file descriptor, for the XSKMAP and poll.
func (s *Socket) FD() int { return s.fd }

// Queue is the queue the socket is bound to.
func (s *Socket) Queue() int { return s.cfg.Queue }

// Ifname is the link the socket is bound to.
func (s *Socket) Ifname() string { return s.cfg.Ifname }

// ZeroCopy reports whether the kernel bound the socket in zero-copy mode.
func (s *Socket) ZeroCopy() bool { return s.zeroCopy }

// BindMode is "zerocopy" or "copy".
func (s *Socket) BindMode() string {
	if s.zeroCopy {
		return "zerocopy"
	}
	return "copy"
}

func busyPoll(fd int, cfg Config) error {
	for _, o := range []struct {
		name     string
		opt, val int
	}{
		{"SO_PREFER_BUSY_POLL", unix.SO_PREFER_BUSY_POLL, 1},
		{"SO_BUSY_POLL", unix.SO_BUSY_POLL, max(1, int(cfg.BusyPoll/time.Microsecond))},
		{"SO_BUSY_POLL_BUDGET", unix.SO_BUSY_POLL_BUDGET, max(1, cfg.BusyPollBudget)},
	} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, o.opt, o.val); err != nil {
			return fmt.Errorf("%s %d: %w", o.name, o.val, err)
		}
	}
	return nil
}

// Kick asks the kernel to process the TX ring: one syscall for a batch.
// EAGAIN/EBUSY/ENOBUFS mean the kernel is still busy with earlier work and
// are not errors; ENETDOWN is returned so the caller can count it.
//
// The call never blocks (MSG_DONTWAIT; copy mode transmits a bounded
// budget and returns), so it is made raw, without telling the Go
// scheduler: a scheduler-aware call on a worker's locked thread lets
// sysmon retake the thread's P while the kernel transmits and wake another
// thread to run it, a context switch each way for nothing.
func (s *Socket) Kick() error {
	_, _, e := unix.RawSyscall6(unix.SYS_SENDTO, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	switch e {
	case 0, unix.EAGAIN, unix.EBUSY, unix.ENOBUFS:
		return nil
	case unix.EBADF:
		// Only on the error path: a bound socket pays nothing for it.
		if s.mem != nil && s.mem.Kick != nil {
			return s.mem.Kick()
		}
	}
	return e
}

// WakeRX wakes a driver that asked for it on the fill ring (and, with
// busy polling, runs the link's NAPI once). Like Kick, it never blocks and
// is made raw.
func (s *Socket) WakeRX() {
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(s.fd), 0, 0, unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EBADF && s.mem != nil && s.mem.WakeRX != nil {
		s.mem.WakeRX()
	}
}

// Stats are the kernel's XDP_STATISTICS for the socket.
type Stats = unix.XDPStatistics

// Stats reads the kernel's counters for the socket.
func (s *Socket) Stats() (Stats, error) {
	var st Stats
	optlen := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&optlen)), 0); e != 0 {
		return st, fmt.Errorf("xsk %s queue %d: XDP_STATISTICS: %w", s.cfg.Ifname, s.cfg.Queue, e)
	}
	return st, nil
}

// Close unmaps the rings and closes the socket. The kernel releases every
// UMEM address still in its rings. A socket that registered the UMEM must
// be closed after the sockets that share it.
func (s *Socket) Close() error {
	for _, r := range []*ring{&s.Fill.ring, &s.Comp.ring, &s.RX.ring, &s.TX.ring} {
		if r.mem != nil {
			unix.Munmap(r.mem)
			*r = ring{}
		}
	}
	if s.fd < 0 {
		return nil
	}
	err := unix.Close(s.fd)
	s.fd = -1
	return err
}
