package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
)

// The reordering workload reproduces fwd/xps_test.go's scenario (Flavio
// Leitner, "Poor TCP performance with XPS enabled after scrubbing skb",
// netdev, 2018): every one of w.Flows sequenced UDP flows reaches the
// contender on two RX queues of its ingress link, and the receiver counts,
// per flow, the datagrams that arrive after one with a higher sequence
// number.
//
// The sender is two AF_XDP sockets (inline.Sender) on queues 0 and 1 of the
// source namespace's eth0; a veth delivers TX queue i into RX queue i of its
// peer, the contender's ingress link. They take turns, one round each: a
// round is w.Burst datagrams of every flow on one queue; before the other
// queue is used, the sender waits until the kernel has consumed the round
// (Sender.Wait), so the sender itself never reorders; then it spins for
// w.Gap, so that the load stays one the forwarder sustains (reordering
// measured with backed-up RX rings would measure the backlog).

// runReorder runs the reordering workload on p, whose veths have (at least)
// two queues: out-of-order datagrams per million received.
func runReorder(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	if q := e.queuesOf(p); q < 2 {
		return nil, fmt.Errorf("the reordering workload needs two queues per veth, %s has %d", p.Name, q)
	}
	deadline := time.Now().Add(e.o.Warmup + e.o.Duration + 2*time.Second)
	rx, err := traffic.NewSeqReceiver(p.B, netip.AddrPortFrom(p.V4B, 0), w.Flows, deadline.Add(time.Second))
	if err != nil {
		return nil, err
	}
	tx, err := traffic.NewSeqSender(p, rx.Port, w.Flows, w.Burst, w.Size, w.Gap, deadline)
	if err != nil {
		rx.Close()
		return nil, err
	}
	a, b, werr := e.window(ctx, func() [3]float64 {
		return [3]float64{float64(tx.Sent.Load()), float64(rx.Packets.Load()), float64(rx.OutOfOrder.Load())}
	})
	err = errors.Join(werr, tx.Close(), rx.Close())
	if err != nil {
		return nil, err
	}
	secs := b.cpu.At.Sub(a.cpu.At).Seconds()
	sent, got, ooo := b.n[0]-a.n[0], b.n[1]-a.n[1], b.n[2]-a.n[2]
	m := map[string]float64{
		"sent_pps":     sent / secs,
		"pps":          got / secs,
		"received":     got,
		"out_of_order": ooo,
	}
	if sent > 0 {
		m["loss_pct"] = max(0, 100*(1-got/sent))
	}
	e.cpuMetrics(m, a, b)
	if got == 0 {
		return m, fmt.Errorf("no datagram arrived (%.0f sent)", sent)
	}
	m["ooo_per_million"] = 1e6 * ooo / got
	return m, nil
}
