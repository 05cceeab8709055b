package gen

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestPacer: Due counts the packets due by a time, the first at the start;
// Next is the inverse; a zero rate is unpaced.
func TestPacer(t *testing.T) {
	const start = 1_000_000
	for _, tc := range []struct {
		name string
		pps  float64
		at   int64 // ns after start
		due  uint64
	}{
		{"before-start", 100e3, -1, 0},
		{"at-start", 100e3, 0, 1},
		{"just-before-second", 100e3, 9_999, 1},
		{"second", 100e3, 10_000, 2},
		{"one-second", 100e3, int64(time.Second), 100_001},
		{"1mpps-1ms", 1e6, int64(time.Millisecond), 1001},
		{"odd-rate", 3, int64(time.Second), 4},
		{"hour-at-10mpps", 10e6, int64(time.Hour), 36_000_000_001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPacer(tc.pps, start, 1)
			if got := p.Due(start + tc.at); got != tc.due {
				t.Fatalf("Due(+%d ns) at %v pps = %d, want %d", tc.at, tc.pps, got, tc.due)
			}
		})
	}
	for _, pps := range []float64{1, 3, 7, 100e3, 1e6, 14.88e6} {
		p := NewPacer(pps, start, 1)
		for n := uint64(0); n < 5000; n += 1 + n/3 {
			at := p.Next(n)
			if p.Due(at) < n+1 {
				t.Fatalf("%v pps: packet %d due at %d, but Due there is %d", pps, n, at, p.Due(at))
			}
			if at > start && p.Due(at-1) > n {
				t.Fatalf("%v pps: packet %d already due 1 ns before Next (%d)", pps, n, p.Due(at-1))
			}
		}
	}
	if p := NewPacer(0, start, 64); p.Due(0) != math.MaxUint64 || p.Next(123) != start {
		t.Fatal("a zero rate is not unpaced")
	}
}

// TestNow: the clock is CLOCK_MONOTONIC and moves forward.
func TestNow(t *testing.T) {
	a := Now()
	var ts = monotonicRaw()
	b := Now()
	if ts < a-int64(time.Millisecond) || ts > b+int64(time.Millisecond) {
		t.Fatalf("CLOCK_MONOTONIC %d outside [%d, %d] ±1ms", ts, a, b)
	}
	if b < a {
		t.Fatalf("Now went back: %d then %d", a, b)
	}
}

// TestBadRate: a rate the pacer cannot keep is the configuration's error,
// found before any link is looked at: not a number, infinite, negative,
// or so small that a socket's interval between packets overflows
// time.Duration.
func TestBadRate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rate  float64
		links int
	}{
		{"nan", math.NaN(), 1},
		{"inf", math.Inf(1), 1},
		{"minus-inf", math.Inf(-1), 1},
		{"negative", -1, 1},
		{"tiny", 1e-300, 1},
		{"interval-overflows", 1e-10, 1},
		{"per-socket-overflows", 2e-10 * 2, 4}, // 4 sockets share the rate
	} {
		t.Run(tc.name, func(t *testing.T) {
			var links []string
			for i := range tc.links {
				links = append(links, "no-such-link-"+string(rune('a'+i)))
			}
			_, err := New(Config{Links: links, Rate: tc.rate})
			var ie InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), "rate") {
				t.Fatalf("rate %v: error %v, want an InputError about the rate", tc.rate, err)
			}
		})
	}
}

// TestPacerTinyRateTerminates: a pacer at a rate whose interval does not
// fit in an int64 of ns must still answer (today it spins for ever).
func TestPacerTinyRateTerminates(t *testing.T) {
	done := make(chan int64, 1)
	go func() { p := NewPacer(1e-300, 0, 1); done <- p.Next(1) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Next(1) at 1e-300 pps did not return within 5 s")
	}
}

