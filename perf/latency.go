package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/report"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
)

// The latency workload: UDP request/response at a low, fixed rate, timed
// in the client. One UDP socket in A (unconnected, so the kernel picks the
// TX queue per datagram) is shared by two client threads pinned to CPU 0
// and CPU 1; A's eth0 has XPS set so that CPU i transmits on queue i, and a
// veth delivers TX queue i into its peer's RX queue i: the one flow (same
// addresses and ports both ways) reaches the forwarder on two RX queues, as
// a flow does whose sender moves between CPUs. A userspace echo in B sends
// every request back. The defect this shows: a packet that reaches a
// worker which does not own its flow's TX queue waits for the owning worker
// to wake up from poll(2) (20–30 ms on xdpfwd before workers woke each
// other), at a load too low to keep the owner busy.

// setXPS maps CPU i to TX queue i of ns's eth0 (i < queues), through
// sysfs as `ip netns exec` mounts it for the namespace; with on false it
// removes the map again (the kernel then picks the queue by flow hash).
func setXPS(ns *topo.NS, ifname string, queues int, on bool) error {
	var cmds []string
	for q := range queues {
		mask := 0
		if on {
			mask = 1 << q
		}
		cmds = append(cmds, fmt.Sprintf("echo %x > /sys/class/net/%s/queues/tx-%d/xps_cpus", mask, ifname, q))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns.Name, "sh", "-c", strings.Join(cmds, " && ")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("set XPS on %s in %s: %w: %s", ifname, ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// latencyResult is what the client measured.
type latencyResult struct {
	sent, received [2]int // by client CPU slot
	hist           [3]*traffic.Histogram
	late           int // replies after the wait for stragglers
}

// runLatency runs w.Count requests at w.Rate per second, half from a
// thread on each of the first two CPUs, and times each reply.
func runLatency(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	// One client per queue, up to two: on one queue it runs on the load
	// CPU, away from the forwarder's; on two, one on each of the first two
	// CPUs, so that XPS sends their requests through both queues.
	clients, cpus := min(2, w.Queues), e.o.LoadCPUs[:1]
	if clients == 2 {
		cpus = e.allCPUs
		if len(cpus) < 2 {
			return nil, fmt.Errorf("the latency workload needs two CPUs, perf may use %v", cpus)
		}
	}
	if q := e.queuesOf(p); q < clients {
		return nil, fmt.Errorf("the latency workload needs %d queues per veth, %s has %d", clients, p.Name, q)
	}
	r := &latencyRun{count: w.latencyCount(e.o), clients: clients, rate: float64(max(1, w.Rate)),
		res: latencyResult{hist: [3]*traffic.Histogram{{}, {}, {}}}}
	sendFor := time.Duration(float64(r.count) / r.rate * float64(time.Second))
	r.deadline = time.Now().Add(sendFor + 5*time.Second)

	if clients == 2 {
		if err := setXPS(p.A, p.PeerA, 2, true); err != nil {
			return nil, err
		}
		// The other workloads on this pair, and the next contender's
		// start-up check, get the kernel's default choice back.
		defer setXPS(p.A, p.PeerA, 2, false)
	}
	echo, err := traffic.NewUDPEcho(p.B, p.V4B, r.deadline.Add(time.Second), r.count*2)
	if err != nil {
		return nil, err
	}
	defer echo.Close()
	if r.fd, _, err = traffic.UDPSocket(p.A, p.V4A); err != nil {
		return nil, err
	}
	defer unix.Close(r.fd)
	r.to = traffic.Sockaddr4(netip.AddrPortFrom(p.V4B, uint16(echo.Port)))

	r.base = time.Now()
	recvDone := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		recvDone <- r.receive()
	}()
	// The clients take turns: request k leaves at k/rate, from client
	// k mod clients.
	payload := max(16, w.Size-traffic.UDPHeaders)
	var wg sync.WaitGroup
	sendErr := make([]error, 2)
	for slot := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sendErr[slot] = traffic.OnPinnedThread([]int{cpus[slot]}, func() error { return r.send(ctx, slot, payload) })
		}()
	}
	wg.Wait()
	// Stragglers: every reply, or a second after the last request.
	wait := time.Now().Add(time.Second)
	for r.got.Load() < int64(r.res.sent[0]+r.res.sent[1]) && time.Now().Before(wait) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	r.stopRecv.Store(true)
	rerr := <-recvDone // within sockTimeout
	if err := errors.Join(sendErr[0], sendErr[1], rerr, ctx.Err()); err != nil {
		return nil, err
	}
	return r.res.metrics(r.rate, clients)
}

