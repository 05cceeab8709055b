// Package fdb is the forwarding database of xdpfwd's switch mode: which
// link each MAC address (per VLAN) was last seen on, learned from the
// source addresses of received frames, aged out, bounded in size.
//
// A Table is a fixed array of 4-way buckets: it never allocates after New
// and takes no lock. Learn and Lookup may be called from any number of
// goroutines at once. An entry's address and link are one 64-bit word,
// written by compare-and-swap and read by one atomic load, so a lookup
// returns a link only together with the address it was learned for, and a
// learn changes a link only if the entry is still the one it read.
// AddStatic and Pin may be called while traffic is learned; a static
// entry is never moved or evicted by learning.
package fdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/bits"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
)

const (
	// DefaultSize is the entries a Table holds by default.
	DefaultSize = 8192
	// MinSize is the smallest table New builds: an entry's word keeps its
	// link in the bits its bucket index leaves free, 8 of them from 256
	// buckets on.
	MinSize = 1024
	// MaxSize is the largest table New builds: 16 Mi entries, 256 MiB.
	MaxSize = 1 << 24
	// MaxLinks is the number of links an entry can name, 0..MaxLinks-1.
	MaxLinks = 64
)

// maxRefresh is how stale an entry's last-seen time may get before Learn
// writes it again: a frame per packet must not bounce the cache line
// between CPUs. Tables with a short age refresh more often (see New).
const maxRefresh = int64(time.Second)

const ways = 4

// fib is 2^64 / φ, the multiplier of Fibonacci hashing; fibInv is its
// inverse mod 2^64, which turns a hash back into its key.
const (
	fib    = 0x9e3779b97f4a7c15
	fibInv = 0xf1de83e19937733d
)

// A slot's word. An address's key (Key) maps one to one to its hash,
// h = key * fib. The top bits of h pick the bucket (Fibonacci hashing: the
// top bits are the well-mixed ones); the rest of h, shifted up by as many
// bits, is the slot's tag, so the bucket and the tag together are the key.
// The low 8 bits the shift frees hold the entry: its link, a static bit
// and a valid bit (0 is an empty slot).
const (
	linkMask  = MaxLinks - 1
	staticBit = 1 << 6
	validBit  = 1 << 7
	valMask   = linkMask | staticBit // what differs between entries of one address
)

// slot is one entry. seen, its last-seen time, is a word of its own: it
// only ever ages the entry, so a reader that pairs a word with a stamp a
// moment older or newer than the word's (the slot changed between the two
// loads) at worst treats a live entry as expired (the frame is flooded) or
// an expired one as live (the frame goes to the link its address was last
// seen on): never another address's link. Stamps only move forward (touch),
// so a writer preempted between its load and its store cannot age an entry
// that others refreshed since.
type slot struct {
	w    atomic.Uint64
	seen atomic.Int64
}

// touch moves the slot's last-seen time forward to now.
func (s *slot) touch(now int64) {
	for {
		old := s.seen.Load()
		if old >= now || s.seen.CompareAndSwap(old, now) {
			return
		}
	}
}

// bucket is a cache line of slots.
type bucket [ways]slot

// Table is a learning FDB. Build it with New.
type Table struct {
	buckets []bucket
	shift   uint // 64 - log2(buckets): h >> shift is the bucket
	bits    uint // log2(buckets): h << bits is the tag
	age     int64
	refresh int64

	learned, moves, evictions, full, conflicts atomic.Uint64
}

// New returns a table of about size entries (rounded up to a power of two,
// at least MinSize) whose learned entries expire age after they were last
// seen. A size above MaxSize panics: callers check what users give.
func New(size int, age time.Duration) *Table {
	if size > MaxSize {
		panic(fmt.Sprintf("fdb: table of %d entries: more than MaxSize (%d)", size, MaxSize))
	}
	n := MinSize
	for n < size {
		n <<= 1
	}
	b := uint(bits.TrailingZeros(uint(n / ways)))
	// An entry is refreshed at least 8 times per age: a host heard from
	// more often than every 7/8 of the age never expires.
	return &Table{buckets: make([]bucket, n/ways), shift: 64 - b, bits: b, age: int64(age),
		refresh: min(maxRefresh, int64(age)/8)}
}

