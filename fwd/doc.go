// Package fwd is xdpfwd's forwarding engine: it joins links through AF_XDP
// sockets on its UMEM (one premapped region, a domain per kind of bind:
// zero-copy NICs, copy-mode links) and sends the frames it receives on,
// choosing per packet the TX layout with the fewest descriptors and pages
// (package linearize): small packets are copied into an inline slot,
// larger ones leave from the frame they arrived in. Without a Handler it cross-connects
// two links, each frame out of the other; with one (Config.Handler, 1 to 64
// links) the handler decides each packet of a batch — forward to a link,
// flood to several, reflect, or drop — and the engine does the rest.
//
// It owns, for the life of a Forwarder, the UMEM region, the XDP programs
// on every link, one socket per (link, RX queue) — every RX queue has one,
// whatever the worker count — and the workers. Worker w reads RX queues w,
// w+W, w+2W, … of each link and transmits on TX queue w of each (and, with
// a Handler, reflects on the sockets it reads).
//
// # The path of a packet
//
// Every mode runs one batch pipeline (pipeline.go): RX ring → verdict →
// layout → lane → completion. A worker takes a batch from one RX ring
// (rxring.Ring.Next: the descriptors of one whole packet, each checked
// against the frames zone, the frames moved from the kernel to the
// worker), gets its verdict — cross-connect's is one for the whole batch
// (every packet out of the other link), a Handler's one per packet
// (verdicts.go) — then per packet chooses its TX queue (its flow's), lays
// it out (layout.go: inline slot, own frame, frag block or chain, package
// linearize deciding) and puts it on a TX lane (lane.go) or a handoff ring
// to the queue's owner, whose merge puts it on its lane (merge.go); the
// completion ring gives its memory back (worker.reap). Each stage takes
// the packet as one value (an rxPkt on forward's stack, passed by
// pointer: no copy per stage) and hands its result on as one. Only a
// lane writes a TX ring or kicks one, and only abandon (abandon.go) ends a
// packet that is not sent. Only the layout code decides where a UMEM unit
// goes next; rxring lends and takes back the frames of the receive side,
// and umem records every move.
//
// # Who owns what
//
// A worker (worker.go: its loop) is made of parts, each in the file named
// for it with a note on who writes what it shares, and each named where it
// is used (w.rx, w.lanes, …): the RX side and its ports (rxside.go: w.rx),
// the TX lanes (lane.go: w.lanes), the layout (layout.go: w.layout), the
// flow choice and the ordering (floworder.go, merge.go, handoff.go:
// w.flows), a Handler's batch (verdicts.go: w.verdicts), the counters
// (counters.go: one set, which LinkStats, the summary, the stats line and
// the metrics read) and the links changed while running (links.go:
// w.chg).
//
// # Concurrency
//
// Inside the engine, every ring has one user-space goroutine on its side:
// an RX queue's RX and fill rings belong to the worker that reads it, TX
// queue w's TX and completion rings to worker w. With several workers a
// packet whose flow is bound (package xps) to another worker's TX queue is
// passed to that worker through a bounded single-producer, single-consumer
// handoff ring, one per (RX ring, owner); the owner merges its handoff
// rings by the arrival stamp the XDP program wrote, so a flow that arrives
// on two RX queues leaves in arrival order. Frames freed by one worker go
// back to another's fill ring through the UMEM zone's pool. What is shared
// with the kernel is what package xsk shares: the rings, synchronised by
// their producer and consumer indices, the UMEM buffers the rings name, and
// the XSKMAP, written when New registers the sockets and when Stop
// unregisters them.
//
// For the caller:
//
//   - New, then Run once, from one goroutine; Run returns when its context
//     is done (nil), or when a link is deleted (ErrLinkGone) or changes its
//     queue count (ErrQueuesChanged).
//   - Stop, Stopping, the readers (LinkStats, QueueStats, KernelStats,
//     Zones, XPS, PagesPer1K, OwnershipViolations, Stalled, Summary) and the
//     live settings (SetQueues, SetXPS, SetInlineMax) may be called from any
//     goroutine while Run runs; the readers also alongside Close, and
//     return zero values (KernelStats an error) once it began.
//   - AddLink and RemoveLink (links.go; a Handler, one worker, copy mode)
//     attach and detach a link from any goroutine, before or while Run
//     runs: the worker takes the change at a round boundary (one atomic
//     load a round), the UMEM was sized at start for Config.MaxLinks, a
//     removed link's index is a hole the next AddLink takes (Links
//     reports ""), and a link the kernel deletes is removed the same way.
//   - Capture returns the capture point (package capture): sessions opened
//     on it from any goroutine see what the workers receive, send and drop
//     from their next batch on; Run's end and Close end them.
//   - Close, or Shutdown (Summary, then Close, with the leak accounting),
//     once Run has returned, or instead of Run after New.
//
// # What it must never do
//
// It must never leave an XDP program or a socket behind: New tears down
// whatever it built when it fails, Close releases everything, and the XDP
// programs are held by BPF links so the kernel removes them if the process
// dies without running Close. It never allocates per packet, never makes
// a syscall per packet, and never lets one worker wait on another: a full
// handoff ring is a counted drop, and a packet held for ordering waits a
// bounded time. It never sends one flow on two TX queues at once (a flow
// moves only with nothing in flight; xps.ModeCPU, the kernel's behaviour
// kept as a baseline, excepted), and never loses track of a UMEM address:
// Close counts what leaked and checks that the rest is back in place.
//
// # Configuration
//
// A Config is what the user asks for, each zero value the default. Each
// of its settings is a row of one table (settings.go, Settings): its flag
// name, what its zero value means, its check, and whether a running
// forwarder changes it. New resolves a Config, with what the links and
// the host report, into a Plan (plan.go: resolve, pure and table-tested,
// after the table's checks), where defaults are decided; the Config is
// never written. Workers read the Plan (Forwarder.plan), Forwarder.Plan
// returns a copy, and Reconfigure applies a new Config's difference as the
// table says: the links (where links may be added), queues, XPS and the
// inline limit live, the rest listed as needing a restart.
package fwd
