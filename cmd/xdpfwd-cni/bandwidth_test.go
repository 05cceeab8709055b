package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// timedTCP sends over TCP from src to a listener on addr in dst for dur,
// as fast as it goes, then resets the connection (what the sender's
// buffer still holds is thrown away, not drained at the policed rate),
// and reports the bytes the receiver got and the time from before the
// connection to the receiver's last byte: bounded by dur and 5 s more.
func timedTCP(src, dst *topo.NS, addr netip.Addr, dur time.Duration) (got int64, elapsed time.Duration, err error) {
	var ln *net.TCPListener
	if err := dst.Do(func() (err error) {
		ln, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		return err
	}); err != nil {
		return 0, 0, fmt.Errorf("listen on %s in %s: %w", addr, dst.Name, err)
	}
	defer ln.Close()
	start := time.Now()
	stop := start.Add(dur + 5*time.Second) // the receiver's backstop
	ln.SetDeadline(stop)
	type recv struct {
		n    int64
		last time.Time
	}
	done := make(chan recv, 1)
	go func() {
		var r recv
		defer func() { done <- r }()
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(stop)
		buf := make([]byte, 256<<10)
		for {
			k, err := c.Read(buf)
			if k > 0 {
				r.n, r.last = r.n+int64(k), time.Now()
			}
			if err != nil {
				return
			}
		}
	}()
	var c *net.TCPConn
	err = src.Do(func() error {
		d := net.Dialer{Deadline: start.Add(dur)}
		conn, err := d.Dial("tcp4", ln.Addr().String())
		if err == nil {
			c = conn.(*net.TCPConn)
		}
		return err
	})
	if err != nil {
		ln.Close()
		<-done
		return 0, 0, fmt.Errorf("connect from %s to %s: %w", src.Name, ln.Addr(), err)
	}
	c.SetWriteDeadline(start.Add(dur))
	chunk := make([]byte, 64<<10)
	for {
		if _, err := c.Write(chunk); err != nil {
			break // the deadline, or the receiver gone
		}
	}
	c.SetLinger(0) // a reset: the unsent rest is dropped
	c.Close()
	r := <-done
	if r.n == 0 {
		return 0, 0, errors.New("nothing received")
	}
	return r.n, r.last.Sub(start), nil
}

// podAddr is the first IPv4 address of a CNI result.
func podAddr(t *testing.T, out string) netip.Addr {
	t.Helper()
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("the result: %v\n%s", err, out)
	}
	p, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	return p.Addr()
}

// TestPodBandwidthPoliced: a pod added by cnitool with CAP_ARGS bandwidth
// (8 Mbit/s each way, bursts of 64 KiB: what a kubelet passes for a pod's
// kubernetes.io/ingress-bandwidth and egress-bandwidth), to a conflist
// that gives xdpfwd-cni the "bandwidth" capability, against a running
// xdpfwd switch: a TCP send of 2 s each way delivers at most rate ×
// elapsed + burst (payload bytes: the policer counts whole frames, headers
// included, so no slack is needed), and xdpfwd counts the frames it
// dropped: tx_rate_limited on the pod's link (node → pod, its ingress),
// rx_rate_limited (pod → node, its egress). A pod without limits in the
// same run moves several times the limited pod's bound each way: the
// limit is the policer's, not the machine's. With one worker and with
// two (the pod's link read and written by both: one bucket each way,
// shared).
func TestPodBandwidthPoliced(t *testing.T) {
	for _, q := range []string{"1", "2"} {
		t.Run(q+"-queues", func(t *testing.T) { testPodBandwidthPoliced(t, q) })
	}
}

