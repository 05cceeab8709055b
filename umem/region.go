package umem

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/enum"
)

const (
	// InlineSlotSize is the size of one inline TX slot: "something like
	// 256 bytes per slot in the TX ring", the premapped zone of Eric
	// Dumazet's reply in "[RFC net] tcp: Fix performance regression for
	// request-response workloads" (netdev, 2022).
	InlineSlotSize = 256
	// ChunkMax is the largest UMEM chunk Linux accepts; no descriptor may
	// exceed it, so larger blocks hold several adjacent descriptors.
	ChunkMax  = 4096
	hugePage  = 2 << 20
	smallPage = 4096
)

// HugePages selects the backing of the region.
type HugePages int

const (
	HugePagesAuto HugePages = iota // hugetlb, else THP, else 4 KiB
	HugePagesOn                    // hugetlb or fail
	HugePagesOff                   // 4 KiB pages only
)

var hugePagesNames = enum.New[HugePages]("HugePages", "auto", "on", "off")

// ParseHugePages parses "auto", "on" or "off".
func ParseHugePages(s string) (HugePages, error) {
	if h, ok := hugePagesNames.Parse(s); ok {
		return h, nil
	}
	return 0, fmt.Errorf("hugepages %q: want %s", s, hugePagesNames.Want())
}

// String is h as ParseHugePages reads it.
func (h HugePages) String() string { return hugePagesNames.String(h) }

// Backing says what memory the region ended up on.
type Backing string

const (
	BackingHugeTLB Backing = "hugetlb-2MiB"
	BackingTHP     Backing = "thp-2MiB"
	Backing4K      Backing = "4KiB"
)

// Config sizes the region. Zero counts disable a zone (frames excepted).
type Config struct {
	FrameSize   int // RX frame size and UMEM chunk size: 2048 or 4096
	Frames      int // RX frames
	InlineSlots int // 256-byte inline TX slots
	FragOrder   int // 0 (no frag zone), 3 (32 KiB blocks) or 4 (64 KiB blocks)
	FragBlocks  int
	Headroom    int // XDP_UMEM_REG headroom in front of received data
	HugePages   HugePages
}

// DefaultConfig sizes the zones for sockets bound to `sockets` (link,
// queue) pairs: per socket, enough frames to fill a 2048-entry fill ring
// with as many again in flight on RX and TX.
func DefaultConfig(sockets int) Config {
	sockets = max(sockets, 1)
	return Config{
		FrameSize:   2048,
		Frames:      4096 * sockets,
		InlineSlots: 8192, // 2 MiB: one huge page
		FragOrder:   4,
		FragBlocks:  32 * sockets,
		HugePages:   HugePagesAuto,
	}
}

func (c Config) validate() error {
	switch {
	case c.FrameSize != 2048 && c.FrameSize != 4096:
		return fmt.Errorf("frame size %d: want 2048 or 4096", c.FrameSize)
	case c.Frames <= 0:
		return fmt.Errorf("frames %d: want at least 1", c.Frames)
	case c.InlineSlots < 0 || c.FragBlocks < 0:
		return fmt.Errorf("negative zone size")
	case c.FragOrder != 0 && c.FragOrder != 3 && c.FragOrder != 4:
		return fmt.Errorf("frag order %d: want 0, 3 or 4", c.FragOrder)
	case c.Headroom < 0 || c.Headroom > c.FrameSize/2:
		return fmt.Errorf("headroom %d: want 0..%d", c.Headroom, c.FrameSize/2)
	}
	return nil
}

// FragBlockSize is the size of one frag block (0 when the zone is off).
func (c Config) FragBlockSize() int {
	if c.FragOrder == 0 {
		return 0
	}
	return smallPage << c.FragOrder
}

