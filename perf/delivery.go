package main

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
)

// The delivery workload: w.Flows UDP flows (distinct source ports, so the
// sending veth spreads them over its TX queues by flow hash, and each lands
// on the RX queue of the same number on the forwarder's ingress link), at
// w.Rate packets/s, a bounded count, over links with w.Queues queues, the
// forwarder run with its defaults on every CPU: on a 2-CPU machine xdpfwd
// then has two workers for four RX queues. It counts what was offered, what
// arrived, what xdpfwd received, sent and counted as lost, and what the
// kernel saw per RX queue of the ingress link (ethtool -S on the veth:
// rx_queue_<i>_xdp_packets, and _xdp_redirect, those its XDP program
// handed to an AF_XDP socket). Frames on a queue with no socket pass to
// the root namespace's stack and vanish there, counted by nobody xdpfwd
// reports to.

// queueStats reads the ingress link's per-RX-queue XDP counters.
func queueStats(ifname string, queues int) (pkts, redirected []float64, err error) {
	st, err := measure.EthtoolStats(ifname)
	if err != nil {
		return nil, nil, err
	}
	for q := range queues {
		pkts = append(pkts, float64(st[fmt.Sprintf("rx_queue_%d_xdp_packets", q)]))
		redirected = append(redirected, float64(st[fmt.Sprintf("rx_queue_%d_xdp_redirect", q)]))
	}
	return pkts, redirected, nil
}

// waitQuiet polls read until its value has not changed for quiet, or
// within has passed.
func waitQuiet(ctx context.Context, read func() uint64, quiet, within time.Duration) {
	deadline := time.Now().Add(within)
	last, since := read(), time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
		if v := read(); v != last {
			last, since = v, time.Now()
		} else if time.Since(since) >= quiet {
			return
		}
	}
}

func runDelivery(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	queues := e.queuesOf(p)
	rxq, txq, maxRX, _, err := measure.EthtoolChannels(p.LinkA)
	if err != nil {
		return nil, err
	}
	if rxq != queues && maxRX >= queues {
		// A veth created with N queues may run with fewer: set them.
		for _, l := range []string{p.LinkA, p.LinkB} {
			if err := setEthtoolChannels(l, queues, queues); err != nil {
				return nil, err
			}
		}
		if rxq, txq, _, _, err = measure.EthtoolChannels(p.LinkA); err != nil {
			return nil, err
		}
	}
	if rxq != queues {
		return nil, fmt.Errorf("%s runs with %d RX queues (ethtool -l), want %d", p.LinkA, rxq, queues)
	}
	rate := float64(max(1, w.Rate))
	count := max(1000, int(rate*e.o.Duration.Seconds()))
	deadline := time.Now().Add(e.o.Duration*2 + 5*time.Second)

	rx, err := traffic.NewUDPReceiver(p.B, p.V4B, deadline.Add(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer rx.Close()
	addr := e.child.Load().metrics()
	var f0, f1 measure.FwdCounts
	if addr != "" {
		if f0, err = measure.ReadSettledFwdCounts(ctx, addr, p.LinkA, p.LinkB); err != nil {
			return nil, err
		}
	}
	k0, r0, err := queueStats(p.LinkA, queues)
	if err != nil {
		return nil, err
	}
	before := rx.Packets.Load()
	sent, serr := traffic.FlowSend(ctx, p.A, p.V4A, netip.AddrPortFrom(p.V4B, uint16(rx.Port)), w.Flows, w.Size, rate, count, deadline)
	if serr != nil {
		return nil, serr
	}
	// Everything in flight arrives (or is lost) within a few quiet 100 ms.
	waitQuiet(ctx, rx.Packets.Load, 200*time.Millisecond, 3*time.Second)
	got := float64(rx.Packets.Load() - before)
	k1, r1, err := queueStats(p.LinkA, queues)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{
		"offered":       float64(sent),
		"delivered":     got,
		"delivered_pct": 100 * got / float64(max(1, sent)),
		"rx_queues":     float64(rxq),
		"tx_queues":     float64(txq),
		"offered_pps":   rate,
	}
	var kin, kred float64
	for q := range queues {
		m["rxq"+strconv.Itoa(q)+"_xdp_packets"] = k1[q] - k0[q]
		m["rxq"+strconv.Itoa(q)+"_xdp_redirect"] = r1[q] - r0[q]
		kin += k1[q] - k0[q]
		kred += r1[q] - r0[q]
	}
	m["kernel_xdp_packets"], m["kernel_xdp_redirect"] = kin, kred
	if addr != "" {
		if f1, err = measure.ReadSettledFwdCounts(ctx, addr, p.LinkA, p.LinkB); err != nil {
			return m, err
		}
		m["fwd_rx"], m["fwd_tx"], m["fwd_dropped"] = f1.RX-f0.RX, f1.TX-f0.TX, f1.Dropped-f0.Dropped
		m["fwd_counted_loss_pct"] = 100 * m["fwd_dropped"] / float64(max(1, sent))
		var qs []string
		for q := range f1.RXByQueue {
			qs = append(qs, q)
		}
		m["fwd_rx_queues"] = float64(len(qs))
		for _, q := range qs {
			m["fwd_rxq"+q] = f1.RXByQueue[q] - f0.RXByQueue[q]
		}
		// Lost with nobody counting: neither delivered nor among
		// xdpfwd's drops (nor the receiver's, at this rate none).
		m["uncounted_loss_pct"] = max(0, 100*(float64(sent)-got-m["fwd_dropped"])/float64(max(1, sent)))
	}
	if got == 0 {
		return m, fmt.Errorf("no datagram arrived (%d sent)", sent)
	}
	return m, nil
}

// setEthtoolChannels sets a link's RX and TX queue counts (`ethtool -L
// rx N tx N`).
func setEthtoolChannels(ifname string, rx, tx int) error {
	return ethtool.SetChannels(ifname, uint32(rx), uint32(tx))
}
