package capture

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xdpfwd/xdpfwd/cbpf"
)

// longFilter is a filter of n instructions that runs every one of them
// (loads and adds, no jump) and keeps the packet.
func longFilter(n int) []cbpf.Instruction {
	ins := make([]cbpf.Instruction, 0, n)
	for len(ins) < n-1 {
		if len(ins)%2 == 0 {
			ins = append(ins, cbpf.Instruction{Op: 0x30, K: 14}) // ldb [14]
		} else {
			ins = append(ins, cbpf.Instruction{Op: 0x04, K: 1}) // add #1
		}
	}
	return append(ins, cbpf.Instruction{Op: 0x06, K: 0xffff}) // ret #65535
}

// TestLimits: what captures may cost the workers is bounded: at most
// MaxSessions at once, filters of at most MaxFilter instructions, and at
// most MaxBuffer of rings per worker over all of them.
func TestLimits(t *testing.T) {
	tests := []struct {
		name string
		open []Request // opened in turn, kept open
		want string    // the last one's error ("": opens)
	}{
		{"sessions", make([]Request, MaxSessions+1), "captures open"},
		{"sessions, up to the limit", make([]Request, MaxSessions), ""},
		{"filter", []Request{{Filter: longFilter(MaxFilter + 1)}}, "instructions"},
		{"filter, at the limit", []Request{{Filter: longFilter(MaxFilter)}}, ""},
		{"buffers", []Request{{Buffer: MaxBuffer / 2}, {Buffer: MaxBuffer / 2}, {Buffer: 4 << 20}}, "buffer"},
		{"buffers, up to the budget", []Request{{Buffer: MaxBuffer / 2}, {Buffer: MaxBuffer / 2}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHub(1, []string{"a"})
			defer h.Close()
			var err error
			for i, req := range tc.open {
				var spec Spec
				if spec, err = h.spec(req); err == nil {
					var s *Session
					if s, err = h.Open(spec); err == nil {
						defer s.Close()
					}
				}
				if err != nil && i < len(tc.open)-1 {
					t.Fatalf("capture %d of %d: %v", i+1, len(tc.open), err)
				}
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("capture %d: %v, want it open", len(tc.open), err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("capture %d: %v, want an error about %q", len(tc.open), err, tc.want)
			}
		})
	}
}

// BenchmarkFilterLength is a worker's cost for one 1500-byte packet that
// one capture's filter of so many instructions (up to MaxFilter) keeps.
func BenchmarkFilterLength(b *testing.B) {
	for _, n := range []int{16, 64, MaxFilter} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			h := NewHub(1, []string{"a"})
			spec, err := h.spec(Request{Filter: longFilter(n), Snaplen: 64})
			if err != nil {
				b.Fatal(err)
			}
			s, err := h.Open(spec)
			if err != nil {
				b.Fatal(err)
			}
			data := [][]byte{make([]byte, 1500)}
			for b.Loop() {
				set := h.Point(0).Begin()
				set.Packet(0, 0, RX, 0, data, 1500)
				set.End()
				s.Read(10, func([]byte) bool { return true })
			}
		})
	}
}

// TestLimitsUnderConcurrentOpens: sixteen clients opening and closing
// captures at once while two workers write to them never hold more than
// MaxSessions open, and once all are closed the hub holds no session and
// no reserved buffer: the limit is checked and reserved under one lock.
func TestLimitsUnderConcurrentOpens(t *testing.T) {
	const clients, rounds = 16, 200
	h := NewHub(2, []string{"a", "b"})
	defer h.Close()
	var live, most, refused atomic.Int64
	stop := make(chan struct{})
	var workers sync.WaitGroup
	for w := range 2 {
		workers.Go(func() {
			pkt := [][]byte{make([]byte, 60)}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if s := h.Point(w).Begin(); s != nil {
					s.Packet(w, 0, RX, 0, pkt, 60)
					s.End()
				}
			}
		})
	}
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for range rounds {
				s, err := h.Open(Spec{Buffer: 64 << 10, Snaplen: 128})
				if err != nil {
					if !strings.Contains(err.Error(), "captures open") {
						t.Errorf("open: %v", err)
					}
					refused.Add(1)
					continue
				}
				n := live.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				live.Add(-1)
				s.Close()
			}
		})
	}
	wg.Wait()
	close(stop)
	workers.Wait()
	if m := most.Load(); m > MaxSessions {
		t.Errorf("%d captures open at once, at most %d allowed", m, MaxSessions)
	}
	if refused.Load() == 0 {
		t.Logf("no open was refused: the clients never contended")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.sessions) != 0 || h.opening != 0 || h.bytes != 0 {
		t.Errorf("after every close: %d sessions, %d opening, %d bytes reserved; want none", len(h.sessions), h.opening, h.bytes)
	}
}
