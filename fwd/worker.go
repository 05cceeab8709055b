package fwd

import (
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// pollTimeout bounds how long a stop request waits for an idle worker.
	pollTimeout = 20 * time.Millisecond
	// drainTimeout bounds how long a stopping worker waits for the kernel
	// to complete what it already submitted.
	drainTimeout = time.Second
)

// worker is one forwarding thread: it owns the RX queues q, q+W, q+2W, …
// of every link (W workers) and TX queue q of every link. It is made of
// parts, each in the file named for it with a note on who writes what it
// shares:
//
//   - rx, an rxSide (rxside.go): the RX rings it reads, their frames and
//     fill rings;
//   - lanes, a txLanes (lane.go): the TX lanes it writes, their kicks and
//     completions;
//   - layout, a txLayout (layout.go): where a packet's bytes go on the way
//     out;
//   - flows, a flowOrder (floworder.go): the flow table's TX queue choice
//     and the ordering across RX queues;
//   - verdicts (verdicts.go): a Handler's batch;
//   - the loop counters (loopStats, counters.go), and the capture hooks
//     (tap, capture.go).
//
// A part that has a file of its own is named, so that a call site says
// who owns what it touches: w.rx.ports, w.lanes.endRound, w.flows.order,
// not a w.X that reads as the worker's own. The loop counters alone stay
// embedded: this file's loop is their only writer, so the worker is their
// owner, and a name would add nothing to w.sleeps for the stats that read
// them. A part's own fields are named for what they are within it, so
// that nothing stutters (w.rx.ports, not w.rx.rx; w.flows.table, not
// w.flows.flows).
//
// What is left here is the loop: when to run a round, spin or sleep.
type worker struct {
	q        int
	rx       rxSide
	lanes    txLanes
	flows    flowOrder
	verdicts verdicts
	tap      tapState // hands packets to xdpfwd capture (capture.go)
	// umems are its parts of each UMEM domain: frame caches and builders
	// (domain.go).
	umems workerDomains
	loopStats
	// chg takes the links added and removed while running (links.go).
	chg linkChanges

	// wake lets other workers rouse this one from poll(2) when they hand
	// it packets (handoff.go); written only while it sleeps.
	wake *waker
	// lease says who runs its rounds: itself, or while it sleeps in
	// poll(2) another worker standing in for it (standin.go).
	lease lease
	// memRX: some RX socket has no file descriptor for poll(2) to wait
	// on (an Env's in memory, which rouses the worker through wake).
	memRX bool
	waits waitSet // what its sleep waits on (waitset.go)
	cpu   int     // pinned CPU, or -1
	// spin decides whether to poll the rings once they ran dry before
	// sleeping in poll(2) (spin.go); coalesce (ns) is how long at least.
	spin     spinner
	coalesce int64
	// busyPoll: each empty round runs the RX links' NAPI (recvfrom).
	busyPoll bool
	// rescheduled is when the worker last passed through the Go
	// scheduler (reschedule; monotonic ns).
	rescheduled int64
	// stopping is run's stop flag (Forwarder.stop), for sleep's last look;
	// handed is Forwarder.handedOver: a successor took the rings.
	stopping *atomic.Bool
	handed   *atomic.Bool

	// layout comes last: its page meter is some 100 KiB, and the fields
	// every packet reads (flows, lanes, rx) stay in the worker's first
	// cache lines instead of 100 KiB away, behind it.
	layout txLayout
}

func newWorker(f *Forwarder, q int) (*worker, error) {
	wk, err := newWaker()
	if err != nil {
		return nil, fmt.Errorf("worker %d: %w", q, err)
	}
	w := &worker{
		q:        q,
		rx:       newRXSide(f.doms[0].region.Mem(), f.plan.FrameSize, f.plan.Batch),
		umems:    f.newWorkerDomains(),
		layout:   newTXLayout(&f.live.inlineMax),
		verdicts: newVerdicts(f.handler, int(f.plan.RingSize)),
		wake:     wk,
		cpu:      -1,
		spin:     newSpinner(f.plan.Spin),
		coalesce: int64(f.plan.Coalesce),
		busyPoll: f.plan.BusyPoll > 0,
		handed:   &f.handover.handedOver,
	}
	w.lanes = newTXLanes(len(f.ports), f.plan.Batch)
	if len(f.plan.CPUs) > 0 {
		w.cpu = f.plan.CPUs[q%len(f.plan.CPUs)]
	}
	for i := range f.ports {
		if len(f.ports[i]) == 0 {
			continue // a removed link's hole (an adopted forwarder's)
		}
		w.chg.live = w.chg.live.Add(i)
		w.lanes.tx[i] = f.ports[i][q].tx
		for qq := q; qq < len(f.ports[i]); qq += f.plan.Queues {
			p := f.ports[i][qq]
			w.rx.add(p, w)
			if p.tx != nil {
				w.lanes.own = append(w.lanes.own, p.tx) // a TX lane, or a Handler's reflections
			}
		}
	}
	w.pollSet()
	w.lanes.txAll = slices.Clone(w.lanes.tx)
	return w, nil
}