// Region is one UMEM: premapped packet memory registered with the kernel
// as a whole, carved into zones. Regions made together (NewSpace) lie back
// to back in one mapping: an address (an offset into Mem) then names a
// byte of any of them, and each zone's units carry addresses of the
// mapping, not of their region. The kernel sees a region's own offsets
// (Base subtracted: package xsk translates on its rings).
type Region struct {
	m       *mapping
	mem     []byte // the whole mapping
	base    uint64 // where the region starts in it
	size    int
	cfg     Config
	backing Backing

	// Inline comes first so it starts on a huge page boundary: thousands
	// of in-flight small packets then live in one 2 MiB page.
	Inline *Zone
	Frags  *Zone
	Frames *Zone
	zones  []*Zone
}

// mapping is the memory regions made together share: unmapped when the
// last of them is closed. It is a memfd's, mapped shared, so that another
// process given the file (a successor taking over: MapSpace) maps the
// very pages the kernel's UMEM pinned.
type mapping struct {
	mem  []byte
	file *os.File
	open int
}

// New maps and pre-faults the region and carves it into zones.
func New(cfg Config) (*Region, error) {
	rs, err := NewSpace(cfg)
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// NewSpace maps one region per Config back to back in one mapping (each
// starting on a huge page boundary), pre-faults it and carves each region
// into its zones: several UMEMs whose addresses do not overlap, so that
// code reading packets needs no word of which one a packet is in. The
// first Config's HugePages chooses the backing of the whole. Each region
// is closed on its own; the mapping goes with the last.
func NewSpace(cfgs ...Config) ([]*Region, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("umem: no region to map")
	}
	var total uint64
	for i := range cfgs {
		if err := cfgs[i].validate(); err != nil {
			return nil, fmt.Errorf("umem: %w", err)
		}
		if cfgs[i].FragOrder == 0 {
			cfgs[i].FragBlocks = 0
		}
		_, _, _, size := cfgs[i].layout()
		total += size
	}
	file, mem, backing, err := mapRegion(int(total), cfgs[0].HugePages)
	if err != nil {
		return nil, err
	}
	return carve(&mapping{mem: mem, file: file, open: len(cfgs)}, backing, cfgs), nil
}

// MapSpace maps the regions another process made with NewSpace(cfgs...),
// from their memory's file (Region.File): the same pages, which the
// kernel's UMEMs hold, as they are. Their zones start with every unit
// Free: the caller restores each zone's states (Zone.Restore) before it
// takes a unit. The mapping is faulted in a piece at a time, with pause
// between pieces (0: at once): the other process forwards meanwhile, and
// a successor that took a CPU whole for the milliseconds tens of MiB of
// page tables take would stall it.
func MapSpace(file *os.File, pause time.Duration, cfgs ...Config) ([]*Region, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("umem: no region to map")
	}
	var total uint64
	for i := range cfgs {
		if err := cfgs[i].validate(); err != nil {
			return nil, fmt.Errorf("umem: %w", err)
		}
		if cfgs[i].FragOrder == 0 {
			cfgs[i].FragBlocks = 0
		}
		total += uint64(cfgs[i].Size())
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(file.Fd()), &st); err != nil {
		return nil, fmt.Errorf("umem: %s: %w", file.Name(), err)
	}
	if uint64(st.Size) != total {
		return nil, fmt.Errorf("umem: %s is %d bytes, the regions take %d: not theirs", file.Name(), st.Size, total)
	}
	mem, err := unix.Mmap(int(file.Fd()), 0, int(total), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("umem: map %s (%d bytes): %w", file.Name(), total, err)
	}
	const piece = 1 << 20
	for off := 0; off < len(mem); off += piece {
		chunk := mem[off:min(off+piece, len(mem))]
		if unix.Madvise(chunk, unix.MADV_POPULATE_WRITE) != nil {
			// (Before Linux 5.14.) A read, never a write: the kernel
			// may be writing a packet there this very moment.
			var sink byte
			for i := 0; i < len(chunk); i += smallPage {
				sink |= chunk[i]
			}
			_ = sink
		}
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	return carve(&mapping{mem: mem, file: file, open: len(cfgs)}, backingOf(file, mem), cfgs), nil
}

