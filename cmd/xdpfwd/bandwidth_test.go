package main

import (
	be "encoding/binary"
	"encoding/json"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestBandwidthBadInput: link add's rates and bursts that cannot be met
// exit 2 with a message naming the flag, before any socket is dialled.
func TestBandwidthBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"link", "add", "bwx", "--ingress-rate", "fast"}, `flag -ingress-rate: "fast": want bits per second`},
		{[]string{"link", "add", "bwx", "--egress-rate", "-8M"}, `"-8M": want bits per second`},
		{[]string{"link", "add", "bwx", "--egress-rate", "999"}, `"999": want bits per second`},
		{[]string{"link", "add", "bwx", "--egress-rate", "2000T"}, `"2000T": want bits per second`},
		{[]string{"link", "add", "bwx", "--ingress-burst", "64KiB"}, "--ingress-burst without --ingress-rate"},
		{[]string{"link", "add", "bwx", "--egress-rate", "8M", "--egress-burst", "1000"}, `"1000": want bytes, 1518 (a full frame) .. 4294967294`},
		// Bursts whose bits overflowed a uint64 (2^61 GiB + 1 GiB was a
		// burst of 1 GiB, 2^61 + 2000 bytes one of 2000), and 4 GiB, over
		// the bound the message gave.
		{[]string{"link", "add", "bwx", "--ingress-rate", "1M", "--ingress-burst", "2147483649GiB"}, `flag -ingress-burst: "2147483649GiB": want bytes, 1518 (a full frame) .. 4294967294`},
		{[]string{"link", "add", "bwx", "--ingress-rate", "1M", "--ingress-burst", "2305843009213695952"}, `"2305843009213695952": want bytes, 1518 (a full frame) .. 4294967294`},
		{[]string{"link", "add", "bwx", "--egress-rate", "1M", "--egress-burst", "4GiB"}, `"4GiB": want bytes, 1518 (a full frame) .. 4294967294`},
		{[]string{"link", "add", "bwx", "--egress-rate", "8M", "--egress-burst", "lots"}, `flag -egress-burst: "lots": want bytes`},
		{[]string{"link", "del", "bwx", "--egress-rate", "8M"}, "are for add"},
	} {
		r := runBin(t, 10*time.Second, nil, append(tt.args, "--control", "/nonexistent/x.sock")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("xdpfwd %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), r.code, r.stderr, exitUsage, tt.want)
		}
	}
}

// TestBandwidthFlags: rates as tc and Kubernetes write them (SI units,
// bits), bursts in bytes, and the default burst, into the add's bits.
func TestBandwidthFlags(t *testing.T) {
	for _, tt := range []struct {
		in, eg, inBurst, egBurst string
		want                     *linkop.Bandwidth
	}{
		{"", "", "", "", nil},
		{"8M", "", "64KiB", "", &linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 64 << 10 * 8}},
		{"8Mbit", "1.5G", "", "1MiB", &linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 64 << 10 * 8, EgressRate: 1.5e9, EgressBurst: 8 << 20}},
		{"8mbit", "100kbit/s", "", "", &linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 64 << 10 * 8, EgressRate: 1e5, EgressBurst: 64 << 10 * 8}},
		// The default burst: 10 ms at the rate over 64 KiB.
		{"", "10G", "", "", &linkop.Bandwidth{EgressRate: 1e10, EgressBurst: 1e8}},
		{"1e9", "", "", "", &linkop.Bandwidth{IngressRate: 1e9, IngressBurst: 1e7}},
	} {
		var f bandwidthFlags
		for _, s := range []struct {
			v    string
			flag interface{ Set(string) error }
		}{{tt.in, &f.ingressRate}, {tt.eg, &f.egressRate}, {tt.inBurst, &f.ingressBurst}, {tt.egBurst, &f.egressBurst}} {
			if s.v != "" {
				if err := s.flag.Set(s.v); err != nil {
					t.Fatalf("%q: %v", s.v, err)
				}
			}
		}
		got, err := f.options()
		if err != nil || (got == nil) != (tt.want == nil) || got != nil && *got != *tt.want {
			t.Errorf("%+v: %+v, %v; want %+v", tt, got, err, tt.want)
		}
	}
}