// Key packs a MAC address and a VLAN ID; mac must be 6 bytes.
func Key(mac []byte, vlan uint16) uint64 {
	_ = mac[5]
	return uint64(mac[0])<<40 | uint64(mac[1])<<32 | uint64(mac[2])<<24 | uint64(mac[3])<<16 |
		uint64(mac[4])<<8 | uint64(mac[5]) | uint64(vlan&0xfff)<<48 | keyValid
}

const keyValid = 1 << 63

// find is key's bucket and the word an entry for it has, its link and
// static bit left 0.
func (t *Table) find(key uint64) (b *bucket, want uint64) {
	h := key * fib
	// (& 63: shifts the compiler need not check for 64 and more.)
	return &t.buckets[h>>(t.shift&63)], h<<(t.bits&63) | validBit
}

// Bucket is the index of the bucket the address key is kept in:
// addresses of one bucket share its four slots, so a bucket of four
// static entries has no room for a fifth address. For diagnostics, and
// for tests that fill one.
func (t *Table) Bucket(key uint64) int {
	return int((key * fib) >> (t.shift & 63))
}

func (t *Table) bucket(key uint64) *bucket {
	b, _ := t.find(key)
	return b
}

// keyOf is the key of the entry w in bucket i.
func (t *Table) keyOf(i int, w uint64) uint64 {
	return (uint64(i)<<t.shift | w>>t.bits) * fibInv
}

func (t *Table) live(w uint64, seen, now int64) bool {
	return w&staticBit != 0 || now-seen <= t.age
}

// Lookup returns the link key was last seen on, if it is known and has not
// aged out at now (monotonic ns).
func (t *Table) Lookup(key uint64, now int64) (link int, ok bool) {
	b, want := t.find(key)
	for i := range b {
		s := &b[i]
		if w := s.w.Load(); w&^valMask == want {
			if !t.live(w, s.seen.Load(), now) {
				return 0, false
			}
			return int(w & linkMask), true
		}
	}
	return 0, false
}

// Outcome is what Learn made of a frame's source address.
type Outcome uint8

const (
	// Known: the address was on the link already (or static there).
	Known Outcome = iota
	// Learned: a new entry (or one aged out on another link).
	Learned
	// Moved: the address was live on another link (a MAC flap, or a
	// host that moved) and is on this one now.
	Moved
	// Conflict: the address is static on another link and stays there
	// (counted: Stats.Conflicts).
	Conflict
	// Unlearned: not written: its bucket holds only static entries
	// (Stats.Full), or other workers kept changing it.
	Unlearned
)

// Learn records that key was seen on link (0..MaxLinks-1) at now, and
// says what it made of it. A static entry never moves. When the bucket is
// full of live entries, the least recently seen one is evicted.
//
// Learn changes an entry only with a compare-and-swap of the word it read:
// when another worker changed the slot first, it reads the bucket again,
// and after a few such races leaves this frame unlearned (the next one
// learns it).
func (t *Table) Learn(key uint64, link int, now int64) Outcome {
	// The frame of a known address, on its link, seen lately: most frames.
	// Loads only, and small enough for the rest to stay out of the way.
	b, want := t.find(key)
	for i := range b {
		s := &b[i]
		if w := s.w.Load(); w&^valMask == want {
			if w&staticBit != 0 {
				return t.static(w, link)
			}
			if w == want|uint64(link) && now-s.seen.Load() <= t.refresh {
				return Known
			}
			break
		}
	}
	return t.learn(b, want, link, now)
}

// static is Learn's outcome for an address static in word w, seen on link.
func (t *Table) static(w uint64, link int) Outcome {
	if int(w&linkMask) == link {
		return Known
	}
	t.conflicts.Add(1)
	return Conflict
}

