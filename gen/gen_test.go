package gen_test

import (
	"context"
	"math"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

func pair(t *testing.T) *topo.Pair { return pairQ(t, 1) }

func pairQ(t *testing.T, queues int) *topo.Pair {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{Queues: queues})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close %s: %v", p.Name, err)
		}
	})
	// A's own stack stays quiet (no IPv6 neighbour discovery or MLD), so
	// every frame the sink counts or drops is the generator's.
	for _, k := range []string{"all", "default", p.PeerA} {
		if out, err := exec.Command("ip", "netns", "exec", p.A.Name, "sysctl", "-qw", "net.ipv6.conf."+k+".disable_ipv6=1").CombinedOutput(); err != nil {
			t.Fatalf("disable IPv6 in %s: %v: %s", p.A.Name, err, out)
		}
	}
	return p
}

// generate runs a generator on ns A's end of p with cfg and returns its
// summary.
func generate(t *testing.T, p *topo.Pair, cfg gen.Config) gen.Summary {
	t.Helper()
	cfg.Links = []string{p.PeerA}
	var g *gen.Generator
	if err := p.A.Do(func() (err error) { g, err = gen.New(cfg); return err }); err != nil {
		t.Fatalf("gen.New: %v", err)
	}
	defer func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := g.Region().Check(); err != nil {
			t.Errorf("UMEM after close: %v", err)
		}
	}()
	if err := g.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	return g.Stats()
}