// TestBurstFlagBounds: a burst is 1518 (a full frame) .. 4294967294 bytes
// (the policer's modes.MaxBurst bits, under 4 GiB as the bandwidth
// plugin's), or 0 for the default; anything else, overflowing values
// included, is refused with those bounds, never wrapped into another
// burst.
func TestBurstFlagBounds(t *testing.T) {
	const bounds = "1518 (a full frame) .. 4294967294"
	for _, tt := range []struct {
		burst string
		want  uint64 // bits; 0: refused
	}{
		{"1518", 1518 * 8},
		{"64KiB", 64 << 10 * 8},
		{"3GiB", 3 << 30 * 8},
		{"4194303KiB", 4194303 << 10 * 8},
		{"4294967294", 4294967294 * 8},
		{"0", 64 << 10 * 8}, // the default: 10 ms of 1 Mbit/s is less than 64 KiB
		{"1517", 0},
		{"4294967295", 0}, // 4 GiB - 1: its bits are over the bound
		{"4GiB", 0},
		{"4194304K", 0},
		{"2147483649GiB", 0},       // ×8 wrapped to 1 GiB's bits
		{"2305843009213695952", 0}, // ×8 wrapped to 2000 bytes' bits
		{"18446744073709551615", 0},
		{"18446744073709551616", 0},
		{"17179869184GiB", 0}, // 2^64 bytes: the unit's product overflows
		{"1e30", 0},
		{"-1", 0},
		{"NaN", 0},
		{"Inf", 0},
		{"1iB", 0},
		{"64 KiB", 0},
		{"0x10000", 0},
		{"", 0},
	} {
		var f bandwidthFlags
		if err := f.ingressRate.Set("1M"); err != nil {
			t.Fatal(err)
		}
		err := f.ingressBurst.Set(tt.burst)
		var b *linkop.Bandwidth
		if err == nil {
			b, err = f.options()
		}
		switch {
		case tt.want == 0 && (err == nil || !strings.Contains(err.Error(), bounds)):
			t.Errorf("--ingress-burst %q: %+v, %v; want refused with %q", tt.burst, b, err, bounds)
		case tt.want != 0 && (err != nil || b == nil || b.IngressBurst != tt.want):
			t.Errorf("--ingress-burst %q: %+v, %v; want a burst of %d bits", tt.burst, b, err, tt.want)
		}
	}
}

// TestRateFlagBounds: a rate is 1000 .. 10^15 bits/s, or 0 (no limit);
// anything else is refused with those bounds.
func TestRateFlagBounds(t *testing.T) {
	const bounds = "1000..1000000000000000"
	for _, tt := range []struct {
		rate string
		want uint64 // bits/s; ok false: refused
		ok   bool
	}{
		{"0", 0, true},
		{"1k", 1000, true},
		{"1000T", 1e15, true},
		{"1e15bit/s", 1e15, true},
		{"999", 0, false},
		{"1000000000000001", 0, false},
		{"1001T", 0, false},
		{"18446744073709551615", 0, false},
		{"18446744073709551616", 0, false},
		{"1e30", 0, false},
		{"-1M", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"-Inf", 0, false},
		{"", 0, false},
	} {
		var r bitRateFlag
		err := r.Set(tt.rate)
		switch {
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), bounds)):
			t.Errorf("rate %q: %d, %v; want refused with %q", tt.rate, r, err, bounds)
		case tt.ok && (err != nil || uint64(r) != tt.want):
			t.Errorf("rate %q: %d, %v; want %d", tt.rate, r, err, tt.want)
		}
	}
}

