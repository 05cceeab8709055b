package fwd

import (
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/txring"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TX lanes: the only code in the package that writes a TX ring or kicks
// one.
//
// Concurrency: a lane has a single owner, the worker that transmits on its
// TX queue (the ring's single producer), which alone writes every field;
// stats readers only load the ring's Kicks and KickErrors atomics
// (kicks), txLanes.kickPolls and the socket's counters (stats,
// counters.go).

// lane is one TX ring and what decides when it is kicked: direct sends
// (pipeline.go) and the merge put packets on it, and the worker's loop
// asks it to kick (txLanes).
type lane struct {
	ring        *txring.Ring
	link, queue int        // its socket's, where a capture records what it sends
	dom         int        // its socket's UMEM domain (domain.go)
	stats       *portStats // its socket's counters
	// bc are the current batch's counts for the lane, touched whether it
	// is on the batch's list (txLanes.touch).
	bc      batchCounts
	touched bool
	// quietUntil (monotonic ns): after a failed kick (link down), no more
	// kicks until then, and the worker sleeps instead of spinning.
	quietUntil int64
	// Slots reserved ahead for a batch (reserve): next is the next to
	// write, left how many remain.
	next, left uint32
	fd         int32 // its socket's; -1 for one in memory, which only a kick moves
}

func newLane(p *port) *lane {
	return &lane{ring: txring.New(p.sock), link: p.link, queue: p.queue, dom: p.dom, stats: &p.stats, fd: int32(p.sock.FD())}
}

// kickBackoff is how long a worker leaves a TX ring alone after a kick
// failed: a down link would otherwise be kicked half a million times a
// second.
const kickBackoff = 5 * time.Millisecond

// free is how many descriptors could be put now, up to want.
func (l *lane) free(want uint32) uint32 { return l.ring.Free(want) }

// reserve claims up to n slots ahead for a batch, so that put writes each
// packet into them without a reservation of its own; publish gives back
// what is left.
func (l *lane) reserve(n uint32) {
	l.left, l.next = l.ring.Reserve(n)
}

// put writes one packet's descriptors, in slots reserved ahead if there
// are any, else in slots of its own. It reports false, the ring untouched,
// when there is no room for all of them.
func (l *lane) put(descs []xsk.Desc) bool {
	n := uint32(len(descs))
	idx := l.next
	switch {
	case l.left >= n:
		l.left -= n
	case l.left > 0:
		return false // never behind slots reserved ahead
	default:
		got, i := l.ring.Reserve(n)
		if got < n {
			l.ring.Cancel(got)
			return false
		}
		idx = i
	}
	for j, d := range descs {
		l.ring.Set(idx+uint32(j), d.Addr, d.Len, d.Options)
	}
	l.next = idx + n
	return true
}

// publish gives back the slots reserved ahead and unused, and makes what
// was put visible to the kernel; its kick is the worker loop's
// (txLanes.endRound), unless the ring is full: then the kernel must take
// some before the next batch has room, so it is kicked now.
func (l *lane) publish() {
	if l.left > 0 {
		l.ring.Cancel(l.left)
		l.left = 0
	}
	l.ring.Publish()
	if l.ring.Full() {
		l.kick()
	}
}

// down reports whether the lane backs off after a failed kick: its link
// is down.
func (l *lane) down() bool { return l.quietUntil != 0 }

// kick wakes the TX ring unless the lane is backing off.
func (l *lane) kick() {
	if l.quiet() {
		return
	}
	l.failed(l.ring.Kick(true))
}

// crowded is what a batch does when the lane has too little room for it:
// kick what the kernel has not taken yet, unless backing off.
func (l *lane) crowded() {
	if l.pending() > 0 {
		l.kick()
	}
}

// flush kicks the TX ring for what it published, unless the lane is
// backing off.
func (l *lane) flush() {
	if l.quiet() {
		return
	}
	l.failed(l.ring.Flush())
}

// kickDown kicks the TX ring while more than floor descriptors wait on
// it, unless the lane is backing off.
func (l *lane) kickDown(floor uint32) {
	if l.quiet() {
		return
	}
	l.failed(l.ring.KickDown(floor))
}

// beforeSleep readies the lane for the worker's sleep. The poll kicks
// what the ring owes (polled), up to what one poll surely sends
// (txring.PollBudget): the rest is kicked now. A kick the kernel could not
// finish (copy mode on an older kernel sends PollBudget descriptors per
// call) is retried rather than left waiting for traffic. When a link is
// down the worker sleeps without polling: everything owed is kicked now.
func (l *lane) beforeSleep(down bool) {
	if down && l.owed() {
		l.flush()
	}
	if down {
		l.kickDown(0)
	} else {
		l.kickDown(txring.PollBudget)
	}
}

// quiet reports whether the lane is still backing off after a failed
// kick, and ends a back-off that has run out.
func (l *lane) quiet() bool {
	if l.quietUntil != 0 && monoNow() < l.quietUntil {
		return true
	}
	l.quietUntil = 0
	return false
}

// failed starts backing off after a kick that returned err, if any.
func (l *lane) failed(err error) {
	if err != nil {
		l.quietUntil = monoNow() + int64(kickBackoff)
	}
}

// owed reports whether published descriptors wait for a kick; polled
// records that the worker's poll(2) passed over the socket, which kicks
// it (txring.Ring.Polled).
func (l *lane) owed() bool { return l.ring.Owed() }
func (l *lane) polled()    { l.ring.Polled() }

// pollable: the lane is owed a kick that a poll of its socket surely
// makes (pollKick).
func (l *lane) pollable() bool {
	return l.owed() && l.fd >= 0 && !l.down() && l.pending() <= txring.PollBudget
}

// pending is what the kernel has not yet taken from the TX ring, inFlight
// what it has not completed.
func (l *lane) pending() uint32  { return l.ring.Pending() }
func (l *lane) inFlight() uint64 { return l.ring.InFlight() }

// reap copies completed addresses into buf and returns how many.
func (l *lane) reap(buf []uint64) int { return l.ring.Reap(buf) }

// kicks are the ring's sendto calls and those that failed; any goroutine.
func (l *lane) kicks() (n, errs uint64) { return l.ring.Kicks.Load(), l.ring.KickErrors.Load() }

// seedKicks adds a predecessor's kick counts (handover.go's seed), before
// the lane's worker starts.
func (l *lane) seedKicks(n, errs uint64) {
	l.ring.Kicks.Add(n)
	l.ring.KickErrors.Add(errs)
}

// txLanes is a worker's TX side: its lanes, the kick it may defer to the
// next round, and the completion scratch.
//
// Concurrency: the worker alone; the lanes' rings are shared with the
// kernel through txring.
type txLanes struct {
	tx []*lane // tx[o]: its TX lane on link o (TX queue q); nil for a removed link
	// txAll is tx without the removed links' holes (links.go).
	txAll []*lane
	own   []*lane // every lane it writes and reaps: tx, and a Handler's reflections
	// touched lists the lanes the current batch wrote (their counts in
	// lane.bc); the batch's end publishes them.
	touched []*lane
	// deferred: the last round published TX descriptors and left their
	// kick to the next one (endRound's roundMoved).
	deferred bool
	// sent are the links the current round sent on, sentBefore those of
	// the last round that moved packets (the worker's reply window).
	sent, sentBefore LinkSet
	reaped           []uint64 // completion scratch, batch long
	// pfds and zero are pollKick's ppoll arguments; kickPolls counts its
	// calls (WorkerStats.KickPolls), read by stats readers.
	pfds      []unix.PollFd
	zero      unix.Timespec
	kickPolls atomic.Uint64
}

func newTXLanes(links, batch int) txLanes {
	return txLanes{tx: make([]*lane, links), touched: make([]*lane, 0, links+1), reaped: make([]uint64, batch)}
}

// touch notes that l (its ring or its counts) was written this batch.
func (t *txLanes) touch(l *lane) {
	if !l.touched {
		l.touched = true
		t.touched = append(t.touched, l)
	}
}

// publishTouched ends a batch on every lane it wrote: unused slots given
// back, the rest submitted (kicked as the round ends: endRound), counts
// added.
func (t *txLanes) publishTouched() {
	for _, l := range t.touched {
		l.touched = false
		t.sent = t.sent.Add(l.link)
		l.publish()
		publish(l.stats, &l.bc)
		l.bc = batchCounts{}
	}
	t.touched = t.touched[:0]
}

// roundEnd is how a worker's round ended, which decides what its lanes
// kick (endRound).
type roundEnd uint8

const (
	// roundMoved: the round moved packets. When it left every RX ring
	// empty, the next round most likely finds nothing, and the worker
	// then polls on (kicking first) or sleeps in poll(2), which kicks the
	// TX rings itself: so the kick waits one round, and a sleep saves a
	// sendto. Otherwise, or when the round before deferred already, the
	// lanes are kicked now.
	roundMoved roundEnd = iota
	// roundPollsOn: nothing moved and the worker polls its rings on (a
	// spin, the reply window, a short hold), or a stand-in ends: every
	// lane owed a kick is kicked.
	roundPollsOn
	// roundSleeps: the worker goes to sleep in poll(2), which kicks what
	// one poll surely sends (lane.beforeSleep): the rest is kicked now,
	// and everything when a link is down, which endRound reports (the
	// worker then sleeps without polling).
	roundSleeps
	// roundPolled: the worker's poll(2) passed over every socket, which
	// kicked what they owed.
	roundPolled
)

// endRound is the one call with which the worker's loop (and a stand-in)
// ends a round on the lanes: it decides every kick the round owes. down
// reports, for roundSleeps, that a link is down.
func (t *txLanes) endRound(how roundEnd, rx *rxSide) (down bool) {
	switch how {
	case roundMoved:
		if !t.deferred && !rx.pending() {
			t.deferred = true
			return false
		}
		t.flush()
	case roundPollsOn:
		t.flush()
	case roundSleeps:
		return t.beforeSleep()
	case roundPolled:
		for _, l := range t.own {
			l.polled()
		}
	}
	return false
}

// flush kicks every lane that has published descriptors owed a kick.
func (t *txLanes) flush() {
	t.deferred = false
	t.pollKick()
	for _, l := range t.own {
		if l.owed() {
			l.flush()
		}
	}
}

// pollKickMin is the fewest lanes owed a kick that pollKick kicks with
// one ppoll: past a few, the sendto calls saved outweigh the poll's walk
// over its file descriptors.
const pollKickMin = 4

// pollKick kicks every lane owed a kick that one poll surely sends
// (txring.Ring.Polled: up to PollBudget pending, its link not down, a
// socket the kernel backs), with one ppoll that returns at once, when at
// least pollKickMin are: a round that sent to many links (a switch's
// pods) pays one system call, not one per link. Lanes the poll could not
// kick (it failed) are kicked one by one.
func (t *txLanes) pollKick() {
	n := 0
	for _, l := range t.own {
		if l.pollable() {
			n++
		}
	}
	if n < pollKickMin {
		return
	}
	t.pfds = t.pfds[:0]
	for _, l := range t.own {
		if l.pollable() {
			t.pfds = append(t.pfds, unix.PollFd{Fd: l.fd, Events: unix.POLLOUT})
			l.polled()
		}
	}
	t.kickPolls.Add(1)
	if _, err := unix.Ppoll(t.pfds, &t.zero, nil); err != nil {
		for _, l := range t.own {
			if slices.ContainsFunc(t.pfds, func(p unix.PollFd) bool { return p.Fd == l.fd }) {
				l.kick()
			}
		}
	}
}

// beforeSleep readies every lane for the worker's sleep (lane.beforeSleep)
// and reports whether one is down: then the worker sleeps without
// polling.
func (t *txLanes) beforeSleep() (down bool) {
	for _, l := range t.own {
		down = down || l.down()
	}
	t.deferred = false
	for _, l := range t.own {
		l.beforeSleep(down)
	}
	return down
}

// inFlight is what the kernel has not completed of the lanes.
func (t *txLanes) inFlight() uint64 {
	var n uint64
	for _, l := range t.own {
		n += l.inFlight()
	}
	return n
}

// unsent appends to buf the addresses still on l's TX ring, submitted
// and not completed (a link being removed: RemoveLink takes them back).
func (l *lane) unsent(buf []uint64) []uint64 { return l.ring.Unsent(buf) }
