// Package fdb is the forwarding database of xdpfwd's switch mode: which
// link each MAC address (per VLAN) was last seen on, learned from the
// source addresses of received frames, aged out, bounded in size.
//
// A Table is a fixed array of 4-way buckets: it never allocates after New
// and takes no lock on the hot path. Learn and Lookup may be called from
// any number of goroutines at once; each slot is two atomic words, so a
// reader sees either the old or the new entry. Two workers learning the
// same new address at the same instant may both insert it; the copies age
// out like any entry. AddStatic is for setup, before traffic.
package fdb

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"sync/atomic"
	"time"
)

// DefaultSize is the entries a Table holds by default.
const DefaultSize = 8192

// refresh is how stale an entry's last-seen time may get before Learn
// writes it again: a frame per packet must not bounce the cache line
// between CPUs.
const refresh = int64(time.Second)

const ways = 4

// A slot's key: MAC in the low 48 bits, VLAN ID in the next 12, and a
// valid bit. Its value: the link in the low 8 bits, a static bit, and the
// last-seen time (monotonic ns >> 8) above.
const (
	keyValid  = 1 << 63
	valStatic = 1 << 8
	timeShift = 9
)

type slot struct {
	key, val atomic.Uint64
}

// Table is a learning FDB. Build it with New.
type Table struct {
	slots []slot
	mask  uint64 // buckets - 1
	age   int64

	learned, moves, evictions, full atomic.Uint64
}

// New returns a table of about size entries (rounded up to a power of two,
// at least 64) whose learned entries expire age after they were last seen.
func New(size int, age time.Duration) *Table {
	n := 64
	for n < size {
		n <<= 1
	}
	return &Table{slots: make([]slot, n), mask: uint64(n/ways - 1), age: int64(age)}
}

// Key packs a MAC address and a VLAN ID; mac must be 6 bytes.
func Key(mac []byte, vlan uint16) uint64 {
	_ = mac[5]
	return uint64(mac[0])<<40 | uint64(mac[1])<<32 | uint64(mac[2])<<24 | uint64(mac[3])<<16 |
		uint64(mac[4])<<8 | uint64(mac[5]) | uint64(vlan&0xfff)<<48 | keyValid
}

func (t *Table) bucket(key uint64) []slot {
	h := key * 0x9e3779b97f4a7c15
	b := (h >> 32) & t.mask
	return t.slots[b*ways : b*ways+ways]
}

func pack(link int, static bool, now int64) uint64 {
	v := uint64(link&0xff) | uint64(now)>>8<<timeShift
	if static {
		v |= valStatic
	}
	return v
}

func unpack(v uint64) (link int, static bool, seen int64) {
	return int(v & 0xff), v&valStatic != 0, int64(v>>timeShift) << 8
}

func (t *Table) live(v uint64, now int64) bool {
	_, static, seen := unpack(v)
	return static || now-seen <= t.age
}

// Lookup returns the link key was last seen on, if it is known and has not
// aged out at now (monotonic ns).
func (t *Table) Lookup(key uint64, now int64) (link int, ok bool) {
	for i := range ways {
		s := &t.bucket(key)[i]
		if s.key.Load() == key {
			v := s.val.Load()
			if t.live(v, now) {
				link, _, _ = unpack(v)
				return link, true
			}
			return 0, false
		}
	}
	return 0, false
}