// TestSizeFlagBounds: --max-umem is a byte count up to 2^63-1 (an int64,
// fwd.Config.MaxUMEM), the unit's product checked before it is taken;
// anything else is refused with those bounds.
func TestSizeFlagBounds(t *testing.T) {
	const bounds = "0 .. 9223372036854775807"
	for _, tt := range []struct {
		size string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"256MiB", 256 << 20, true},
		{"2G", 2 << 30, true},
		{"9007199254740991K", 9007199254740991 << 10, true},
		{"8589934591GiB", 8589934591 << 30, true},
		{"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 0, false},
		{"8589934592GiB", 0, false}, // 2^63
		{"9007199254740992KiB", 0, false},
		{"18446744073709551615", 0, false},
		{"17179869184GiB", 0, false}, // 2^64: over a uint64
		{"1e30", 0, false},
		{"-1", 0, false},
		{"NaN", 0, false},
		{"1iB", 0, false},
		{"1B", 0, false},
		{"3TB", 0, false},
		{"", 0, false},
	} {
		var c fwd.Config
		maxUMEM, _ := fwd.SettingNamed("max-umem")
		err := maxUMEM.Set(&c, tt.size)
		switch {
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), bounds)):
			t.Errorf("size %q: %d, %v; want refused with %q", tt.size, c.MaxUMEM, err, bounds)
		case tt.ok && (err != nil || c.MaxUMEM != tt.want):
			t.Errorf("size %q: %d, %v; want %d", tt.size, c.MaxUMEM, err, tt.want)
		}
	}
}

// TestLimitsFor: an add's limits reach a switch as they are; outside
// switch mode, or broken, they are the request's fault.
func TestLimitsFor(t *testing.T) {
	bw := &linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 1 << 19}
	sw := &controlSocket{mode: "switch", sw: modes.NewSwitch(2, 0, 0)}
	if l, err := sw.limitsFor(linkop.AddOptions{Bandwidth: bw}); err != nil || l != (modes.Limits{IngressRate: 8e6, IngressBurst: 1 << 19}) {
		t.Errorf("switch: %+v, %v", l, err)
	}
	if l, err := sw.limitsFor(linkop.AddOptions{}); err != nil || !l.IsZero() {
		t.Errorf("switch, no bandwidth: %+v, %v", l, err)
	}
	if _, err := sw.limitsFor(linkop.AddOptions{Bandwidth: &linkop.Bandwidth{EgressRate: 8e6}}); err == nil || !strings.Contains(err.Error(), "want both or neither") {
		t.Errorf("switch, a rate without a burst: %v", err)
	}
	// A client's uint64s, the largest included, are compared, not
	// converted: refused with the policer's bounds.
	for _, b := range []*linkop.Bandwidth{{IngressRate: 8e6, IngressBurst: math.MaxUint64}, {EgressRate: math.MaxUint64, EgressBurst: 1 << 20}} {
		if _, err := sw.limitsFor(linkop.AddOptions{Bandwidth: b}); err == nil || !strings.Contains(err.Error(), "12144 (a full frame) .. 34359738359 bits") && !strings.Contains(err.Error(), "1000..1000000000000000") {
			t.Errorf("switch, %+v: %v; want refused with the bounds", *b, err)
		}
	}
	sink := &controlSocket{mode: "sink"}
	if _, err := sink.limitsFor(linkop.AddOptions{Bandwidth: bw}); err == nil || !strings.Contains(err.Error(), "a switch's") {
		t.Errorf("sink: %v; want refused, a switch's", err)
	}
}

