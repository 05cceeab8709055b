package capture

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfwd/xdpfwd/cbpf"
)

// Hub is a forwarder's capture point: one Point per worker, and the open
// sessions.
type Hub struct {
	links  []string
	points []*Point

	mu       sync.Mutex
	sessions []*Session
	opening  int // sessions between their checks and their publication
	bytes    int // ring bytes per worker of those and the open sessions
	closed   bool
}

// NewHub returns a hub for workers workers forwarding between links.
func NewHub(workers int, links []string) *Hub {
	h := &Hub{links: slices.Clone(links)}
	for range workers {
		h.points = append(h.points, &Point{})
	}
	return h
}

// Links names the links, by index ("" for an index a removed link left).
func (h *Hub) Links() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.links)
}

// SetLinks names the links again, after links were added or removed while
// forwarding ("" at a removed link's index). Call it after a removed
// link's last packet was offered and before an added link's first, so
// that an index reused by another link is never recorded under the
// former one's name:
//
//   - a session of every link numbers an added link (Session.Links) and
//     keeps its packets from then on; it stops keeping a removed one's;
//   - a session of chosen links ends when one of them goes (Done, and Err
//     is a *LinkGoneError): as tcpdump ends when its interface
//     disappears, rather than go on without it or with another link at
//     its index;
//   - sessions opened from then on may select the added links.
func (h *Hub) SetLinks(links []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.links
	h.links = slices.Clone(links)
	for _, s := range h.sessions {
		s.relinkLocked(old, h.links)
	}
}

// RenameLink names link i anew: the same link (the forwarder follows a
// renamed link by its ifindex), so every session keeps it, under the
// number and name it gave it at its start (a pcapng interface is named
// once), as tcpdump goes on capturing an interface renamed under it;
// sessions opened from then on know it by its new name.
func (h *Hub) RenameLink(i int, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i >= 0 && i < len(h.links) && h.links[i] != "" {
		h.links[i] = name
	}
}

// LinkGoneError ends a session of chosen links when one of them is
// removed from the forwarder.
type LinkGoneError struct{ Link string }

func (e *LinkGoneError) Error() string {
	return fmt.Sprintf("link %s was removed from the forwarder (xdpfwd link del, or its interface deleted)", e.Link)
}

// errTooManyLinks ends a session of every link that has numbered as many
// links as a record can name.
var errTooManyLinks = fmt.Errorf("capture: %d links came and went while it ran: start another capture", noLink)

// mapLinksLocked numbers the links s keeps at its start: each by its
// index, the numbers Hub.Links gives.
func (s *Session) mapLinksLocked(links []string) error {
	m := *noLinks
	if len(s.spec.Links) == 0 {
		for i, name := range links[:min(len(links), maxLinks)] {
			if name != "" {
				m[i] = uint16(i)
			}
		}
	}
	for _, l := range s.spec.Links {
		if l < 0 || l >= len(links) || l >= maxLinks || links[l] == "" {
			return fmt.Errorf("capture: link %d of %d", l, len(links))
		}
		m[l] = uint16(l)
	}
	s.names = slices.Clone(links)
	s.setLinks(&m)
	return nil
}

// relinkLocked follows a change of the forwarder's links from old to cur.
func (s *Session) relinkLocked(old, cur []string) {
	if s.stopped {
		return
	}
	m := *s.links
	for i := range min(max(len(old), len(cur)), maxLinks) {
		was, now := at(old, i), at(cur, i)
		if was == now {
			continue
		}
		if m[i] != noLink {
			if len(s.spec.Links) > 0 {
				s.stopLocked(&LinkGoneError{Link: was})
				return
			}
			m[i] = noLink
		}
		if now != "" && len(s.spec.Links) == 0 {
			if len(s.names) >= int(noLink) {
				s.stopLocked(errTooManyLinks)
				return
			}
			m[i] = uint16(len(s.names))
			s.names = append(s.names, now)
		}
	}
	if m != *s.links {
		s.setLinks(&m)
	}
}