// sink runs a forwarder with a counting sink on p's root end of A.
func sink(t *testing.T, p *topo.Pair, queues int) (*fwd.Forwarder, *modes.CountingSink) {
	t.Helper()
	s := modes.NewSink(nil)
	f, err := fwd.New(fwd.Config{Links: []string{p.LinkA}, Handler: s, Queues: queues})
	if err != nil {
		t.Fatalf("fwd.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if _, err := f.Shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return f, s
}

// rxDrops are the kernel's drops at the sink's socket, and frames its
// program passed to the stack.
func rxDrops(l fwd.LinkStats) uint64 {
	return l.Drops[fwd.DropRXRingFull] + l.Drops[fwd.DropRXDropped] + l.Drops["xdp_pass"]
}

// TestTxOnlyToSink: every packet the generator sends reaches the sink or
// is counted as dropped on the way, exactly; the sink sees every flow, and
// no flow's sequence is reordered or duplicated.
func TestTxOnlyToSink(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   gen.Config
		flows int
	}{
		{"64B-4flows", gen.Config{Sizes: []int{64}, Count: 30000, Rate: 50e3, Flows: 4}, 4},
		{"512B-byip-vlan", gen.Config{Sizes: []int{512}, Count: 20000, Rate: 50e3, Flows: 3,
			Template: gen.Template{ByIP: true, VLAN: 100}}, 3},
		{"imix-unpaced", gen.Config{Sizes: gen.IMIX, Count: 20000, Flows: 16, RingSize: 512}, 16},
		{"2-queues-6-flows", gen.Config{Queues: 2, Sizes: []int{128}, Count: 20001, Rate: 50e3, Flows: 6}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pairQ(t, max(tc.cfg.Queues, 1))
			f, s := sink(t, p, max(tc.cfg.Queues, 1))
			sum := generate(t, p, tc.cfg)
			if sum.Sent != tc.cfg.Count || sum.Completed != sum.Sent {
				t.Fatalf("sent %d, completed %d; want %d both", sum.Sent, sum.Completed, tc.cfg.Count)
			}
			deadline := time.Now().Add(5 * time.Second)
			var r modes.SinkReport
			var l fwd.LinkStats
			for {
				r, l = s.Report(), f.LinkStats(0)
				if r.Frames+rxDrops(l) >= sum.Sent || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			drops := rxDrops(l)
			t.Logf("sent %d: sink got %d (+%d other frames), %d dropped before it (%v); lost %d reordered %d dups %d; latency p50 %d p99 %d ns",
				sum.Sent, r.Frames, r.Other, drops, l.Drops, r.Lost, r.Reordered, r.Dups, r.Latency.P50, r.Latency.P99)
			if r.Frames+drops != sum.Sent {
				t.Errorf("sent %d ≠ received %d + dropped %d", sum.Sent, r.Frames, drops)
			}
			if r.Lost > drops || r.Reordered != 0 || r.Dups != 0 {
				t.Errorf("lost %d (≤ %d dropped), reordered %d, duplicates %d", r.Lost, drops, r.Reordered, r.Dups)
			}
			if len(r.Flows) != tc.flows {
				t.Errorf("sink saw %d flows, want %d", len(r.Flows), tc.flows)
			}
			if q := tc.cfg.Queues; q > 1 {
				for _, qs := range sum.Queues {
					if qs.Sent < tc.cfg.Count/uint64(q) {
						t.Errorf("queue %d sent %d of its %d", qs.Queue, qs.Sent, tc.cfg.Count/uint64(q))
					}
				}
			}
			if r.Latency.Count != r.Received {
				t.Errorf("latency samples %d, frames %d", r.Latency.Count, r.Received)
			}
		})
	}
}

// TestTxOnlyCapture: a capture of what the generator sends (tcpdump on
// the far end, no XDP there) shows the configured size, the flows, the VLAN,
// the source MACs taken in turn, and valid IPv4 and UDP checksums (tshark).
func TestTxOnlyCapture(t *testing.T) {
	for _, tool := range []string{"tcpdump", "tshark"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
				t.Fatalf("%s not installed", tool)
			}
			t.Skipf("%s not installed", tool)
		}
	}
	for _, tc := range []struct {
		name  string
		size  int
		vlan  int
		byIP  bool
		flows int
		macs  int // distinct source MACs (Template.SrcMACs; 0 counts as 1)
		hosts int // destinations the flows are spread over (Template.DstHosts)
		ports int // source ports per flow (Template.SrcPorts; 0 counts as 1)
	}{
		{"64B", 64, 0, false, 5, 0, 0, 0},
		{"vlan-1518-byip", 1518, 42, true, 3, 0, 0, 0},
		{"64B-12-macs", 64, 0, false, 5, 12, 0, 0},
		// 5 flows by address, 4 ports each, in turn: 20 5-tuples.
		{"64B-byip-3-hosts-4-ports", 64, 0, true, 5, 0, 3, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pair(t)
			file := filepath.Join(t.TempDir(), "gen.pcap")
			const count = 300
			cmd := exec.Command("tcpdump", "-i", p.LinkA, "-nn", "-U", "-w", file, "-c", strconv.Itoa(count), "udp or vlan")
			var stderr lockedBuffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			defer func() {
				cmd.Process.Kill() // ours, by PID; harmless once exited
			}()
			// tcpdump says "listening on" once its socket is bound.
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(stderr.String(), "listening on") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			var hosts []gen.Host
			for i := range tc.hosts {
				hosts = append(hosts, gen.Host{MAC: net.HardwareAddr{2, 0, 0, 0, 1, byte(i)}, IP: netip.AddrFrom4([4]byte{198, 18, 1, byte(i)})})
			}
			sum := generate(t, p, gen.Config{Sizes: []int{tc.size}, Count: count, Rate: 10e3, Flows: tc.flows,
				Template: gen.Template{VLAN: tc.vlan, ByIP: tc.byIP, SrcMACs: tc.macs, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2},
					DstHosts: hosts, SrcPorts: tc.ports}})
			select {
			case err := <-waited:
				if err != nil {
					t.Fatalf("tcpdump: %v\n%s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("tcpdump saw fewer than %d of the %d frames sent\n%s", count, sum.Sent, stderr.String())
			}
			out, err := exec.Command("tshark", "-r", file, "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
				"-T", "fields", "-E", "separator=,", "-e", "frame.len", "-e", "vlan.id", "-e", "ip.src", "-e", "udp.srcport",
				"-e", "ip.checksum.status", "-e", "udp.checksum.status", "-e", "eth.src", "-e", "ip.dst", "-e", "eth.dst").Output()
			if err != nil {
				t.Fatalf("tshark: %v", err)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != count {
				t.Fatalf("tshark read %d frames, want %d", len(lines), count)
			}
			flows, macs, tuples := map[string]int{}, map[string]int{}, map[string]int{}
			for _, ln := range lines {
				f := strings.Split(ln, ",")
				macs[f[6]]++
				if f[0] != strconv.Itoa(tc.size-gen.FCS) {
					t.Fatalf("frame %q: length %s, want %d (size %d less the FCS)", ln, f[0], tc.size-gen.FCS, tc.size)
				}
				if wantVLAN := map[bool]string{true: strconv.Itoa(tc.vlan)}[tc.vlan > 0]; f[1] != wantVLAN {
					t.Fatalf("frame %q: VLAN %q, want %q", ln, f[1], wantVLAN)
				}
				if f[4] != "1" || f[5] != "1" {
					t.Fatalf("frame %q: IPv4 checksum status %s, UDP %s; want 1 (good) both", ln, f[4], f[5])
				}
				tuples[f[2]+":"+f[3]]++
				if tc.byIP {
					flows[f[2]]++
					if port, _ := strconv.Atoi(f[3]); port < 1024 || port >= 1024+max(tc.ports, 1) {
						t.Fatalf("frame %q: source port %s with flows by address, want 1024..%d", ln, f[3], 1024+max(tc.ports, 1)-1)
					}
				} else {
					flows[f[3]]++
				}
				if tc.hosts > 0 {
					// Flow f (by address: 198.18.0.1+f) goes to host f mod hosts.
					flow := int(netip.MustParseAddr(f[2]).As4()[3]) - 1
					h := hosts[flow%tc.hosts]
					if f[7] != h.IP.String() || f[8] != h.MAC.String() {
						t.Fatalf("frame %q: flow %d to %s %s, want host %d (%s %s)", ln, flow, f[7], f[8], flow%tc.hosts, h.IP, h.MAC)
					}
				}
			}
			if want := tc.flows * max(tc.ports, 1); len(tuples) != want {
				t.Fatalf("%d source address and port pairs in the capture (%v), want %d", len(tuples), tuples, want)
			}
			if len(flows) != tc.flows {
				t.Fatalf("%d flows in the capture (%v), want %d", len(flows), flows, tc.flows)
			}
			for k, n := range flows {
				if n != count/tc.flows {
					t.Errorf("flow %s: %d frames, want %d (round robin)", k, n, count/tc.flows)
				}
			}
			if want := max(tc.macs, 1); len(macs) != want {
				t.Fatalf("%d source MACs in the capture (%v), want %d", len(macs), macs, want)
			}
			for m, n := range macs {
				if n != count/max(tc.macs, 1) {
					t.Errorf("source MAC %s: %d frames, want %d (in turn)", m, n, count/max(tc.macs, 1))
				}
			}
		})
	}
}

