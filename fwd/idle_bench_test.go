package fwd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// BenchmarkIdleRound is what one round costs a worker whose links are all
// idle, with 2 and with 64 links (a switch's uplink and 63 pods), on
// sockets in memory (fwdtest): the round a worker spins through after
// every packet, and repeats for each of the packets of a low rate. It
// grew with the links when every round asked each TX lane's room for
// each port, and looked at each lane's completions, with nothing to read
// or to complete. ns/round is the worker's; it spins (SpinBusy), and the
// benchmark reads its round count every millisecond.
func BenchmarkIdleRound(b *testing.B) {
	for _, links := range []int{2, 64} {
		b.Run(fmt.Sprintf("links=%d", links), func(b *testing.B) {
			env := fwdtest.New()
			var names []string
			for i := range links {
				names = append(names, fmt.Sprintf("l%d", i))
				env.AddLink(names[i], fwdtest.LinkOptions{})
			}
			drop := fwd.HandlerFunc(func(pkts []fwd.Packet) {
				for i := range pkts {
					pkts[i].Drop()
				}
			})
			f, err := fwd.New(fwd.Config{Links: names, Env: env, Handler: drop, Queues: 1, Spin: fwd.SpinBusy})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- f.Run(ctx) }()
			defer func() { cancel(); <-done }()
			rounds := func() uint64 { return f.WorkerStats()[0].Rounds }
			for deadline := time.Now().Add(5 * time.Second); rounds() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatal("the worker ran no round in 5 s")
				}
			}
			first := rounds()
			b.ResetTimer()
			for rounds()-first < uint64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			n := rounds() - first
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/round")
		})
	}
}
