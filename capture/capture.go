// Package capture copies what the forwarding engine receives, sends and
// drops to the packet captures open at the time (`xdpfwd capture`), and
// carries them to their clients over a stream (wire.go).
//
// A Hub has one Point per worker and the open Sessions. A Session has one
// bounded ring per worker: the worker is its only producer, the session's
// reader its only consumer.
//
// # Concurrency
//
//   - Point.Begin, Set.Packet and Set.End are the worker's: Begin once per
//     batch (one atomic load; nil while nobody captures, and then nothing
//     else is done), Packet per packet, End once per batch (publishes what
//     the batch wrote).
//   - Hub.Open, Session.Read, Session.Close and Hub.Close may be called
//     from any goroutine; one goroutine reads a given Session.
//
// # What it must never do
//
// It never makes the worker wait, allocate or make a system call: a
// record that does not fit a ring is counted as lost (Session.Lost) and
// the packet goes on its way. It never keeps a reference to packet memory
// past Packet: the bytes are copied, up to the snapshot length. It never
// touches the forwarding path while no Session is open.
package capture

import (
	"fmt"
	"sync"
)

// Dir is what happened to a packet; a set of them selects what a Session
// keeps.
type Dir uint8

const (
	RX   Dir = 1 << iota // received on the link
	TX                   // queued for transmission on the link
	Drop                 // dropped by xdpfwd, with a Reason
	All  = RX | TX | Drop
)

// ParseDir parses rx, tx, drop or all.
func ParseDir(s string) (Dir, error) {
	switch s {
	case "rx":
		return RX, nil
	case "tx":
		return TX, nil
	case "drop":
		return Drop, nil
	case "all", "":
		return All, nil
	}
	return 0, fmt.Errorf("direction %q: want rx, tx, drop or all", s)
}

func (d Dir) String() string {
	switch d {
	case RX:
		return "rx"
	case TX:
		return "tx"
	case Drop:
		return "drop"
	case All:
		return "all"
	}
	return fmt.Sprintf("dir(%d)", uint8(d))
}

// Reason is a drop reason: a small code for a counter's name, registered
// once (ReasonCode) so that the worker writes one byte per record.
type Reason uint8

var reasons = struct {
	sync.Mutex
	names []string
}{names: []string{""}}

// ReasonCode returns the code of a drop reason's name, registering it the
// first time. Call it at initialisation, not per packet.
func ReasonCode(name string) Reason {
	reasons.Lock()
	defer reasons.Unlock()
	for i, n := range reasons.names {
		if n == name {
			return Reason(i)
		}
	}
	if len(reasons.names) > 255 {
		panic("capture: too many drop reasons")
	}
	reasons.names = append(reasons.names, name)
	return Reason(len(reasons.names) - 1)
}

// ReasonNames lists the registered reasons by code (code 0 is "").
func ReasonNames() []string {
	reasons.Lock()
	defer reasons.Unlock()
	return append([]string(nil), reasons.names...)
}