func at(links []string, i int) string {
	if i < len(links) {
		return links[i]
	}
	return ""
}

// setLinks gives the workers a new map (whole: a batch under way reads
// either).
func (s *Session) setLinks(m *linkMap) {
	s.links = m
	for _, r := range s.rings {
		r.links.Store(m)
	}
}

// stopLocked ends s with err: it keeps nothing more; its reader reads
// what is left and closes it.
func (s *Session) stopLocked(err error) {
	s.stopped = true
	s.setLinks(noLinks)
	s.finish(err)
}

// Point is worker w's tap.
func (h *Hub) Point(w int) *Point { return h.points[w] }

// Point is where one worker hands packets to the open sessions.
type Point struct {
	// cur is the set the worker's next batch uses: nil while nobody
	// captures. Replaced whole (copy on write) by Open and Close.
	cur atomic.Pointer[Set]
	// active is the set the worker's current batch writes to (nil between
	// batches), so that Close knows when a ring is no longer written.
	active atomic.Pointer[Set]
}

// Set is one worker's rings of the open sessions, as one batch sees them.
type Set struct {
	p     *Point
	rings []*ring
	now   int64
}

// ErrClosed: the forwarder is stopping.
var ErrClosed = errors.New("capture: the forwarder is stopping")

// ErrHandedOver: the forwarder handed its datapath to a successor (an
// xdpfwd run --takeover), which serves the control socket now.
var ErrHandedOver = errors.New("capture: the daemon handed its datapath to its successor; capture again to go on")

// Spec selects what a session keeps.
type Spec struct {
	// Links are link indexes (Hub.Links); none: every link, those added
	// later included (SetLinks).
	Links []int
	// Dirs: what to keep (0: All).
	Dirs Dir
	// Snaplen bounds the bytes kept of a packet (0: 262144).
	Snaplen int
	// Filter, if not nil, keeps the packets it accepts, of which the
	// bytes it returns.
	Filter *cbpf.Program
	// Buffer is each worker's ring, in bytes (0: DefaultBuffer); rounded
	// up to a power of two, at least twice the largest record.
	Buffer int
}

const (
	DefaultSnaplen = 262144
	DefaultBuffer  = 4 << 20
	// MaxBuffer bounds the rings of a worker over all open sessions.
	MaxBuffer = 1 << 30
)

// What captures may cost a worker is bounded, for each packet while any
// is open: at most MaxSessions filters run (each on every packet the
// session's links and directions select, before the ring-full check), of
// at most MaxFilter instructions each (cBPF jumps only forward: a run
// executes each at most once). tcpdump compiles "udp port 53" to 20, 21
// hosts or-ed together to 74.
const (
	MaxSessions = 4
	MaxFilter   = 256
)

// Open starts a session. Its rings are written from the workers' next
// batches on.
func (h *Hub) Open(spec Spec) (*Session, error) {
	if spec.Dirs == 0 {
		spec.Dirs = All
	}
	if spec.Snaplen <= 0 {
		spec.Snaplen = DefaultSnaplen
	}
	if spec.Buffer <= 0 {
		spec.Buffer = DefaultBuffer
	}
	if spec.Buffer > MaxBuffer {
		return nil, fmt.Errorf("capture: buffer of %d bytes, at most %d", spec.Buffer, MaxBuffer)
	}
	names := h.Links()
	for _, l := range spec.Links {
		if l < 0 || l >= len(names) || l >= maxLinks || names[l] == "" {
			return nil, fmt.Errorf("capture: link %d of %d", l, len(names))
		}
	}
	if spec.Filter != nil && len(spec.Filter.Instructions()) > MaxFilter {
		return nil, fmt.Errorf("capture: a filter of %d instructions, at most %d", len(spec.Filter.Instructions()), MaxFilter)
	}
	size := 1
	for size < spec.Buffer || size < 2*(hdrLen+spec.Snaplen+8) {
		size <<= 1
	}
	// Check and reserve before allocating: the rings may be a GiB each.
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return nil, ErrClosed
	case len(h.sessions)+h.opening >= MaxSessions:
		h.mu.Unlock()
		return nil, fmt.Errorf("capture: %d captures open, at most %d at once", MaxSessions, MaxSessions)
	case h.bytes+size > MaxBuffer:
		used := h.bytes
		h.mu.Unlock()
		return nil, fmt.Errorf("capture: a buffer of %d bytes per worker: the captures open hold %d of the %d each worker may", size, used, MaxBuffer)
	}
	h.opening++
	h.bytes += size
	h.mu.Unlock()
	s := &Session{hub: h, spec: spec, size: size, done: make(chan struct{})}
	for range h.points {
		s.rings = append(s.rings, newRing(size, spec))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opening--
	if h.closed {
		h.bytes -= size
		return nil, ErrClosed
	}
	// The links as they are now, under the lock SetLinks takes: none
	// changes unseen between this and the session's publication.
	if err := s.mapLinksLocked(h.links); err != nil {
		h.bytes -= size
		return nil, err
	}
	h.sessions = append(h.sessions, s)
	h.publishLocked()
	return s, nil
}