// Learn records that key was seen on link at now. It reports whether the
// address moved from another link (a MAC flap, or a host that moved). A
// static entry never moves. When the bucket is full of live entries, the
// least recently seen one is evicted.
func (t *Table) Learn(key uint64, link int, now int64) (moved bool) {
	b := t.bucket(key)
	for i := range b {
		s := &b[i]
		if s.key.Load() != key {
			continue
		}
		v := s.val.Load()
		old, static, seen := unpack(v)
		switch {
		case static:
		case old != link && t.live(v, now):
			s.val.Store(pack(link, false, now))
			t.moves.Add(1)
			return true
		case old != link || now-seen > refresh:
			s.val.Store(pack(link, false, now))
		}
		return false
	}
	// Not there: an empty or expired slot, else the stalest learned one.
	victim, stalest := -1, int64(1<<62)
	for i := range b {
		s := &b[i]
		k := s.key.Load()
		if k == 0 {
			victim = i
			break
		}
		v := s.val.Load()
		_, static, seen := unpack(v)
		if static {
			continue
		}
		if !t.live(v, now) {
			victim = i
			break
		}
		if seen < stalest {
			victim, stalest = i, seen
		}
	}
	if victim < 0 {
		t.full.Add(1) // a bucket of static entries
		return false
	}
	s := &b[victim]
	old := s.key.Load()
	if old != 0 && t.live(s.val.Load(), now) {
		t.evictions.Add(1)
	}
	// Value first, so a concurrent Lookup of the new key never sees the
	// previous entry's link under it.
	s.val.Store(pack(link, false, now))
	s.key.Store(key)
	t.learned.Add(1)
	return false
}

// ErrFull is returned by AddStatic when the address's bucket holds only
// static entries.
var ErrFull = errors.New("fdb: bucket full of static entries")

// AddStatic pins mac on vlan to link: never aged, never moved.
func (t *Table) AddStatic(mac net.HardwareAddr, vlan uint16, link int) error {
	if len(mac) != 6 {
		return fmt.Errorf("fdb: static entry %q: not a 6-byte MAC address", mac)
	}
	key := Key(mac, vlan)
	b := t.bucket(key)
	for i := range b {
		if k := b[i].key.Load(); k == 0 || k == key {
			b[i].val.Store(pack(link, true, 0))
			b[i].key.Store(key)
			return nil
		}
	}
	for i := range b {
		if _, static, _ := unpack(b[i].val.Load()); !static {
			b[i].val.Store(pack(link, true, 0))
			b[i].key.Store(key)
			return nil
		}
	}
	return fmt.Errorf("%w: %s vlan %d", ErrFull, mac, vlan)
}

// Entry is one address the table knows.
type Entry struct {
	MAC    net.HardwareAddr `json:"mac"`
	VLAN   uint16           `json:"vlan"`
	Link   int              `json:"link"`
	Static bool             `json:"static"`
	// Age is how long ago the address was last seen (0 for static).
	Age time.Duration `json:"age_ns"`
}

// Entries lists the live entries at now, by VLAN and MAC.
func (t *Table) Entries(now int64) []Entry {
	var out []Entry
	for i := range t.slots {
		s := &t.slots[i]
		k := s.key.Load()
		v := s.val.Load()
		if k == 0 || !t.live(v, now) {
			continue
		}
		link, static, seen := unpack(v)
		mac := net.HardwareAddr{byte(k >> 40), byte(k >> 32), byte(k >> 24), byte(k >> 16), byte(k >> 8), byte(k)}
		e := Entry{MAC: mac, VLAN: uint16(k>>48) & 0xfff, Link: link, Static: static}
		if !static {
			e.Age = time.Duration(now - seen)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].VLAN != out[b].VLAN {
			return out[a].VLAN < out[b].VLAN
		}
		return out[a].MAC.String() < out[b].MAC.String()
	})
	return out
}

// Stats are the table's counters.
type Stats struct {
	Size      int    `json:"size"`
	Learned   uint64 `json:"learned"`   // new entries
	Moves     uint64 `json:"moves"`     // an address seen on another link while its entry was live (MAC flaps)
	Evictions uint64 `json:"evictions"` // live entries pushed out by new ones: the table is too small for the addresses it sees
	Full      uint64 `json:"full"`      // addresses not learned: their bucket was all static entries
}

// Stats returns the counters.
func (t *Table) Stats() Stats {
	return Stats{Size: len(t.slots), Learned: t.learned.Load(), Moves: t.moves.Load(),
		Evictions: t.evictions.Load(), Full: t.full.Load()}
}