// learn is Learn's path that writes.
func (t *Table) learn(b *bucket, want uint64, link int, now int64) Outcome {
	if uint(link) >= MaxLinks {
		return Unlearned
	}
	nw := want | uint64(link)
retry:
	for range 4 {
		for i := range b {
			s := &b[i]
			w := s.w.Load()
			if w&^valMask != want {
				continue
			}
			seen := s.seen.Load()
			switch {
			case w&staticBit != 0:
				return t.static(w, link)
			case w == nw:
				if now-seen > t.refresh {
					s.touch(now)
				}
			default: // on another link
				if !s.w.CompareAndSwap(w, nw) {
					continue retry
				}
				s.touch(now)
				if now-seen <= t.age {
					t.moves.Add(1)
					return Moved
				}
				return Learned // over its entry aged out on another link
			}
			return Known
		}
		// Not there: an empty or expired slot, else the stalest learned
		// one of the same link, else the stalest learned one. A link
		// that brings more addresses than the table holds (a ToR's
		// worth behind an uplink, or a MAC flood) then churns its own
		// entries, not the other links' hosts, whose loss would turn
		// their traffic into floods to every link.
		victim, vw, stalest, live := -1, uint64(0), int64(1<<63-1), false
		same, sw, sameStalest := -1, uint64(0), int64(1<<63-1)
		for i := range b {
			s := &b[i]
			w := s.w.Load()
			if w == 0 {
				victim, vw, live, same = i, 0, false, -1
				break
			}
			if w&staticBit != 0 {
				continue
			}
			seen := s.seen.Load()
			if now-seen > t.age {
				victim, vw, live, same = i, w, false, -1
				break
			}
			if seen < stalest {
				victim, vw, stalest, live = i, w, seen, true
			}
			if int(w&linkMask) == link && seen < sameStalest {
				same, sw, sameStalest = i, w, seen
			}
		}
		if same >= 0 {
			victim, vw = same, sw
		}
		if victim < 0 {
			t.full.Add(1) // a bucket of static entries
			return Unlearned
		}
		if !b[victim].w.CompareAndSwap(vw, nw) {
			continue
		}
		b[victim].touch(now)
		if live {
			t.evictions.Add(1)
		}
		t.learned.Add(1)
		t.dedup(b, victim, want)
		return Learned
	}
	return Unlearned
}

// dedup removes the other copy of an address that a worker learning it at
// the same instant may have put in another slot of its bucket: a static
// copy stays (pin wrote it meanwhile), else the copy in the lowest slot,
// whoever looks. Lookup and Learn use the first copy, so a second one
// would only resurface, stale, once the first went.
func (t *Table) dedup(b *bucket, mine int, want uint64) {
	for j := range b {
		w := b[j].w.Load()
		if j == mine || w&^valMask != want {
			continue
		}
		drop := j
		if j < mine || w&staticBit != 0 {
			drop, w = mine, b[mine].w.Load()
			if w&^valMask != want || w&staticBit != 0 {
				return // already gone, or pinned since
			}
		}
		if b[drop].w.CompareAndSwap(w, 0) {
			t.learned.Add(^uint64(0)) // one address, learned once
		}
		return
	}
}

// ErrFull is returned by AddStatic and Pin when the address's bucket
// holds only static entries.
var ErrFull = errors.New("fdb: bucket full of static entries")

// ErrInUse is returned by Pin when the address is static on another link.
var ErrInUse = errors.New("fdb: address pinned to another link")

// AddStatic pins mac on vlan to link: never aged, never moved, whatever
// entry the address had (an operator's --fdb-static overrides).
func (t *Table) AddStatic(mac net.HardwareAddr, vlan uint16, link int) error {
	return t.pin(mac, vlan, link, false)
}

// Pin is AddStatic for a port's own address (a switch's port security):
// an address static on another link already is refused (ErrInUse), so
// that no port takes over another's address by claiming it. Pinning it
// to its own link again is a no-op.
func (t *Table) Pin(mac net.HardwareAddr, vlan uint16, link int) error {
	return t.pin(mac, vlan, link, true)
}

// pin writes the static entry while workers may be learning: with a
// compare-and-swap of the word it read, like learn, and then takes out
// any learned copy of the address a worker put in another slot of the
// bucket meanwhile (learn's dedup does the same from its side), so that
// the static entry is the only one of its address.
func (t *Table) pin(mac net.HardwareAddr, vlan uint16, link int, exclusive bool) error {
	b, want, nw, err := t.pinned(mac, vlan, link)
	if err != nil {
		return err
	}
	for range 64 { // each retry follows a learner's write: they are few
		at, aw, err := slotFor(b, want, nw, exclusive)
		if err != nil {
			return pinError(err, aw, mac, vlan)
		}
		if aw == nw {
			return nil
		}
		if !b[at].w.CompareAndSwap(aw, nw) {
			continue
		}
		for j := range b {
			if w := b[j].w.Load(); j != at && w&^valMask == want && w&staticBit == 0 {
				b[j].w.CompareAndSwap(w, 0)
			}
		}
		return nil
	}
	return fmt.Errorf("fdb: static entry %s vlan %d: the bucket kept changing", mac, vlan)
}

