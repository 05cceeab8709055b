package capture_test

import (
	"fmt"

	"github.com/xdpfwd/xdpfwd/capture"
)

// Example shows both sides: a worker offering a batch's packets, and the
// session's reader taking them.
func Example() {
	hub := capture.NewHub(1, []string{"eth1", "eth2"})
	s, err := hub.Open(capture.Spec{Dirs: capture.RX | capture.Drop, Snaplen: 4})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	// A worker's batch.
	if set := hub.Point(0).Begin(); set != nil {
		set.Packet(0, 0, capture.RX, 0, [][]byte{[]byte("hello, world")}, 12)
		set.Packet(1, 0, capture.TX, 0, [][]byte{[]byte("not kept")}, 8)
		set.End()
	}

	// The reader.
	s.Read(100, func(b []byte) bool {
		r, _ := capture.Parse(b)
		fmt.Printf("%s %s %q of %d bytes\n", s.Links()[r.Link], r.Dir, r.Data, r.OrigLen)
		return true
	})
	fmt.Println("lost:", s.Lost())
	// Output:
	// eth1 rx "hell" of 12 bytes
	// lost: 0
}