func (w *worker) run(stop *atomic.Bool) {
	// One OS thread per worker: its rings are touched from one CPU at a
	// time, and poll(2) blocks only this thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if w.cpu >= 0 {
		var set unix.CPUSet
		set.Set(w.cpu)
		// Best effort: a CPU outside the process's cpuset is refused,
		// and the worker runs unpinned (New checked the list).
		unix.SchedSetaffinity(0, &set)
	}

	// Timed sleeps (a held packet's turn) should end on time, not up to
	// the default 50 µs timer slack later.
	unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0)

	w.stopping = stop
	w.setRunning(true)
	idle := 0
	spinning := false
	// A dry spell lasts from the round that found the rings empty (dry,
	// monotonic ns; 0 while packets come) to the one that finds a packet,
	// through spins and sleeps; it is polled until until at least (the
	// spinner's reply window). coalesce counts from the last round that
	// found them empty (empty).
	var dry, until, empty int64
	for !stop.Load() {
		if w.chg.pending.Load() { // links added or removed (links.go)
			w.takeChanges()
			if stop.Load() {
				break // parked when a successor took over (handover.go)
			}
		}
		w.progress.rounds.Add(1)
		n, held := w.round()
		if n > 0 {
			if spinning {
				w.spin.caught()
			}
			if dry != 0 {
				w.endSpell(monoNow(), dry, until)
				dry = 0
			}
			w.spin.moved(n)
			w.lanes.sentBefore, w.lanes.sent = w.lanes.sent, 0
			idle, spinning = 0, false
			w.lanes.endRound(roundMoved, &w.rx)
			continue
		}
		if held > 0 {
			// Packets held for ordering wait on the watermark slack (a
			// time: spin through a short wait, sleep through a longer
			// one, never past the turn) or on another worker's progress.
			// That worker may share this CPU, so never spin for it: a
			// short sleep gives it the CPU (it wakes us if it hands us
			// more).
			switch due := time.Duration(w.flows.holdDue - w.flows.clock()); {
			case due > holdSpin:
				w.sleep(min(due, holdPoll))
			case due <= 0:
				w.sleep(holdYield)
			default:
				w.lanes.endRound(roundPollsOn, &w.rx)
			}
			continue
		}
		if w.busyPoll {
			for _, p := range w.rx.ports {
				p.sock.WakeRX()
			}
		}
		// Spin while spin says spinning pays, and until coalesce has
		// passed since the rings ran dry: what comes meanwhile costs no
		// wake-up. What the last round published is kicked first.
		if idle++; idle == 1 {
			spinning = w.spin.start()
			empty = monoNow()
			if dry == 0 {
				dry, until = empty, w.spin.dry(empty)
			}
		}
		if spinning && w.spin.more(idle) || w.coalesce > 0 && monoNow()-empty < w.coalesce {
			w.lanes.endRound(roundPollsOn, &w.rx)
			continue
		}
		// The reply window, then the window new work due at a steady
		// interval comes in (spin.go's cadence), which may first need a
		// sleep until it opens. Both are long enough for another thread
		// on this CPU (the answering one, perhaps) to want it.
		now := monoNow()
		poll, wait := until > dry && now < until, int64(0)
		if !poll {
			poll, wait = w.spin.expect(now)
		}
		if poll {
			w.lanes.endRound(roundPollsOn, &w.rx)
			if idle%replyYieldRounds == 0 {
				yield()
			}
			continue
		}
		if spinning {
			w.spin.missed()
		}
		idle, spinning = 0, false
		if wait > 0 {
			due := monoNow() + wait
			w.sleep(time.Duration(wait))
			w.spin.woke(due, monoNow())
			// Into the window without a short spin: what the window
			// catches is the cadence's, not a sign that spinning pays
			// (a trickle's worker goes on sleeping right after it
			// forwards, and its poll(2) sends what it forwarded).
			idle = 1
			continue
		}
		w.sleep(pollTimeout)
	}
	// Drained while still taking link changes: a caller parks it only
	// at a round boundary, never mid-drain. Not when a successor took
	// over: the rings are its.
	if !w.handedOver() {
		w.drain()
	}
	w.setRunning(false)
}

