package xsk

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// LastStamps is the program's per-RX-queue record of the newest arrival
// stamp it wrote: an array map of one value, a uint64 per queue (one value,
// so the program can index it from a direct value address), mapped into
// this process. The program stores a packet's stamp there right after writing it
// into the packet's metadata, and the packet becomes visible in the
// socket's RX ring later (when the driver flushes its redirects). A reader
// that has already taken from the ring the packet carrying the stamp it
// reads here knows that every older packet of the queue is in its hands.
//
// The program stores StampBusy there before it reads the clock for a
// packet, and the stamp after: a reader that reads its own clock first,
// then loads the queue's stamp and finds the one it has already taken,
// knows that no packet of the queue it has not seen was stamped before
// its clock read, but for a store still draining from the CPU that
// stamps (well under a microsecond).
//
// Only the kernel writes the values; readers load them atomically.
type LastStamps struct {
	m   *ebpf.Map
	mem []byte
	n   int
}

func newLastStamps(queues int) (*LastStamps, error) {
	n := max(queues, 1)
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "xdpfwd_stamps",
		Type:       ebpf.Array,
		KeySize:    4,
		ValueSize:  uint32(8 * n),
		MaxEntries: 1,
		Flags:      unix.BPF_F_MMAPABLE,
	})
	if err != nil {
		return nil, fmt.Errorf("last-stamp map: %w", err)
	}
	return mapLastStamps(m, n)
}

// mapLastStamps maps the values of m, the stamps of n queues; m is
// closed if that fails.
func mapLastStamps(m *ebpf.Map, n int) (*LastStamps, error) {
	n = max(n, 1)
	// An array map's mmap'd values start at offset 0.
	size := (n*8 + unix.Getpagesize() - 1) &^ (unix.Getpagesize() - 1)
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("last-stamp map: mmap: %w", err)
	}
	return &LastStamps{m: m, mem: mem, n: n}, nil
}

// StampBusy is a queue's newest stamp while the program stamps a packet
// of it: never a stamp a reader has taken.
const StampBusy = -1

// Load returns the newest stamp the program wrote for RX queue q, 0 if
// none (or q out of range), StampBusy while it stamps a packet.
func (s *LastStamps) Load(q int) int64 {
	if s == nil || q < 0 || q >= s.n {
		return 0
	}
	return (*atomic.Int64)(unsafe.Pointer(&s.mem[q*8])).Load()
}

func (s *LastStamps) close() error {
	if s == nil || s.m == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	if err2 := s.m.Close(); err == nil {
		err = err2
	}
	return err
}

// NewMemLastStamps returns stamps for n queues in ordinary memory, for
// tests and fakes of the program; Store writes them.
func NewMemLastStamps(n int) *LastStamps {
	return &LastStamps{mem: make([]byte, 8*max(n, 1)), n: max(n, 1)}
}

// Store writes queue q's newest stamp, as the program would; only for
// stamps made by NewMemLastStamps (the kernel's mapping is read-only).
func (s *LastStamps) Store(q int, v int64) {
	if s.m != nil {
		panic("xsk: LastStamps.Store on the program's stamps")
	}
	(*atomic.Int64)(unsafe.Pointer(&s.mem[q*8])).Store(v)
}