// TestDaemonPolicesLinkBandwidth: a switch daemon with a pod's link added
// by `xdpfwd link add --ingress-rate 1M --egress-rate 1M` (bursts of 64
// KiB) and another without limits: a burst of UDP datagrams each way
// through the limited link delivers at most rate × elapsed + burst
// (payload bytes, under the frames the policer counts), while the
// unlimited link moves several times that. Killed (kill -9) and started
// again, the daemon adds the link back with its limits (its link state
// file keeps them): the same bound holds again. Its summary counts
// tx_rate_limited and rx_rate_limited on the limited link, none on the
// other.
func TestDaemonPolicesLinkBandwidth(t *testing.T) {
	h := newHosts(t, 3)
	dir := t.TempDir()
	ctl, summary := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "summary.json")
	args := []string{"run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl, "--summary", summary}
	macs := make([]net.HardwareAddr, 3)
	for i := range macs {
		m, err := h.NS[i].HardwareAddr("eth0")
		if err != nil {
			t.Fatal(err)
		}
		macs[i] = m
	}
	const (
		rate  = 1_000_000 // bits/s
		burst = 64 << 10  // bytes
		count = 3000      // datagrams of 1000 bytes a burst: 3 MB
		size  = 1000
	)
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	for i, lim := range [][]string{1: {"--ingress-rate", "1M", "--ingress-burst", "64KiB", "--egress-rate", "1Mbit", "--egress-burst", "64KiB"}, 2: nil} {
		if i == 0 {
			continue
		}
		a := append([]string{"link", "add", h.Links[i], "--mac", macs[i].String(), "--control", ctl}, lim...)
		if r := runBin(t, 10*time.Second, nil, a...); r.code != 0 {
			t.Fatalf("xdpfwd %s: exit %d, %s", strings.Join(a, " "), r.code, r.stderr)
		}
	}
	bound := func(r topo.UDPResult) int { return int(rate/8*r.Elapsed.Seconds()) + burst }
	policed := func(when string) {
		t.Helper()
		for _, i := range []int{1, 2} { // ARP resolved both ways, within the bursts
			if res, err := topo.Ping(h.NS[0], h.V4[i], 1, 3*time.Second); err != nil || res.Received != 1 {
				t.Fatalf("%s: ping 0→%d: %+v, %v", when, i, res, err)
			}
		}
		in, errIn := topo.UDPBurst(h.NS[0], h.NS[1], h.V4[1], count, size, 10*time.Second)
		out, errOut := topo.UDPBurst(h.NS[1], h.NS[0], h.V4[0], count, size, 10*time.Second)
		free, errFree := topo.UDPBurst(h.NS[0], h.NS[2], h.V4[2], count, size, 10*time.Second)
		if errIn != nil || errOut != nil || errFree != nil {
			t.Fatalf("%s: bursts: %v, %v, %v", when, errIn, errOut, errFree)
		}
		t.Logf("%s: limited link, into the pod %d of %d datagrams in %v (bound %d bytes), out of it %d in %v (bound %d); unlimited %d in %v",
			when, in.Received, in.Sent, in.Elapsed, bound(in), out.Received, out.Elapsed, bound(out), free.Received, free.Elapsed)
		for _, c := range []struct {
			dir string
			r   topo.UDPResult
		}{{"into the limited pod", in}, {"out of the limited pod", out}} {
			if got := c.r.Received * size; got > bound(c.r) {
				t.Errorf("%s: %s: %d bytes in %v; want at most rate × elapsed + burst = %d", when, c.dir, got, c.r.Elapsed, bound(c.r))
			}
		}
		if got := free.Received * size; got < 3*bound(in) {
			t.Errorf("%s: the unlimited pod received %d bytes, under 3 × the limited one's bound %d", when, got, bound(in))
		}
	}
	policed("first start")
	d.cmd.Process.Kill()
	<-d.done
	b, err := os.ReadFile(ctl + ".links")
	var doc linkStateDoc
	want := linkop.Bandwidth{IngressRate: rate, IngressBurst: burst * 8, EgressRate: rate, EgressBurst: burst * 8}
	if err != nil || json.Unmarshal(b, &doc) != nil || doc.Limits[h.Links[1]] != want || len(doc.Limits) != 1 {
		t.Fatalf("link state file: %s, %v; want the limits of %s: %+v", b, err, h.Links[1], want)
	}
	d = startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	// link list says so: the limited link's MAC and limits, the other's
	// MAC alone, the uplink neither (JSON and the table's POLICY).
	r := runBin(t, 10*time.Second, nil, "link", "list", "--json", "--control", ctl)
	var listed struct{ Links []linkop.Link }
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil {
		t.Fatalf("link list --json: exit %d, %s %s", r.code, r.stdout, r.stderr)
	}
	for _, k := range listed.Links {
		wantMAC, wantBW := "", (*linkop.Bandwidth)(nil)
		switch k.Name {
		case h.Links[1]:
			wantMAC, wantBW = macs[1].String(), &want
		case h.Links[2]:
			wantMAC = macs[2].String()
		}
		// A port restored after a restart is provisional (its MAC
		// the pod's until heard elsewhere): the switch has heard
		// nothing of the network yet.
		wantState := ""
		if wantMAC != "" {
			wantState = "provisional"
		}
		if k.MAC != wantMAC || k.PortState != wantState || (k.Bandwidth == nil) != (wantBW == nil) || wantBW != nil && *k.Bandwidth != *wantBW {
			t.Errorf("link list after the restart: %s has mac %q (%q), bandwidth %+v; want %q (%q), %+v", k.Name, k.MAC, k.PortState, k.Bandwidth, wantMAC, wantState, wantBW)
		}
	}
	if r := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl); !strings.Contains(r.stdout, "mac "+macs[1].String()+" (provisional) in 1Mbit/s out 1Mbit/s") {
		t.Errorf("link list: no POLICY \"mac %s (provisional) in 1Mbit/s out 1Mbit/s\" for %s:\n%s", macs[1], h.Links[1], r.stdout)
	}
	policed("restarted")
	d.interrupt()
	var sum fwd.Summary
	if b, err := os.ReadFile(summary); err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary: %v", err)
	}
	lim, free := sum.Links[h.Links[1]], sum.Links[h.Links[2]]
	if lim.Drops[fwd.DropTXRateLimited] == 0 || lim.Drops[fwd.DropRXRateLimited] == 0 {
		t.Errorf("summary of the restarted daemon: %s's drops %v; want tx_rate_limited and rx_rate_limited", h.Links[1], lim.Drops)
	}
	if free.Drops[fwd.DropTXRateLimited] != 0 || free.Drops[fwd.DropRXRateLimited] != 0 {
		t.Errorf("summary: the unlimited %s's drops %v", h.Links[2], free.Drops)
	}
	if !strings.Contains(d.stderr.String(), "tx_rate_limited=") {
		t.Errorf("the exit log's drops by reason do not name tx_rate_limited:\n%s", d.stderr.String())
	}
}