// reschedule passes the worker's goroutine through the Go scheduler
// once every rescheduleEvery, before a sleep. A locked goroutine that
// never does keeps its P's schedtick still: after 10 ms sysmon counts it
// a hog, retakes its P at its next system call (the ppoll returns to no
// P: a locked thread's hand-off, two context switches) and, having
// retaken one, polls every 20 µs again: about 2,000 wake-ups a second of
// the forwarder's CPU at 500 requests/s. A Gosched costs the same
// hand-off, once per rescheduleEvery at most, at a moment the worker
// was going to sleep.
func (w *worker) reschedule() {
	if now := monoNow(); now-w.rescheduled > int64(rescheduleEvery) {
		w.rescheduled = now
		runtime.Gosched()
	}
}

// rescheduleEvery is under sysmon's 10 ms (forcePreemptNS).
const rescheduleEvery = 5 * time.Millisecond

// handedOver reports whether a successor took the forwarder's rings.
func (w *worker) handedOver() bool { return w.handed != nil && w.handed.Load() }

// round is one pass over the worker's rings: refill, forward, merge, reap.
// It returns the packets it moved and the descriptors it holds for order.
func (w *worker) round() (n, held int) {
	ports := w.rx.roundPorts(w.waits.gen, w.flows.order != nil)
	refill(ports, w.rx.batch)
	w.rx.from = 0
	for _, p := range ports {
		if k := w.forwardAll(p); k > 0 {
			n += k
			w.rx.from = w.rx.from.Add(p.link)
			if p.cold {
				w.waits.warmPort(p, monoNow(), w.wake.fd)
			}
		}
	}
	if w.flows.order != nil {
		var m int
		m, held = w.merge()
		n += m
	}
	w.reapAll()
	w.umems.publish()
	return n, held
}

// endSpell records a dry spell from dry to now that a packet ended, polled
// until until: the spinner learns from it (spin.go), and one caught within
// the reply window is counted.
func (w *worker) endSpell(now, dry, until int64) {
	if now <= until {
		w.replyCaught.Add(1)
	}
	if w.spin.ended(now, now-dry, w.rx.from&w.lanes.sentBefore != 0) {
		w.cadenceCaught.Add(1)
	}
	w.replyWindow.Store(w.spin.reply.window)
}

// holdPoll bounds a sleep while packets are held for ordering: a worker
// whose watermark we wait on does not wake us when it advances. A wait
// shorter than holdSpin is spun through: a sleep would overshoot it. A
// wait on another worker sleeps holdYield, so that a worker sharing the
// CPU runs.
const (
	holdPoll  = 100 * time.Microsecond
	holdSpin  = 10 * time.Microsecond
	holdYield = 20 * time.Microsecond
)