// TestTxOnlyRate: paced at 100 kpps the generator sends within 5 % of the
// target, or of what the machine sustains unpaced when that is less
// (stated): never more than the target.
func TestTxOnlyRate(t *testing.T) {
	p := pair(t)
	const target = 100e3
	paced := generate(t, p, gen.Config{Rate: target, Duration: 2 * time.Second})
	rate := float64(paced.Sent) / 2
	t.Logf("paced at %.0f pps: %d sent in 2 s = %.0f pps (%.0f over the run's %.3f s with the drain)", target, paced.Sent, rate, paced.PPS, paced.DurationS)
	if rate > target*1.05 {
		t.Fatalf("%.0f pps, more than 5 %% over the %.0f target", rate, target)
	}
	if rate >= target*0.95 {
		return
	}
	unpaced := generate(t, p, gen.Config{Duration: 2 * time.Second})
	most := float64(unpaced.Sent) / 2
	t.Logf("this machine (shared, loaded) sustains %.0f pps unpaced; the paced run made %.0f", most, rate)
	if rate < 0.95*min(most, target) {
		t.Fatalf("paced %.0f pps: under 95 %% of min(target %.0f, sustained %.0f)", rate, target, most)
	}
}

// TestTxOnlyLongDuration: the longest Duration (--duration 2562047h,
// what a time.Duration holds) is a run's end that never comes, not one
// wrapped past the clock into the past: a run bounded by its count sends
// the count.
func TestTxOnlyLongDuration(t *testing.T) {
	p := pair(t)
	for _, d := range []time.Duration{math.MaxInt64, time.Duration(math.MaxInt64 - gen.Now() + 1), 24 * time.Hour} {
		s := generate(t, p, gen.Config{Count: 1000, Duration: d})
		if s.Sent != 1000 {
			t.Errorf("Count 1000, Duration %v: %d sent; want 1000", d, s.Sent)
		}
	}
}

// TestTxOnlyAllocs: a run's allocations do not grow with its packets
// (a goroutine and its context per run and socket, none per packet),
// unpaced or paced (a round's sleep allocates nothing either).
func TestTxOnlyAllocs(t *testing.T) {
	p := pair(t)
	for _, tc := range []struct {
		name string
		cfg  gen.Config
	}{
		{"unpaced", gen.Config{Count: 100000, Flows: 8}},
		{"paced-in-rounds", gen.Config{Count: 20000, Flows: 8, Rate: 200e3, Window: 20 * time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g *gen.Generator
			cfg := tc.cfg
			cfg.Links = []string{p.PeerA}
			if err := p.A.Do(func() (err error) { g, err = gen.New(cfg); return err }); err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if err := g.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			runtime.ReadMemStats(&after)
			s := g.Stats()
			n := after.Mallocs - before.Mallocs
			t.Logf("%d packets sent in %.3f s (burst %d), %d allocations during Run", s.Sent, s.DurationS, s.Queues[0].Burst, n)
			if s.Sent != cfg.Count || n > 200 {
				t.Fatalf("sent %d of %d with %d allocations: want every packet and a constant few", s.Sent, cfg.Count, n)
			}
		})
	}
}

// lockedBuffer is a strings.Builder a command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
