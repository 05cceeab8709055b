package capture

import (
	"encoding/binary"
	"sync/atomic"
)

// A record, in a ring and on the wire: a header, then the bytes kept.
//
//	0  u32 length of the record (header and bytes)
//	4  u32 the packet's original length
//	8  u16 link (the session's number of it: Session.Links)
//	10 u16 queue
//	12 u8  direction 13 u8 reason   14 u16 zero
//	16 i64 timestamp, ns since the Unix epoch
const hdrLen = 24

// wrapMark in a record's length says the rest of the ring is padding.
const wrapMark = ^uint32(0)

var le = binary.LittleEndian

// ring is one worker's buffer of one session: single producer (the
// worker), single consumer (the session's reader).
type ring struct {
	// Consumer's, read by the producer when it looks full.
	tail atomic.Uint64
	_    [56]byte
	// Producer's, published once per batch.
	head  atomic.Uint64
	lost  atomic.Uint64
	kept  atomic.Uint64
	_     [40]byte
	phead uint64 // producer's private head
	ptail uint64 // producer's last look at tail
	plost uint64 // lost this batch
	pkept uint64 // kept this batch

	buf  []byte
	mask uint64

	// What the session keeps, copied here so that the producer touches
	// one cache line. links is replaced whole when links come and go
	// (Hub.SetLinks).
	links   atomic.Pointer[linkMap]
	dirs    Dir
	snaplen int
	filter  interface{ RunLen([]byte, int) uint32 }
}

// linkMap gives a forwarder's link index the session's number of the link
// (noLink: not kept). A session numbers a link anew each time one is added
// at an index, so that a record never names another link than the one it
// was taken on, even when an index is reused.
type linkMap [maxLinks]uint16

const (
	maxLinks = 64 // a forwarder's, at most
	noLink   = ^uint16(0)
)

// noLinks keeps nothing: a session's once it ended.
var noLinks = func() *linkMap {
	var m linkMap
	for i := range m {
		m[i] = noLink
	}
	return &m
}()

func newRing(size int, spec Spec) *ring {
	r := &ring{buf: make([]byte, size), mask: uint64(size - 1), dirs: spec.Dirs, snaplen: spec.Snaplen}
	r.links.Store(noLinks)
	if spec.Filter != nil {
		r.filter = spec.Filter
	}
	return r
}

// put writes one record if the session keeps the packet and it fits.
func (r *ring) put(now int64, link, queue int, dir Dir, reason Reason, segs [][]byte, origLen int) {
	if r.dirs&dir == 0 || uint(link) >= maxLinks || len(segs) == 0 {
		return
	}
	id := r.links.Load()[link]
	if id == noLink {
		return
	}
	keep := min(r.snaplen, origLen)
	if r.filter != nil {
		v := r.filter.RunLen(segs[0], origLen)
		if v == 0 {
			return
		}
		keep = min(keep, int(min(v, 1<<30)))
	}
	have := 0
	for _, s := range segs {
		have += len(s)
	}
	keep = min(keep, have)
	n := uint64(hdrLen + keep)
	step := (n + 7) &^ 7
	size := uint64(len(r.buf))
	pos := r.phead & r.mask
	skip := uint64(0)
	if pos+step > size {
		skip = size - pos
	}
	if r.phead+skip+step-r.ptail > size {
		r.ptail = r.tail.Load()
		if r.phead+skip+step-r.ptail > size {
			r.plost++
			return
		}
	}
	if skip > 0 {
		le.PutUint32(r.buf[pos:], wrapMark)
		r.phead += skip
		pos = 0
	}
	b := r.buf[pos : pos+n]
	le.PutUint32(b[0:], uint32(n))
	le.PutUint32(b[4:], uint32(origLen))
	le.PutUint16(b[8:], id)
	le.PutUint16(b[10:], uint16(queue))
	b[12], b[13], b[14], b[15] = byte(dir), byte(reason), 0, 0
	le.PutUint64(b[16:], uint64(now))
	d := b[hdrLen:]
	for _, s := range segs {
		if len(d) == 0 {
			break
		}
		d = d[copy(d, s):]
	}
	r.phead += step
	r.pkept++
}

// publish makes the batch's records visible to the consumer.
func (r *ring) publish() {
	if r.head.Load() != r.phead {
		r.head.Store(r.phead)
	}
	if r.plost != 0 {
		r.lost.Add(r.plost)
		r.plost = 0
	}
	if r.pkept != 0 {
		r.kept.Add(r.pkept)
		r.pkept = 0
	}
}

// read calls fn with each record published and not yet read (the slice
// is valid during the call), up to max records, and frees them. It
// returns how many it read, and false if fn asked to stop.
func (r *ring) read(max int, fn func(rec []byte) bool) (int, bool) {
	head := r.head.Load()
	tail := r.tail.Load()
	n := 0
	ok := true
	for tail != head && n < max {
		pos := tail & r.mask
		l := le.Uint32(r.buf[pos:])
		if l == wrapMark {
			tail += uint64(len(r.buf)) - pos
			continue
		}
		ok = fn(r.buf[pos : pos+uint64(l)])
		tail += (uint64(l) + 7) &^ 7
		n++
		if !ok {
			break
		}
	}
	r.tail.Store(tail)
	return n, ok
}