// latencyRun is one latency sample: count requests at rate from clients
// threads on socket fd to the echo at to, sent and timed from base,
// until deadline.
type latencyRun struct {
	fd             int
	to             unix.Sockaddr
	base, deadline time.Time
	count, clients int
	rate           float64
	// res.sent[slot] is client slot's; res.received and res.hist the
	// receiver's, read once both are done.
	res latencyResult
	// got counts the replies received; stopRecv tells the receiver to
	// stop waiting for the rest.
	got      atomic.Int64
	stopRecv atomic.Bool
}

// receive takes the replies, each once, timing it against the send time
// it carries, until every request is answered, stopRecv or the deadline.
func (r *latencyRun) receive() error {
	buf := make([]byte, 2048)
	seen := make([]bool, r.count)
	for n := 0; n < r.count && !r.stopRecv.Load() && time.Now().Before(r.deadline); {
		k, _, err := unix.Recvfrom(r.fd, buf, 0)
		now := time.Since(r.base)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("client recvfrom: %w", err)
		}
		if k < 16 {
			continue
		}
		id := binary.BigEndian.Uint64(buf[0:])
		t0 := time.Duration(binary.BigEndian.Uint64(buf[8:]))
		if id >= uint64(r.count) || seen[id] {
			continue
		}
		seen[id] = true
		slot := int(id % uint64(r.clients))
		r.res.received[slot]++
		r.res.hist[slot].Record(now - t0)
		r.res.hist[2].Record(now - t0)
		n++
		r.got.Add(1)
	}
	return nil
}

// send is client slot: requests slot, slot+clients, ... of payload bytes,
// each when it falls due, carrying its number and send time.
func (r *latencyRun) send(ctx context.Context, slot, payload int) error {
	buf := make([]byte, payload)
	for k := slot; k < r.count && ctx.Err() == nil; k += r.clients {
		due := r.base.Add(time.Duration(float64(k) / r.rate * float64(time.Second)))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if !time.Now().Before(r.deadline) {
			return nil
		}
		binary.BigEndian.PutUint64(buf[0:], uint64(k))
		binary.BigEndian.PutUint64(buf[8:], uint64(time.Since(r.base)))
		if err := unix.Sendto(r.fd, buf, 0, r.to); err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) {
				continue // counted as lost
			}
			return fmt.Errorf("client sendto: %w", err)
		}
		r.res.sent[slot]++
	}
	return nil
}

// metrics are the sample's figures: requests and replies, in all and by
// client, the loss, and the latency quantiles.
func (res *latencyResult) metrics(rate float64, clients int) (map[string]float64, error) {
	sent, recv := res.sent[0]+res.sent[1], res.received[0]+res.received[1]
	m := map[string]float64{
		"requests":      float64(sent),
		"replies":       float64(recv),
		"offered_rps":   rate,
		"cpu0_requests": float64(res.sent[0]),
		"cpu1_requests": float64(res.sent[1]),
		"cpu0_replies":  float64(res.received[0]),
		"cpu1_replies":  float64(res.received[1]),
	}
	if sent == 0 {
		return m, errors.New("no request could be sent")
	}
	// Losing every reply is a result (the loss column says 100 %), not a
	// failed sample; there is just no latency to give.
	m["loss_pct"] = max(0, 100*(1-float64(recv)/float64(sent)))
	if recv > 0 {
		m["p50_us"] = res.hist[2].Quantile(0.50) / 1e3
		m["p99_us"] = res.hist[2].Quantile(0.99) / 1e3
		m["max_us"] = res.hist[2].Quantile(1) / 1e3
	}
	for slot := range clients {
		if res.sent[slot] > 0 {
			m[fmt.Sprintf("cpu%d_loss_pct", slot)] = max(0, 100*(1-float64(res.received[slot])/float64(res.sent[slot])))
		}
		if res.received[slot] > 0 {
			m[fmt.Sprintf("cpu%d_p99_us", slot)] = res.hist[slot].Quantile(0.99) / 1e3
		}
	}
	return m, nil
}

// latencyCount is the requests of one latency sample.
func (w *workload) latencyCount(o *Options) int {
	if o.Quick {
		return report.QuickLatencyCount(w.Count)
	}
	return w.Count
}