// publishLocked gives every point a new set of the open sessions' rings.
func (h *Hub) publishLocked() {
	for w, p := range h.points {
		if len(h.sessions) == 0 {
			p.cur.Store(nil)
			continue
		}
		set := &Set{p: p}
		for _, s := range h.sessions {
			set.rings = append(set.rings, s.rings[w])
		}
		p.cur.Store(set)
	}
}

// detach takes s out of the workers' sets and waits, briefly, until no
// batch writes to its rings.
func (h *Hub) detach(s *Session) {
	h.mu.Lock()
	i := slices.Index(h.sessions, s)
	if i >= 0 {
		h.sessions = slices.Delete(h.sessions, i, i+1)
		h.bytes -= s.size
		h.publishLocked()
	}
	h.mu.Unlock()
	if i < 0 {
		return
	}
	// A batch lasts microseconds; a worker that is stuck must not hang
	// the caller (the rings are garbage collected, a late write is
	// harmless but not read).
	deadline := time.Now().Add(time.Second)
	for w, p := range h.points {
		for {
			a := p.active.Load()
			if a == nil || !slices.Contains(a.rings, s.rings[w]) || time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// Close ends every session (their readers see Done) and refuses new ones.
func (h *Hub) Close() { h.End(ErrClosed) }

// End is Close, with why as the sessions' Err.
func (h *Hub) End(why error) {
	h.mu.Lock()
	h.closed = true
	ss := slices.Clone(h.sessions)
	h.mu.Unlock()
	for _, s := range ss {
		s.finish(why)
	}
}

// Begin starts a worker's batch: nil while nobody captures, after one
// atomic load. Otherwise the batch's set, its timestamp read once.
func (p *Point) Begin() *Set {
	if s := p.cur.Load(); s != nil {
		return p.begin(s)
	}
	return nil // inlined into the worker: one load and a branch
}

func (p *Point) begin(s *Set) *Set {
	for {
		// Announce the set before writing to it, then check it is still
		// current: a Close that replaced it either sees it active and
		// waits, or the worker sees the new set.
		p.active.Store(s)
		n := p.cur.Load()
		if n == s {
			break
		}
		if n == nil {
			p.active.Store(nil)
			return nil
		}
		s = n
	}
	s.now = time.Now().UnixNano()
	return s
}

// End publishes what the batch wrote to every ring.
func (s *Set) End() {
	for _, r := range s.rings {
		r.publish()
	}
	s.p.active.Store(nil)
}

// Packet offers one packet to the sessions: segs are its bytes (one slice
// per buffer, origLen in all), seen on (link, queue), with a drop reason
// when dir is Drop. It copies what a session keeps; it never retains segs.
func (s *Set) Packet(link, queue int, dir Dir, reason Reason, segs [][]byte, origLen int) {
	for _, r := range s.rings {
		r.put(s.now, link, queue, dir, reason, segs, origLen)
	}
}
