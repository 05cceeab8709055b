package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/gen"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
	"github.com/xdpfwd/xdpfwd/perf/internal/traffic"
)

// The generator-cost workloads: what a traffic source costs per
// packet, at one offered rate, with nothing else on the path. Each sends
// the same 60-byte UDP frame (64 with FCS) from A's eth0, dropped by XDP
// on the root end (the baseline contender): perf's sendmmsg sender, Debian
// netsniff-ng's trafgen (apt-get install netsniff-ng), and xdpfwd's txonly
// generator (package gen). Per packet that left A's eth0 (its
// tx_packets): the headline is the CPU of the generator's processes (perf
// itself for the in-process senders, trafgen's for trafgen) and of
// ksoftirqd, where the kernel's work for the sender is done (in the
// sender's system calls or in softirq); cpu_ns_per_pkt is the whole
// machine's, which on a shared machine carries the other loads too
// (other_cpu_pct says how much).

const (
	genFrame = 60 // bytes on the wire without FCS
	genIPLen = genFrame - 14
)

// runGen returns the run function of the generator-cost workload of kind
// (sendmmsg, trafgen, txonly).
func runGen(kind string) func(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
	return func(ctx context.Context, e *env, c *contender, p *topo.Pair, w *workload) (map[string]float64, error) {
		rate := float64(e.o.CostRate)
		if w.Rate > 0 {
			rate = float64(w.Rate)
		}
		macB, err := p.B.HardwareAddr(p.PeerB)
		if err != nil {
			return nil, err
		}
		// B's address resolved, so that every sender's frames leave
		// A (no forwarder answers ARP here).
		if err := ipIn(ctx, p.A, "neigh", "replace", p.V4B.String(), "lladdr", macB.String(), "dev", p.PeerA); err != nil {
			return nil, err
		}
		defer ipIn(context.Background(), p.A, "neigh", "del", p.V4B.String(), "dev", p.PeerA)
		length := e.o.Warmup + e.o.Duration + 2*time.Second
		stop, pids, err := startGen(kind, p, macB, rate, length)
		if err != nil {
			return nil, err
		}
		a, b, werr := e.window(ctx, func() [3]float64 {
			var rt float64
			for _, pid := range pids() {
				rt += float64(measure.ProcessRuntime(pid))
			}
			return [3]float64{float64(txPackets(p)), rt}
		})
		if err := errors.Join(werr, stop()); err != nil {
			return nil, err
		}
		secs := b.cpu.At.Sub(a.cpu.At).Seconds()
		sent := b.n[0] - a.n[0]
		m := map[string]float64{
			"sent_pps":    sent / secs,
			"pps":         sent / secs,
			"cpu_busy_ns": measure.BusyNs(a.cpu, b.cpu),
			"own_cpu_ns":  b.own - a.own + b.n[1] - a.n[1],
		}
		e.cpuMetrics(m, a, b)
		if sent == 0 {
			return m, fmt.Errorf("%s: no packet left %s", kind, p.PeerA)
		}
		m["cpu_ns_per_pkt"] = m["cpu_busy_ns"] / sent
		// perf's own CPU (the in-process senders), ksoftirqd's and a
		// trafgen's processes.
		m["own_cpu_ns_per_pkt"] = m["own_cpu_ns"] / sent
		if rate > 0 {
			m["rate_pct"] = 100 * sent / secs / rate
		}
		return m, nil
	}
}

// startGen starts a generator of kind on A's eth0 for d; stop ends it and
// waits, pids lists its processes other than perf's.
func startGen(kind string, p *topo.Pair, macB net.HardwareAddr, rate float64, d time.Duration) (stop func() error, pids func() []int, err error) {
	none := func() []int { return nil }
	switch kind {
	case "sendmmsg":
		tx, err := traffic.NewUDPSender(p.A, p.V4A, netip.AddrPortFrom(p.V4B, 9), genIPLen, rate, time.Now().Add(d))
		if err != nil {
			return nil, nil, err
		}
		return tx.Close, none, nil
	case "txonly":
		cfg := gen.Config{Links: []string{p.PeerA}, Sizes: []int{genFrame + 4}, Rate: rate, Duration: d,
			Template: gen.Template{DstMAC: macB, SrcIP: p.V4A, DstIP: p.V4B}}
		var g *gen.Generator
		if err := p.A.Do(func() (err error) { g, err = gen.New(cfg); return err }); err != nil {
			return nil, nil, fmt.Errorf("txonly: %w", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		return func() error {
			cancel()
			return errors.Join(<-done, g.Close())
		}, none, nil
	case "trafgen":
		bin, err := exec.LookPath("trafgen")
		if err != nil {
			return nil, nil, fmt.Errorf("trafgen: %w (Debian: apt-get install netsniff-ng)", err)
		}
		macA, err := p.A.HardwareAddr(p.PeerA)
		if err != nil {
			return nil, nil, err
		}
		// One process (-P 1), its socket memory and the IRQ affinity
		// left alone (--no-sock-mem, -Q: the machine is shared), no exit report.
		pkt := fmt.Sprintf("{ eth(da=%s, sa=%s), ipv4(sa=%s, da=%s), udp(sp=1024, dp=9), fill(0x00, %d) }",
			macB, macA, p.V4A, p.V4B, genFrame-14-20-8)
		n := uint64(rate * d.Seconds())
		cmd := exec.Command("ip", "netns", "exec", p.A.Name, bin, "--dev", p.PeerA, "-P", "1", "--no-sock-mem", "-Q", "-C",
			"-b", strconv.FormatFloat(rate, 'f', 0, 64)+"pps", "-n", strconv.FormatUint(n, 10), pkt)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("trafgen: %w", err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return func() error {
				cmd.Process.Signal(syscall.SIGINT)
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					cmd.Process.Kill()
					<-done
					return fmt.Errorf("trafgen did not stop on SIGINT: killed\n%s", out.String())
				}
				return nil
			}, func() []int {
				return descendants(cmd.Process.Pid)
			}, nil
	}
	return nil, nil, fmt.Errorf("unknown generator %q", kind)
}

// descendants is pid and every process below it (ip netns exec execs
// trafgen, which forks its workers).
func descendants(pid int) []int {
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(out[i]), "task", strconv.Itoa(out[i]), "children"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// txPackets is what left A's eth0.
func txPackets(p *topo.Pair) uint64 {
	var n uint64
	p.A.Do(func() error {
		l, err := netlink.LinkByName(p.PeerA)
		if err == nil && l.Attrs().Statistics != nil {
			n = l.Attrs().Statistics.TxPackets
		}
		return err
	})
	return n
}

// ipIn runs ip(8) with args in namespace ns.
func ipIn(ctx context.Context, ns *topo.NS, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"-n", ns.Name}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s %s: %w: %s", ns.Name, strings.Join(args, " "), err, out)
	}
	return nil
}