// carve lays the regions of cfgs back to back in m.
func carve(m *mapping, backing Backing, cfgs []Config) []*Region {
	mem := m.mem
	rs := make([]*Region, len(cfgs))
	var base uint64
	for i, cfg := range cfgs {
		inlineOff, fragOff, frameOff, size := cfg.layout()
		r := &Region{m: m, mem: mem, base: base, size: int(size), cfg: cfg, backing: backing}
		r.Inline = newZone("inline", base+inlineOff, InlineSlotSize, cfg.InlineSlots)
		fragUnit := uint64(max(cfg.FragBlockSize(), smallPage))
		r.Frags = newZone("frags", base+fragOff, fragUnit, cfg.FragBlocks)
		r.Frames = newZone("frames", base+frameOff, uint64(cfg.FrameSize), cfg.Frames)
		r.zones = []*Zone{r.Inline, r.Frags, r.Frames}
		rs[i] = r
		base += size
	}
	return rs
}

// layout is where each zone starts and the region's size: inline first,
// frag blocks aligned to their size, frames to theirs, the whole a
// multiple of a huge page.
func (c Config) layout() (inlineOff, fragOff, frameOff, size uint64) {
	off := uint64(c.InlineSlots) * InlineSlotSize
	fragOff = alignUp(off, uint64(max(c.FragBlockSize(), smallPage)))
	if c.FragOrder != 0 {
		off = fragOff + uint64(c.FragBlocks)*uint64(c.FragBlockSize())
	} else {
		off = fragOff
	}
	frameOff = alignUp(off, uint64(c.FrameSize))
	off = frameOff + uint64(c.Frames)*uint64(c.FrameSize)
	return 0, fragOff, frameOff, alignUp(off, hugePage)
}

// Size is the bytes a region of c maps (Region.Size once New made it):
// what a caller sizing its zones can weigh before mapping anything.
func (c Config) Size() int {
	_, _, _, size := c.layout()
	return int(size)
}

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

// mapRegion makes the memory of size bytes: a memfd, mapped shared and
// pre-faulted, so that a successor can map it too (MapSpace). Huge pages
// come from hugetlbfs (vm.nr_hugepages) if there are enough, else as
// transparent huge pages of shmem where the kernel allows them there
// (transparent_hugepage/shmem_enabled: advise, always or within_size;
// never by default), else the region is on 4 KiB pages.
func mapRegion(size int, hp HugePages) (*os.File, []byte, Backing, error) {
	const prot = unix.PROT_READ | unix.PROT_WRITE
	if hp != HugePagesOff {
		f, mem, err := mapMemfd(size, unix.MFD_HUGETLB|unix.MFD_HUGE_2MB, prot)
		if err == nil {
			return f, mem, BackingHugeTLB, nil
		}
		if hp == HugePagesOn {
			return nil, nil, "", fmt.Errorf("umem: %d MiB of 2 MiB huge pages (vm.nr_hugepages): %w", size>>20, err)
		}
	}
	f, mem, err := mapMemfd(size, 0, prot)
	if err != nil {
		return nil, nil, "", err
	}
	advice := unix.MADV_NOHUGEPAGE
	if hp == HugePagesAuto {
		advice = unix.MADV_HUGEPAGE
	}
	unix.Madvise(mem, advice)
	// Pre-fault now, so no packet takes a page fault later.
	if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err != nil {
		for i := 0; i < len(mem); i += smallPage {
			mem[i] = 0
		}
	}
	return f, mem, backingOf(f, mem), nil
}

// mapMemfd creates a memfd of size bytes (flags: its huge pages) and maps
// it shared.
func mapMemfd(size, flags, prot int) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("xdpfwd-umem", unix.MFD_CLOEXEC|flags)
	if err != nil {
		return nil, nil, fmt.Errorf("umem: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "xdpfwd-umem")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("umem: memfd of %d bytes: %w", size, err)
	}
	pop := 0
	if flags&unix.MFD_HUGETLB != 0 {
		pop = unix.MAP_POPULATE // reserves the huge pages now, or fails now
	}
	mem, err := unix.Mmap(fd, 0, size, prot, unix.MAP_SHARED|pop)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("umem: mmap %d bytes: %w", size, err)
	}
	return f, mem, nil
}