// sleep waits in ppoll(2) for an RX ring (waitSet: a cold one through an
// epoll), a handoff from another worker or the timeout. The poll kicks the
// TX rings owed a kick; what exceeds what one poll
// surely sends is kicked first (txLanes.beforeSleep). A down link makes
// it sleep the backoff instead, its lanes kicked explicitly (its RX ring
// would keep poll from sleeping).
func (w *worker) sleep(timeout time.Duration) {
	blocked := w.lanes.endRound(roundSleeps, &w.rx)
	if blocked {
		timeout = kickBackoff
	}
	// Announce the sleep before the last look at the handoff rings: a
	// producer publishes, then reads the flag (handoff.go), so one of the
	// two sees the other.
	w.wake.idle.Store(true)
	w.wake.sleeping.Store(true)
	// A socket in memory has no fd to wake the poll: its producer
	// publishes, then wakes, so the same last look catches what it
	// published before the worker announced the sleep.
	// Stop sets its flag, then wakes a worker that sleeps: the flag is
	// part of the same last look.
	if w.flows.order != nil && w.flows.order.pending() || w.memRX && w.rx.pending() || w.chg.pending.Load() || w.stopping != nil && w.stopping.Load() {
		w.wake.sleeping.Store(false)
		w.wake.idle.Store(false)
		w.lanes.endRound(roundPollsOn, &w.rx)
		return
	}
	w.reschedule()
	ts := unix.NsecToTimespec(int64(timeout))
	w.sleeps.Add(1)
	if blocked {
		time.Sleep(timeout)
	} else {
		w.waits.arm(monoNow(), w.wake.fd)
		w.lease.free() // another worker may stand in meanwhile (standin.go)
		n, err := unix.Ppoll(w.waits.pfds, &ts, nil)
		w.lease.reclaim()
		// The poll passed over every socket owed a kick (even one a
		// signal ended): what was owed left.
		if err == nil || err == unix.EINTR {
			w.lanes.endRound(roundPolled, &w.rx)
		}
		w.polls.Add(1)
		if n == 0 {
			w.pollTimeouts.Add(1)
		} else if w.waits.woken() {
			w.pollEventfd.Add(1)
		}
	}
	w.rx.allNext()
	w.wake.sleeping.Store(false)
	w.wake.idle.Store(false)
	if w.waits.woken() {
		w.wake.drain()
	}
}

// forwardAll forwards what RX ring p holds, a batch at a time, up to
// maxBatches, before the worker turns to what other workers handed it: a
// flow whose packets arrived on two RX queues then keeps the order in
// which the two workers read them, as long as a burst fits the budget.
func (w *worker) forwardAll(p *port) int {
	total := 0
	for range maxBatches {
		n := w.forward(p)
		total += n
		if n < int(w.rx.batch)/2 {
			break
		}
	}
	return total
}

// maxBatches bounds forwardAll, so one busy link cannot starve the other.
const maxBatches = 8

// reapAll reaps every TX ring the worker produces: its TX lanes, and with
// a Handler the RX sockets it reflects on.
func (w *worker) reapAll() {
	for _, l := range w.lanes.own {
		w.reap(l)
	}
}

// reap returns what the kernel finished transmitting on l: frames to the
// worker's cache, inline slots and frag references to the builder.
func (w *worker) reap(l *lane) {
	if l.inFlight() == 0 {
		return // nothing to complete: no look at the kernel's index
	}
	for {
		n := l.reap(w.lanes.reaped)
		if w.flows.table != nil {
			w.flows.table.completedAddrs(w.lanes.reaped[:n], w.q)
		}
		for _, a := range w.lanes.reaped[:n] {
			if !w.freeTX(a) {
				l.stats.n[cBadCompletions].Add(1) // not a UMEM address: never followed
			}
		}
		if n < len(w.lanes.reaped) {
			return
		}
	}
}

// drain forwards what is already in the RX rings, sends everything held
// for ordering, and waits, up to drainTimeout, for the kernel to complete
// every TX descriptor.
func (w *worker) drain() {
	w.flows.draining = true
	w.settle(w.lanes.own, func() bool {
		n := 0
		for _, p := range w.rx.ports {
			n += w.forward(p)
		}
		held := 0
		if w.flows.order != nil {
			var m int
			m, held = w.merge()
			n += m
		}
		return n > 0 || held > 0
	}, time.Now().Add(drainTimeout), time.Millisecond)
}

// settle is the one routine that waits for lanes to empty (drain, a
// removed link's dropLink): each try runs more (nil: nothing; true: it
// moved or holds packets) and reaps the lanes; while more has work or the
// kernel has not completed what they hold, the lanes with something in
// flight are kicked and it waits pause, up to deadline.
func (w *worker) settle(lanes []*lane, more func() bool, deadline time.Time, pause time.Duration) {
	for {
		busy := more != nil && more()
		var inFlight uint64
		for _, l := range lanes {
			w.reap(l)
			inFlight += l.inFlight()
		}
		if !busy && inFlight == 0 || time.Now().After(deadline) {
			return
		}
		for _, l := range lanes {
			if l.inFlight() > 0 {
				l.kick()
			}
		}
		time.Sleep(pause)
	}
}
