package topo

import (
	"testing"
	"time"
)

// A stream starts on an open path: datagrams written before the path
// forwards (here, before the bridge joining A and B exists, and while A
// resolves B's address) would count as lost, or, once the kernel sends
// its queue of unresolved ones behind newer datagrams, as reordered.
// StartSeqStream returns only once a datagram has crossed, and from then
// on a bridge loses and reorders nothing.
func TestSeqStreamStartsOnOpenPath(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	const late = 300 * time.Millisecond
	joined := make(chan struct{})
	go func() {
		defer close(joined)
		time.Sleep(late)
		bridge(t, p)
	}()
	began := time.Now()
	s, err := StartSeqStream(p.A, p.B, p.V4A, p.V4B, 20_000, 64, time.Millisecond)
	<-joined
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < late {
		t.Errorf("StartSeqStream returned after %v, before the bridge joined A and B (%v)", took, late)
	}
	time.Sleep(300 * time.Millisecond)
	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d sent, %d received, %d lost, %d reordered, %d duplicated", res.Sent, res.Received, res.Lost, res.Reordered, res.Duplicates)
	if res.Received == 0 || res.Lost != 0 || res.Reordered != 0 || res.Duplicates != 0 {
		t.Errorf("through a bridge: %d of %d received, %d lost, %d reordered (first %v), %d duplicated; want all, in order",
			res.Received, res.Sent, res.Lost, res.Reordered, res.Reorders, res.Duplicates)
	}
}

// A stream whose path never opens is refused, with nothing left running.
func TestSeqStreamNoPath(t *testing.T) {
	RequireRoot(t)
	p := newTestPair(t, Options{})
	began := time.Now()
	if s, err := StartSeqStream(p.A, p.B, p.V4A, p.V4B, 1_000, 64, time.Millisecond); err == nil {
		s.Stop(0)
		t.Fatal("StartSeqStream between unjoined namespaces succeeded")
	} else {
		t.Logf("after %v: %v", time.Since(began).Round(time.Millisecond), err)
	}
}
