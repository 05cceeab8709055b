package linkop_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// handingOver answers its first handing requests as a daemon that handed
// its datapath over while they waited, then as the successor would.
type handingOver struct {
	fakeManager
	handing int32
	asked   atomic.Int32
}

func (m *handingOver) Add(name string) error {
	if m.asked.Add(1) <= m.handing {
		return fmt.Errorf("link add %s: this xdpfwd: %w", name, linkop.ErrHandedOver)
	}
	return m.fakeManager.Add(name)
}

// TestHandedOverAskedAgain: a request a daemon answers with "handed over"
// is asked again, once, on a new connection (the successor's); a second
// such answer is the caller's error, which says so.
func TestHandedOverAskedAgain(t *testing.T) {
	m := &handingOver{handing: 1}
	c, err := linkop.Dial(serve(t, m))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddLink("a"); err != nil {
		t.Fatalf("add across a handover: %v", err)
	}
	if n := m.asked.Load(); n != 2 {
		t.Errorf("asked %d times, want twice", n)
	}
	if l, err := c.ListLinks(); err != nil || len(l.Links) != 1 {
		t.Errorf("list on the successor's connection: %+v %v", l, err)
	}

	m = &handingOver{handing: 5}
	c2, err := linkop.Dial(serve(t, m))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	err = c2.AddLink("b")
	if !errors.Is(err, linkop.ErrHandedOver) {
		t.Errorf("add to daemons that keep handing over: %v, want ErrHandedOver", err)
	}
	if n := m.asked.Load(); n != 2 {
		t.Errorf("asked %d times, want twice", n)
	}
}
