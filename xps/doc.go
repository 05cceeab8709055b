// Package xps owns the per-flow choice of TX queue: the flow key and the
// sticky table.
//
// # Why
//
// A TCP connection whose segments leave on two TX queues at once is reordered
// on the wire: the receiver sees out-of-order segments, sends duplicate ACKs,
// the sender retransmits, and throughput halves. The kernel hit exactly this
// when a netns crossing scrubbed the skb (skb_scrub_packet drops skb->sk):
// with no socket to remember the queue, XPS picked a TX queue by the running
// CPU, and the return path of one stream ran on two CPUs, hence two queues:
// one iperf stream ran at 4.80 Gbits/sec with XPS, 9.21 without (Flavio
// Leitner, "Poor TCP performance with XPS enabled after scrubbing skb",
// netdev, 2018). A forwarder has no socket at all, and each of xdpfwd's RX
// queues is read by one worker, so a flow that arrives on two RX queues
// (RSS on two links, a flow whose direction changes links, a queue count
// change) would be sent on two TX queues if the queue followed the worker.
//
// Hence the rule of this package: the TX queue of a flow is a function of the
// flow, never of the CPU, goroutine, worker or RX queue that handled the
// packet — except in ModeCPU, kept only as the baseline that reproduces the
// kernel's behaviour. And nothing here allocates per packet: ParseKey,
// Key.Hash, Table.Pick, Table.Sent and Table.Completed are allocation-free
// (the benchmarks report 0 allocs/op).
//
// # Flow key
//
// ParseKey reads the headers of an Ethernet frame, never its payload, and
// returns a fixed-size comparable Key and its KeyKind:
//
//   - KindL4: addresses, ports and protocol, for TCP (6), UDP (17) and SCTP
//     (132) over IPv4 or IPv6 whose minimal transport header (20, 8, 12
//     bytes) lies within the IP packet.
//   - KindL3: addresses and protocol: IP fragments (IPv4 MF set or offset ≠ 0,
//     IPv6 Fragment header with M set or offset ≠ 0 — so the first fragment,
//     which carries the ports, hashes like the others), ICMP and every other
//     protocol, and every IP packet whose headers are malformed or truncated
//     once its addresses have been read (IHL < 5, IHL or total/payload length
//     beyond the frame, truncated or over-long IPv6 extension header chain,
//     truncated transport header).
//   - KindL2: source and destination MAC and EtherType: non-IP frames, IP
//     frames too short for their addresses or with the wrong version nibble,
//     a truncated VLAN tag, and frames with more than MaxVLANTags stacked
//     802.1Q (0x8100) / 802.1ad (0x88a8) tags (the EtherType in the key is
//     then the last tag protocol identifier read).
//   - KindInvalid: a runt shorter than an Ethernet header (14 bytes).
//
// Malformed input only ever makes the key coarser; ParseKey never reads out
// of bounds and never panics (FuzzParseKey). VLAN tags are skipped, not part
// of the key, so a flow bridged between VLANs keeps its key; two flows with
// the same addresses and ports on two VLANs share a queue, which costs
// balance, never order. IPv6 extension headers walked: hop-by-hop (0),
// routing (43), destination options (60) (length (n+1)·8), fragment (44, 8
// bytes; an atomic fragment, M clear and offset 0, is walked through), AH
// (51, length (n+2)·4); at most MaxIPv6ExtHeaders of them, more gives
// KindL3. The protocol of a KindL3 key is the last Next Header reached (for
// a fragment: the Fragment header's, common to all fragments of a datagram).
//
// With symmetric set, the two endpoints are put in a canonical order, so both
// directions of a connection give the same key (and hash).
//
// Key.Hash mixes the key with a per-process random seed (so that remote
// peers cannot aim flows at one table bucket); it is stable within the
// process, which is all that queue choice needs.
//
// # Modes
//
// Table.Pick chooses among nqueues TX queues:
//
//   - ModeSticky (the default): the first packet of a flow takes the
//     least-loaded queue (fewest descriptors in flight; ties broken by the
//     hash, scanning from Hash % nqueues); later packets follow the table.
//   - ModeHash: Hash % nqueues, stateless.
//   - ModeCPU: rxq % nqueues — the queue follows the receiving worker. This
//     is the kernel's XPS-after-scrub behaviour, kept as a baseline to
//     measure against; it reorders flows that arrive on several RX queues.
//
// # In-flight accounting and when a flow moves
//
// Sent(slot, queue, n) must be called before the n descriptors become
// visible to the kernel (before the TX ring producer is published), and
// Completed(slot, queue, n) when their completions are consumed. The table
// keeps a count per flow and per queue. A sticky flow changes queue only when
// it has nothing in flight — the kernel's ooo_okay rule — so its packets can
// never be reordered by the move. It wants to move when:
//
//   - its queue is ≥ the current queue count (the count shrank: SetQueues, or
//     a smaller nqueues); or
//   - its queue is overloaded: it has at least OverloadMin descriptors in
//     flight and more than OverloadFactor (2) times the mean over the current
//     queues (total in flight / queue count).
//
// If the flow has nothing in flight it moves at once to the least-loaded
// queue (Stats.Moves). Otherwise it stays where it is — even on a queue
// beyond the current count, which the caller must therefore keep draining
// until its in-flight count is 0 — and the deferral is counted once per
// episode (Stats.DeferredMoves); the move happens on the first packet after
// its in-flight count reaches 0. Flows never move to newly added queues on
// their own; new flows and the overload rule fill them.
//
// # Capacity, aging and eviction
//
// The table is fixed-size and set-associative: a power-of-two number of
// buckets of Ways (8) entries, all allocated by NewTable; nothing is
// allocated afterwards, and every operation is O(1) (a new flow or a move
// also scans the queue counters, O(nqueues) ≤ MaxQueues). A flow has two
// candidate buckets (two-choice hashing: the first from the top bits of its
// hash, the alternate differing from it above the stripe bits, chosen by the
// low bits; one bucket when the table has no more buckets than stripes), so
// that buckets do not overflow while the table still has room — a table
// four times larger than its flows evicts nothing. Pick looks in both. A
// flow that misses takes, among the entries of its two buckets:
//
//  1. a never-used entry, in the bucket with more of them; otherwise
//  2. the least-recently-used entry with nothing in flight. If it has been
//     idle longer than the table's idle time it is reclaimed (aging,
//     Stats.Reclaims); otherwise it is evicted (Stats.Evictions — a table
//     too small for the live flows).
//  3. If every one of these entries has descriptors in flight, nothing is
//     evicted: the packet gets the hash choice (Hash % nqueues) and no slot
//     (Stats.Fallbacks). Evicting a flow with descriptors in flight would
//     let its next packet pick another queue and overtake them.
//
// Aging is lazy: an idle entry keeps its flow (a returning flow finds its
// queue again) until a new flow of the same buckets needs the room.
//
// # Slots
//
// Pick returns a Slot (entry index and generation) that the caller keeps
// with each descriptor and hands back to Sent and Completed. The generation
// changes whenever the entry is given to another flow, which can only happen
// while the entry has nothing in flight; a Sent or Completed with a stale
// generation updates only the per-queue count (Stats.StaleSends,
// Stats.StaleCompletions), so it can never corrupt the count of the flow
// that now owns the entry. NoSlot (from ModeHash, ModeCPU and fallbacks)
// likewise counts per queue only.
//
// Limits of the guarantee. Descriptors Sent with NoSlot or a stale slot are
// not counted against any flow, so the flow may be given another queue while
// they are in flight. This happens only in a thrashing table: a hash
// fallback needs all 2·Ways entries of the flow's buckets busy, and a stale
// Sent needs the flow evicted between its Pick and its Sent, i.e. all the
// other 2·Ways−1 entries busy or more recently used than a flow that was
// just picked. Stats.Fallbacks, Stats.Evictions and Stats.StaleSends then
// say the table is too small for the live flows.
//
// # Concurrency
//
// One Table serves the whole process: every worker calls Pick (a flow may
// arrive on several RX queues — that is the point), Sent from the goroutine
// that submits the descriptors, and Completed from the worker that owns the
// TX queue. All methods are safe for concurrent use:
//
//   - Each bucket is guarded by one of up to 64 cache-line-padded mutexes
//     (stripe = bucket index mod stripes; a flow's two buckets share their
//     stripe, so Pick takes exactly one lock). Every read and write of an entry
//     (key, queue, per-flow in-flight count, generation, last-seen time)
//     happens under its bucket's stripe lock; Pick takes it once per packet
//     (found from the hash), Sent and Completed once per call (found from the
//     slot's index). The lock is held for an O(1) bucket scan (plus the queue
//     scan of a new flow or move) and never across another lock, so there is
//     no lock ordering to get wrong and no deadlock. Hence the per-flow
//     decisions — in particular "move only with 0 in flight", and "reuse an
//     entry only with 0 in flight" — are exact, not racy.
//   - The per-queue in-flight counts and their total are atomic counters,
//     each on its own cache line. Pick reads them without the lock to choose
//     the least-loaded queue and to detect overload; those reads are a
//     heuristic snapshot and need not be consistent with each other. They are
//     exact once the callers are quiescent (every Sent matched by a
//     Completed brings them back to 0; TestConcurrent checks it under -race).
//   - The mode and the SetQueues limit are atomics; the statistics are atomic
//     counters updated only on rare events (new flow, move, deferral,
//     eviction, fallback, stale slot), never per packet.
//
// The caller's contract: Completed for a descriptor happens after its Sent
// (the caller calls Sent before publishing the descriptor); an over-complete
// is clamped at 0 and counted (Stats.Underflows). Every descriptor that was
// Sent must eventually be Completed, or its flow stays pinned to its queue
// and its entry can never be reused.
package xps