func testPodBandwidthPoliced(t *testing.T, queues string) {
	r := newRig(t, 0)
	r.daemon.srv.Close(time.Second) // the stand-in makes way for xdpfwd
	// The uplink and a second link, with as many queues as workers.
	for _, up := range []string{"up0", "up1"} {
		ipIn(t, r.node, []string{"link", "add", up, "numtxqueues", queues, "numrxqueues", queues, "type", "veth",
			"peer", "name", up + "p", "numtxqueues", queues, "numrxqueues", queues},
			[]string{"link", "set", up, "up"}, []string{"link", "set", up + "p", "up"})
	}
	ipIn(t, r.node, []string{"addr", "add", gatewayCIDR, "dev", "up1p"})
	d := startXdpfwd(t, buildXdpfwd(t, r.dir), r.node, r.ctl, "--mode", "switch", "--link", "up0", "--link", "up1",
		"--queues", queues, "--metrics", metricsAddr)
	r.forwards = d.forwards

	conf := r.pluginConf(r.hostLocalIPAM())
	conf["capabilities"] = map[string]any{"bandwidth": true}
	r.writeConflist("1.0.0", conf)
	const (
		rate  = 8_000_000 // bits/s
		burst = 64 << 10  // bytes
		dur   = 2 * time.Second
	)
	capArgs := fmt.Sprintf(`CAP_ARGS={"bandwidth":{"ingressRate":%d,"ingressBurst":%d,"egressRate":%d,"egressBurst":%d}}`,
		rate, burst*8, rate, burst*8)
	limited, free := r.newPod("bwlim"), r.newPod("bwfree")
	addrs := map[*topo.NS]netip.Addr{}
	for _, p := range []*topo.NS{limited, free} {
		env := []string{}
		if p == limited {
			env = append(env, capArgs)
		}
		out, err := r.cnitoolEnv("add", p, env...)
		if err != nil {
			t.Fatalf("cnitool add %s: %v\n%s", p.Name, err, out)
		}
		addrs[p] = podAddr(t, out)
		r.attached(p, addrs[p])
		t.Cleanup(func() { r.cnitoolEnv("del", p, env...) })
	}
	host := r.hostName(limited)

	type run struct {
		bytes   int64
		elapsed time.Duration
	}
	measure := func(p *topo.NS) (in, out run) {
		t.Helper()
		var err error
		if in.bytes, in.elapsed, err = timedTCP(r.node, p, addrs[p], dur); err != nil {
			t.Fatalf("node → %s: %v", p.Name, err)
		}
		if out.bytes, out.elapsed, err = timedTCP(p, r.node, gatewayAddr, dur); err != nil {
			t.Fatalf("%s → node: %v", p.Name, err)
		}
		return in, out
	}
	mbps := func(x run) float64 { return float64(x.bytes) * 8 / x.elapsed.Seconds() / 1e6 }
	bound := func(x run) int64 { return int64(rate/8*x.elapsed.Seconds()) + burst }
	limIn, limOut := measure(limited)
	freeIn, freeOut := measure(free)
	t.Logf("limited pod (%d bit/s, burst %d B each way): node → pod %d B in %v (%.2f Mbit/s, bound %d B); pod → node %d B in %v (%.2f Mbit/s, bound %d B)",
		rate, burst, limIn.bytes, limIn.elapsed, mbps(limIn), bound(limIn), limOut.bytes, limOut.elapsed, mbps(limOut), bound(limOut))
	t.Logf("unlimited pod: node → pod %d B in %v (%.1f Mbit/s); pod → node %d B in %v (%.1f Mbit/s)",
		freeIn.bytes, freeIn.elapsed, mbps(freeIn), freeOut.bytes, freeOut.elapsed, mbps(freeOut))
	for _, c := range []struct {
		dir       string
		lim, free run
	}{{"node → pod (the pod's ingress)", limIn, freeIn}, {"pod → node (the pod's egress)", limOut, freeOut}} {
		if c.lim.bytes > bound(c.lim) {
			t.Errorf("%s: %d bytes delivered in %v; want at most rate × elapsed + burst = %d (%.2f Mbit/s against 8)",
				c.dir, c.lim.bytes, c.lim.elapsed, bound(c.lim), mbps(c.lim))
		}
		if c.free.bytes < 3*bound(c.lim) {
			t.Errorf("%s: the unlimited pod moved %d bytes, under 3 × the limited pod's bound %d: the comparison says nothing",
				c.dir, c.free.bytes, bound(c.lim))
		}
	}
	got := drops(t, r.node, []string{host, r.hostName(free)})
	if got[host+" tx_rate_limited"] == 0 || got[host+" rx_rate_limited"] == 0 {
		t.Errorf("xdpfwd's drops of %s: %v; want tx_rate_limited and rx_rate_limited counted", host, got)
	}
	for _, reason := range []string{"tx_rate_limited", "rx_rate_limited"} {
		if v := got[r.hostName(free)+" "+reason]; v != 0 {
			t.Errorf("the unlimited pod's link: %s %.0f", reason, v)
		}
	}
	d.running()
}