// TestPacerRounds drives the pacer with a fake clock, as a socket's loop
// does (Round, send, sleep until the next round), at 1 pps to 1 Gpps: a
// round sends at most its burst (what is due in a window, at least one
// packet, at most the batch) and never a packet before it is due. With an
// exact clock rounds are a burst apart, no packet goes more than a window
// late, and the run keeps the rate; with a clock that wakes up to half a
// window late nothing is forgiven, the rate holds and up to 1 kpps (a
// burst of one) packets stay spaced, no round following another at once;
// after a stall of 100 × MaxDebt the pacer catches up at most MaxDebt of
// packets and forgives the rest.
func TestPacerRounds(t *testing.T) {
	const start, batch, total = 1_000_000, 64, 3000
	for _, tc := range []struct {
		pps   float64
		burst uint64
	}{{1, 1}, {10, 1}, {1e3, 1}, {1e6, 64}, {1e9, 64}} {
		for _, clock := range []string{"exact", "late", "stall"} {
			t.Run(fmt.Sprintf("%g-%s", tc.pps, clock), func(t *testing.T) {
				iv, ok := Interval(tc.pps)
				if !ok {
					t.Fatalf("Interval(%g) not ok", tc.pps)
				}
				b := Burst(tc.pps, DefaultWindow, batch)
				if b != tc.burst {
					t.Fatalf("Burst(%g) = %d, want %d", tc.pps, b, tc.burst)
				}
				p := NewPacer(tc.pps, start, b)
				rng := rand.New(rand.NewPCG(1, uint64(tc.pps)))
				window := float64(b) * iv
				now, sent, lastSend := int64(start), uint64(0), int64(start)
				var rounds, atOnce, afterStall int
				stalled := false
				for sent < total {
					if rounds++; rounds > 10*total {
						t.Fatalf("%d rounds for %d packets", rounds, sent)
					}
					n, at := p.Round(now, sent)
					if n > b {
						t.Fatalf("round at %d sent %d, more than the burst %d", now, n, b)
					}
					if n > 0 {
						lastSend = now
						if last := p.Next(sent + n - 1); last > now {
							t.Fatalf("packet %d sent at %d, due at %d: early", sent+n-1, now, last)
						}
						if late := float64(now - p.Next(sent)); clock == "exact" && late > window {
							t.Fatalf("packet %d sent %.0f ns after it was due: more than a window (%.0f ns)", sent, late, window)
						}
					}
					sent += n
					if at <= now {
						atOnce++
						if stalled {
							afterStall++
						}
						if clock == "exact" && sent < total {
							t.Fatalf("round at %d: the next at once (%d) with an exact clock", now, at)
						}
						continue
					}
					now = at
					switch {
					case clock == "late":
						now += int64(rng.Float64() * float64(DefaultWindow) / 2)
					case clock == "stall" && !stalled && sent >= total/2:
						stalled = true
						now += int64(100 * MaxDebt)
					}
				}
				took, want := float64(lastSend-start), float64(total-1)*iv
				switch clock {
				case "exact":
					if took < want || took > want+window {
						t.Fatalf("%d packets took %.0f ns, want %.0f (+ a window, %.0f)", total, took, want, window)
					}
				case "late":
					if took < want || took > want+window+float64(DefaultWindow) {
						t.Fatalf("%d packets took %.0f ns, want %.0f (+ a window, %.0f, and the clock's lateness)", total, took, want, window)
					}
				case "stall":
					if p.Forgiven() == 0 {
						t.Fatal("nothing forgiven after a stall of 100 × MaxDebt")
					}
					if caught := uint64(afterStall) * b; float64(caught) > float64(MaxDebt)/iv+float64(b) {
						t.Fatalf("caught up %d packets at once after the stall, more than MaxDebt's %.0f", caught, float64(MaxDebt)/iv)
					}
				}
				if clock != "exact" && p.Forgiven() != 0 && clock == "late" {
					t.Fatalf("%d packets forgiven with a clock at most half a window late", p.Forgiven())
				}
				if tc.pps <= 1e3 && clock == "late" && atOnce > 0 {
					t.Fatalf("%d rounds at once at %g pps: packets not spaced", atOnce, tc.pps)
				}
				t.Logf("burst %d: %d rounds, %d at once (%d after the stall), %d forgiven", b, rounds, atOnce, afterStall, p.Forgiven())
			})
		}
	}
}
