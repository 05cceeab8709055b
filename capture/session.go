package capture

import (
	"slices"
	"sync"
)

// Session is one open capture: a ring per worker.
type Session struct {
	hub   *Hub
	spec  Spec
	rings []*ring
	size  int // of each ring
	next  int // the ring Read starts from, so that none starves

	// The hub's mu guards these: the session's number of each link it
	// has kept (by index in Hub.Links at Open, then in the order they
	// were added: Links), the map the rings have of it, and whether it
	// stopped keeping anything.
	names   []string
	links   *linkMap
	stopped bool

	once sync.Once
	done chan struct{}
	err  error // why done was closed
}

// Done is closed when the session ends by itself: the forwarder stops
// (Hub.Close), or a link it was opened for is removed (Hub.SetLinks). The
// reader should read what is left, then Close; Err says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the session ended (ErrClosed, a *LinkGoneError), once Done is
// closed; nil before.
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

func (s *Session) finish(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.done)
	})
}

// Links names the links by the numbers the session's records give them
// (Record.Link): at first Hub.Links as it was at Open ("" for an index
// no link had), then each link added since, if the session keeps every
// link. A link removed and added again has a number for each time.
func (s *Session) Links() []string {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return slices.Clone(s.names)
}

// Read calls fn with up to max records published by the workers (a
// record's bytes are valid during the call; Parse reads them) and frees
// them. It returns how many it read; fn returning false stops it.
func (s *Session) Read(max int, fn func(rec []byte) bool) int {
	total := 0
	for i := range s.rings {
		r := s.rings[(s.next+i)%len(s.rings)]
		n, ok := r.read(max-total, fn)
		total += n
		if !ok || total >= max {
			break
		}
	}
	s.next++
	return total
}

// Lost is how many records did not fit the rings.
func (s *Session) Lost() uint64 {
	var n uint64
	for _, r := range s.rings {
		n += r.lost.Load()
	}
	return n
}

// Kept is how many records the workers wrote to the rings.
func (s *Session) Kept() uint64 {
	var n uint64
	for _, r := range s.rings {
		n += r.kept.Load()
	}
	return n
}

// Close stops the workers writing to the session. What they wrote before
// is still there to Read; Lost is final.
func (s *Session) Close() {
	s.hub.detach(s)
}

// Record is one captured packet.
type Record struct {
	Link    int // the session's number of the link (Session.Links)
	Queue   int
	Dir     Dir
	Reason  Reason
	Time    int64 // ns since the Unix epoch
	OrigLen int
	Data    []byte
}

// Parse reads a record written by a worker (or received by a Client).
// Data aliases rec.
func Parse(rec []byte) (Record, bool) {
	if len(rec) < hdrLen || int(le.Uint32(rec)) != len(rec) {
		return Record{}, false
	}
	return Record{
		OrigLen: int(le.Uint32(rec[4:])),
		Link:    int(le.Uint16(rec[8:])),
		Queue:   int(le.Uint16(rec[10:])),
		Dir:     Dir(rec[12]),
		Reason:  Reason(rec[13]),
		Time:    int64(le.Uint64(rec[16:])),
		Data:    rec[hdrLen:],
	}, true
}
