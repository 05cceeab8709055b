package fwd_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestSpoofedSourceCounted: a link added with port security (the
// switch told its pod's address by name before AddLink, as the daemon
// does) has its frames from other addresses dropped and counted as
// spoofed_source on it, not handler_drops, in LinkStats and the summary;
// its own frames are forwarded, and A's address, claimed by C, stays
// behind l0.
func TestSpoofedSourceCounted(t *testing.T) { forWorkers(t, testSpoofedSourceCounted) }

func testSpoofedSourceCounted(t *testing.T, workers int) {
	r, sw := startSwitchOn(t, 4, workers)
	if err := sw.SecurePort("c", modes.Port{MAC: macC}); err != nil {
		t.Fatal(err)
	}
	c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
	if err := r.f.AddLink("c"); err != nil {
		t.Fatalf("AddLink: %v", err)
	}
	const spoofs = 5
	for i := range spoofs {
		injectOn(t, c, seqFrame(bcast, macA, 4, uint32(i), 100)) // C claims A's address
	}
	soon(t, "the spoofed frames counted", func() bool { return r.f.LinkStats(2).Drops[fwd.DropSpoofedSource] == spoofs })
	// A is still behind l0: B's frame for A goes there alone.
	fb := seqFrame(macA, macB, 4, 10, 120)
	r.inject(1, 0, fb, fwdtest.RX{})
	if got := r.links[0].CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, fb) {
		t.Fatalf("B→A after C claimed A: %d frames out of l0, want the one sent", len(got))
	}
	if got := c.Collect(); len(got) != 0 {
		t.Errorf("B→A after C claimed A: c sent %d frames, want none", len(got))
	}
	fc := seqFrame(macA, macC, 4, 11, 140) // C's own
	injectOn(t, c, fc)
	if got := r.links[0].CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, fc) {
		t.Fatalf("C→A from its own address: %d frames out of l0, want the one sent", len(got))
	}
	st := r.f.LinkStats(2)
	if st.Drops[fwd.DropSpoofedSource] != spoofs || st.Drops[fwd.DropHandler] != 0 || st.TotalDrops() != spoofs || st.RXPackets != spoofs+1 {
		t.Errorf("c: spoofed_source %d, handler_drops %d, total drops %d, rx %d; want %d, 0, %d, %d",
			st.Drops[fwd.DropSpoofedSource], st.Drops[fwd.DropHandler], st.TotalDrops(), st.RXPackets, spoofs, spoofs, spoofs+1)
	}
	if got := r.f.Summary().Links["c"].Drops[fwd.DropSpoofedSource]; got != spoofs {
		t.Errorf("summary: c's spoofed_source %d, want %d", got, spoofs)
	}
	if err := r.f.RemoveLink("c"); err != nil {
		t.Fatal(err)
	}
	if sw.Secured(2) {
		t.Error("c removed: its index still secured")
	}
}
