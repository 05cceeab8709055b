package fwd

// The flow/ordering part of a worker: which TX queue a packet leaves by,
// and, with several queues, the ordering across RX queues (merge.go).
//
// Concurrency: table is shared by every worker (flows.go says how); order
// holds this worker's consumer side of the handoff rings handed to it and
// reads the ports' portOrder (rxside.go). The other fields are the
// worker's alone: now and lastStamp are written once per batch (or merge
// round), holdDue by the merge, draining once when it stops.
type flowOrder struct {
	// With several queues: the flow table (the Forwarder's flows) and
	// the ordering state.
	table *flowState
	order *ordering
	// now is the batch's clock reading (ns): the stamps' clock (clock).
	now int64
	// holdDue (monotonic ns) is when the oldest packet held for ordering
	// may become sendable by the clock alone (merge.go).
	holdDue int64
	// lastStamp is the stamp of the newest packet of the current RX batch
	// (port.seen).
	lastStamp int64
	// draining: stopping; held packets go out without waiting for order.
	draining bool
}

// clock reads the clock of the stamps (ns): the ordering's, so that a
// test's fake clock governs every batch and the merge alike.
func (fo *flowOrder) clock() int64 {
	if fo.order == nil {
		return monoNow()
	}
	return fo.order.clock()
}