// pinned is the bucket of mac on vlan, the word its entries have, and the
// word of its static entry on link.
func (t *Table) pinned(mac net.HardwareAddr, vlan uint16, link int) (b *bucket, want, nw uint64, err error) {
	if len(mac) != 6 {
		return nil, 0, 0, fmt.Errorf("fdb: static entry %q: not a 6-byte MAC address", mac)
	}
	if uint(link) >= MaxLinks {
		return nil, 0, 0, fmt.Errorf("fdb: static entry %s: link %d: want 0..%d", mac, link, MaxLinks-1)
	}
	b, want = t.find(Key(mac, vlan))
	return b, want, want | staticBit | uint64(link), nil
}

// slotFor is the slot a static entry nw (of an address whose entries are
// want) goes in, and the word there now: the address's own slot, else an
// empty one, else the stalest learned one. Exclusive, an address static
// on another link is ErrInUse (aw its entry); a bucket of other static
// entries is ErrFull.
func slotFor(b *bucket, want, nw uint64, exclusive bool) (at int, aw uint64, err error) {
	at, stalest := -1, int64(1<<63-1)
	for i := range b {
		w := b[i].w.Load()
		if w&^valMask == want {
			if w&staticBit != 0 && w != nw && exclusive {
				return 0, w, ErrInUse
			}
			return i, w, nil
		}
		switch {
		case w == 0:
			if aw != 0 || at < 0 {
				at, aw, stalest = i, 0, -1<<63
			}
		case w&staticBit == 0:
			if seen := b[i].seen.Load(); seen < stalest {
				at, aw, stalest = i, w, seen
			}
		}
	}
	if at < 0 {
		return 0, 0, ErrFull
	}
	return at, aw, nil
}

// pinError is slotFor's err for mac on vlan, aw the entry it found.
func pinError(err error, aw uint64, mac net.HardwareAddr, vlan uint16) error {
	if errors.Is(err, ErrInUse) {
		return fmt.Errorf("%w: %s vlan %d is static on link %d", err, mac, vlan, aw&linkMask)
	}
	return fmt.Errorf("%w: %s vlan %d", err, mac, vlan)
}

// CanPin says whether Pin(mac, vlan, link) would succeed now, writing
// nothing: an address static on another link is ErrInUse, a bucket of
// other static entries ErrFull. A link of -1 is one not added yet, on
// which no address is static.
func (t *Table) CanPin(mac net.HardwareAddr, vlan uint16, link int) error {
	b, want, nw, err := t.pinned(mac, vlan, max(link, 0))
	if err != nil {
		return err
	}
	if link < 0 {
		nw = 0 // the word of no static entry
	}
	if _, aw, err := slotFor(b, want, nw, true); err != nil {
		return pinError(err, aw, mac, vlan)
	}
	return nil
}