// TestDaemonPolicesFloods: a pod's ingress limit holds for every frame
// the switch sends it, floods included. A switch daemon with a pod's link
// added with --ingress-rate 1M (burst 64 KiB) and another pod's without
// limits; the uplink's host sends 2,000 UDP datagrams for the limited
// pod's address in raw Ethernet frames addressed to the pod's MAC
// (unicast), to the broadcast address and to a multicast one (Linux takes
// a datagram for its own address in any of them). Each time the pod
// receives at most rate × elapsed + burst (frame bytes, which the policer
// counts) and at least half the burst, about what the unicast frames get;
// every frame the switch took in from the uplink (the kernel may drop
// some before it, on a full RX ring, counted there) was either sent to
// the pod or counted as tx_rate_limited on its link; the unlimited pod's
// link is sent every flooded copy and counts no tx_rate_limited.
func TestDaemonPolicesFloods(t *testing.T) {
	h := newHosts(t, 3)
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl, "--metrics", "127.0.0.1:0")
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	url := "http://" + waitMetricsAddr(t, d, 5*time.Second) + "/metrics"
	const (
		rate  = 1_000_000 // bits/s
		burst = 64 << 10  // bytes
		count = 2000      // frames a case
		size  = 1000      // bytes a frame
	)
	macs := make([]net.HardwareAddr, 3)
	for i := range macs {
		m, err := h.NS[i].HardwareAddr("eth0")
		if err != nil {
			t.Fatal(err)
		}
		macs[i] = m
	}
	for i, lim := range [][]string{1: {"--ingress-rate", "1M", "--ingress-burst", "64KiB"}, 2: nil} {
		if i == 0 {
			continue
		}
		a := append([]string{"link", "add", h.Links[i], "--mac", macs[i].String(), "--control", ctl}, lim...)
		if r := runBin(t, 10*time.Second, nil, a...); r.code != 0 {
			t.Fatalf("xdpfwd %s: exit %d, %s", strings.Join(a, " "), r.code, r.stderr)
		}
	}
	// The limited pod's receiver, for every case.
	var rc *net.UDPConn
	if err := h.NS[1].Do(func() (err error) {
		rc, err = net.ListenUDP("udp4", &net.UDPAddr{IP: h.V4[1].AsSlice()})
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", h.NS[1].Name, err)
	}
	defer rc.Close()
	if err := rc.SetReadBuffer(4 << 20); err != nil {
		t.Fatal(err)
	}
	port := uint16(rc.LocalAddr().(*net.UDPAddr).Port)

	// counter sums a counter of link's over its queues (and reason's, if
	// one is given).
	counter := func(fams map[string]*dto.MetricFamily, name, link, reason string) float64 {
		var sum float64
		for _, m := range fams[name].GetMetric() {
			var l, r string
			for _, p := range m.GetLabel() {
				switch p.GetName() {
				case "link":
					l = p.GetValue()
				case "reason":
					r = p.GetValue()
				}
			}
			if l == link && r == reason {
				sum += m.GetCounter().GetValue()
			}
		}
		return sum
	}
	type counts struct{ rx0, tx1, limited1, tx2, limited2 float64 }
	read := func() counts {
		f := scrapeFamilies(t, url)
		return counts{
			rx0:      counter(f, "xdpfwd_rx_packets_total", h.Links[0], ""),
			tx1:      counter(f, "xdpfwd_tx_packets_total", h.Links[1], ""),
			limited1: counter(f, "xdpfwd_drops_total", h.Links[1], fwd.DropTXRateLimited),
			tx2:      counter(f, "xdpfwd_tx_packets_total", h.Links[2], ""),
			limited2: counter(f, "xdpfwd_drops_total", h.Links[2], fwd.DropTXRateLimited),
		}
	}
	// A full bucket for each case: an empty one fills in burst / rate.
	refill := time.Duration(float64(burst*8) / rate * float64(time.Second))
	for _, c := range []struct {
		name  string
		dst   net.HardwareAddr
		flood bool
	}{
		{"unicast", macs[1], false},
		{"broadcast", net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true},
		{"multicast", net.HardwareAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}, true},
	} {
		time.Sleep(refill + 100*time.Millisecond)
		frames := make([][]byte, count)
		for i := range frames {
			frames[i] = topo.UDPFrame(c.dst, macs[0], h.V4[0], h.V4[1], 40000, port, size)
			be.BigEndian.PutUint32(frames[i][42:], uint32(i))
		}
		before := read()
		type result struct {
			n    int
			last time.Time
		}
		got := make(chan result, 1)
		start := time.Now()
		go func() {
			// Until 300 ms pass without a datagram once the first came
			// (or 10 s without any).
			var r result
			buf := make([]byte, 2048)
			for {
				wait := 10 * time.Second
				if r.n > 0 {
					wait = 300 * time.Millisecond
				}
				rc.SetReadDeadline(time.Now().Add(wait))
				k, err := rc.Read(buf)
				if err != nil {
					got <- r
					return
				}
				if k == size-42 {
					r.n++
					r.last = time.Now()
				}
			}
		}()
		if err := topo.SendRaw(h.NS[0], frames, 10*time.Second); err != nil {
			t.Fatalf("%s: send: %v", c.name, err)
		}
		r := <-got
		after := read()
		elapsed := r.last.Sub(start)
		bound := int(rate/8*elapsed.Seconds()) + burst
		rx0, tx1, lim1 := after.rx0-before.rx0, after.tx1-before.tx1, after.limited1-before.limited1
		t.Logf("%s: the limited pod received %d of %d datagrams (%d bytes of frames) in %v, bound %d bytes; xdpfwd took in %.0f from the uplink, sent it %.0f, tx_rate_limited %.0f; the unlimited pod's link sent %.0f",
			c.name, r.n, count, r.n*size, elapsed.Round(time.Millisecond), bound, rx0, tx1, lim1, after.tx2-before.tx2)
		if got := r.n * size; got > bound || got < burst/2 {
			t.Errorf("%s: the limited pod received %d bytes of frames in %v; want at most rate × elapsed + burst = %d, and at least half the burst (%d)",
				c.name, got, elapsed, bound, burst/2)
		}
		if tx1+lim1 < rx0 || tx1 < float64(r.n) {
			t.Errorf("%s: of %.0f frames from the uplink, %.0f sent to the limited pod and %.0f counted tx_rate_limited (it received %d): frames lost uncounted",
				c.name, rx0, tx1, lim1, r.n)
		}
		if tx2 := after.tx2 - before.tx2; c.flood && tx2 < rx0 {
			t.Errorf("%s: the unlimited pod's link sent %.0f frames; want every one of the %.0f flooded", c.name, tx2, rx0)
		}
		if after.limited2 != 0 {
			t.Errorf("%s: the unlimited pod's link counts %.0f tx_rate_limited", c.name, after.limited2)
		}
	}
	d.interrupt()
}