// backingOf says what pages file's mapping mem is on.
func backingOf(file *os.File, mem []byte) Backing {
	var fs unix.Statfs_t
	if unix.Fstatfs(int(file.Fd()), &fs) == nil && fs.Type == unix.HUGETLBFS_MAGIC {
		return BackingHugeTLB
	}
	if hugeBytes(mem) > 0 {
		return BackingTHP
	}
	return Backing4K
}

// hugeBytes reads how much of mem the kernel maps with transparent huge
// pages of shmem, from this process's smaps.
func hugeBytes(mem []byte) int64 {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0
	}
	defer f.Close()
	start := uint64(uintptr(unsafe.Pointer(&mem[0])))
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's header line
			lo, _, _ := strings.Cut(fields[0], "-")
			v, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && v == start
			continue
		}
		if in && fields[0] == "ShmemPmdMapped:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Mem is the mapping the region lies in, whole: addresses in
// descriptors and zones index into it.
func (r *Region) Mem() []byte { return r.mem }

// Bytes is the region's own memory, as the kernel sees it: offset 0 is
// Base.
func (r *Region) Bytes() []byte { return r.mem[r.base : r.base+uint64(r.size)] }

// Base is where the region starts in Mem: the kernel's offset of an
// address is the address less Base.
func (r *Region) Base() uint64 { return r.base }

// Contains reports whether addr lies in the region.
func (r *Region) Contains(addr uint64) bool { return addr-r.base < uint64(r.size) }

// Addr is the region's virtual address, for XDP_UMEM_REG.
func (r *Region) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(&r.mem[r.base]))) }

// Size is the region's size in bytes (XDP_UMEM_REG's length).
func (r *Region) Size() int { return r.size }

// Backing reports what memory the region got.
func (r *Region) Backing() Backing { return r.backing }

// Config returns the configuration the region was built with.
func (r *Region) Config() Config { return r.cfg }

// ChunkSize is the UMEM chunk size to register: the frame size.
func (r *Region) ChunkSize() int { return r.cfg.FrameSize }

// Zones lists the zones in address order.
func (r *Region) Zones() []*Zone { return r.zones }

// ZoneOf returns the zone holding addr, or nil.
func (r *Region) ZoneOf(addr uint64) *Zone {
	switch {
	case r.Frames.Contains(addr):
		return r.Frames
	case r.Inline.Contains(addr):
		return r.Inline
	case r.Frags.Contains(addr):
		return r.Frags
	}
	return nil
}

// Check runs every zone's Check; call it once workers have stopped.
func (r *Region) Check() error {
	var errs []error
	for _, z := range r.zones {
		errs = append(errs, z.Check())
	}
	return errors.Join(errs...)
}

// InUse counts units not free (held, or with the kernel) across all zones.
func (r *Region) InUse() int {
	n := 0
	for _, z := range r.zones {
		c := z.Counts()
		n += z.Len() - c[Free]
	}
	return n
}

// File is the memory the region lies in (all of NewSpace's regions
// share it), for a successor to map (MapSpace): a memfd. It is the
// region's: the caller must not close it.
func (r *Region) File() *os.File { return r.m.file }

// Close releases the region; the mapping is unmapped, and its file
// closed, once every region in it is closed (NewSpace). The sockets using
// it must be closed first, or handed on: the kernel's UMEM holds the
// pages while a socket bound to it lives, in whatever process.
func (r *Region) Close() error {
	if r.m == nil {
		return nil
	}
	m := r.m
	r.m, r.mem = nil, nil
	if m.open--; m.open > 0 {
		return nil
	}
	return errors.Join(unix.Munmap(m.mem), m.file.Close())
}