// Unpin removes the static entry of mac on vlan if it is on link, and
// reports whether it did: for a pin given up (a port's address taken
// back by the link it is heard on).
func (t *Table) Unpin(mac net.HardwareAddr, vlan uint16, link int) bool {
	b, _, nw, err := t.pinned(mac, vlan, link)
	if err != nil {
		return false
	}
	for i := range b {
		if b[i].w.Load() == nw && b[i].w.CompareAndSwap(nw, 0) {
			return true
		}
	}
	return false
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

// Forget removes every entry on link, learned or static, and returns how
// many it removed: for a link taken out of a running switch, so that no
// frame is sent towards it, nor towards a link given its index later. An
// entry learned on link at the same instant by a worker still reading it
// may stay: the caller forgets once nothing arrives on link any more.
func (t *Table) Forget(link int) int {
	n := 0
	for i := range t.buckets {
		for j := range t.buckets[i] {
			s := &t.buckets[i][j]
			if w := s.w.Load(); w != 0 && int(w&linkMask) == link && s.w.CompareAndSwap(w, 0) {
				n++
			}
		}
	}
	return n
}

// All yields the live entries at now, in table order. To spare an
// allocation per entry, every Entry's MAC is the same buffer, overwritten
// by the next: copy it to keep it.
func (t *Table) All(now int64) iter.Seq[Entry] {
	return func(yield func(Entry) bool) {
		mac := make(net.HardwareAddr, 6)
		for i := range len(t.buckets) * ways {
			s := &t.buckets[i/ways][i%ways]
			w := s.w.Load()
			seen := s.seen.Load()
			if w == 0 || !t.live(w, seen, now) {
				continue
			}
			k := t.keyOf(i/ways, w)
			mac[0], mac[1], mac[2], mac[3], mac[4], mac[5] = byte(k>>40), byte(k>>32), byte(k>>24), byte(k>>16), byte(k>>8), byte(k)
			e := Entry{MAC: mac, VLAN: uint16(k>>48) & 0xfff, Link: int(w & linkMask), Static: w&staticBit != 0}
			if !e.Static {
				e.Age = time.Duration(max(0, now-seen))
			}
			if !yield(e) {
				return
			}
		}
	}
}

// Len is the number of live entries at now: one pass over the table,
// without allocating.
func (t *Table) Len(now int64) int {
	n := 0
	for i := range t.buckets {
		for j := range ways {
			s := &t.buckets[i][j]
			if w := s.w.Load(); w != 0 && t.live(w, s.seen.Load(), now) {
				n++
			}
		}
	}
	return n
}

// Entries lists the live entries at now, by VLAN and MAC.
func (t *Table) Entries(now int64) []Entry {
	var out []Entry
	for e := range t.All(now) {
		e.MAC = slices.Clone(e.MAC)
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int {
		if a.VLAN != b.VLAN {
			return int(a.VLAN) - int(b.VLAN)
		}
		return slices.Compare(a.MAC, b.MAC)
	})
	return out
}

// AppendJSON appends e as JSON, its MAC address as text
// (aa:bb:cc:dd:ee:ff), without allocating.
func (e Entry) AppendJSON(b []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, `{"mac":"`...)
	for i, c := range e.MAC {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, hex[c>>4], hex[c&0xf])
	}
	b = append(b, `","vlan":`...)
	b = strconv.AppendUint(b, uint64(e.VLAN), 10)
	b = append(b, `,"link":`...)
	b = strconv.AppendInt(b, int64(e.Link), 10)
	b = append(b, `,"static":`...)
	b = strconv.AppendBool(b, e.Static)
	b = append(b, `,"age_ns":`...)
	b = strconv.AppendInt(b, int64(e.Age), 10)
	return append(b, '}')
}

// MarshalJSON writes the MAC address as text, not as base64 bytes.
func (e Entry) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil), nil }

// UnmarshalJSON reads what MarshalJSON writes.
func (e *Entry) UnmarshalJSON(b []byte) error {
	type plain Entry // without the methods
	var v struct {
		plain
		MAC string `json:"mac"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = Entry(v.plain)
	if v.MAC == "" {
		e.MAC = nil
		return nil
	}
	mac, err := net.ParseMAC(v.MAC)
	if err != nil {
		return fmt.Errorf("fdb: entry: %w", err)
	}
	e.MAC = mac
	return nil
}

// Stats are the table's counters.
type Stats struct {
	Size      int    `json:"size"`
	Learned   uint64 `json:"learned"`   // new entries
	Moves     uint64 `json:"moves"`     // an address seen on another link while its entry was live (MAC flaps)
	Evictions uint64 `json:"evictions"` // live entries pushed out by new ones: the table is too small for the addresses it sees
	Full      uint64 `json:"full"`      // addresses not learned: their bucket was all static entries
	Conflicts uint64 `json:"conflicts"` // frames from a link whose source address is static on another: a pod's address heard elsewhere, or a spoofer behind a trusted link
}

// Stats returns the counters.
func (t *Table) Stats() Stats {
	return Stats{Size: len(t.buckets) * ways, Learned: t.learned.Load(), Moves: t.moves.Load(),
		Evictions: t.evictions.Load(), Full: t.full.Load(), Conflicts: t.conflicts.Load()}
}
