package xps_test

import (
	"fmt"
	"time"

	"github.com/xdpfwd/xdpfwd/xps"
)

// A worker's per-packet path: key, hash, pick; Sent before the descriptor is
// published, Completed when the TX owner reaps it.
func Example() {
	tbl := xps.NewTable(1<<16, 10*time.Second)
	frame := []byte{
		0x02, 0, 0, 0, 0, 0x0b, 0x02, 0, 0, 0, 0, 0x0a, 0x08, 0x00, // Ethernet
		0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4, TCP
		0x9c, 0x40, 0, 80, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x10, 0, 0, 0, 0, 0, 0, // TCP 40000 → 80
	}
	now := int64(1) // the worker reads a monotonic clock once per batch
	key, kind := xps.ParseKey(frame, true)
	h := key.Hash()
	var queues []int
	for rxq := range 4 { // the same flow arriving on four RX queues
		q, slot := tbl.Pick(key, h, 4, rxq, now)
		tbl.Sent(slot, q, 1)
		tbl.Completed(slot, q, 1)
		queues = append(queues, q)
	}
	fmt.Println(kind, queues[0] == queues[1] && queues[1] == queues[2] && queues[2] == queues[3])
	st := tbl.Stats()
	fmt.Println(st.Mode, st.Flows, st.InFlight)
	// Output:
	// l4 true
	// sticky 1 0
}
