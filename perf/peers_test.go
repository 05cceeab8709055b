package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/perf/internal/measure"
	"github.com/xdpfwd/xdpfwd/perf/internal/report"
	"github.com/xdpfwd/xdpfwd/perf/internal/xdpprog"
)

// TestPeersForward starts each peer as perf does, on a pair of
// perf's topology, sends a bounded UDP burst through it, and checks that the
// datagrams arrived and the peer counted them, then that stopping it left
// nothing behind: no XDP program on the root ends, their promiscuity as
// before, no process, no runtime directory; and the same after the
// forwarder was killed with SIGKILL before its stop. A peer that is not installed is
// skipped, unless XDPFWD_REQUIRE_PEERS=1.
func TestPeersForward(t *testing.T) {
	topo.RequireRoot(t)
	require := os.Getenv(requirePeersEnv) == "1"
	for _, c := range contenderTable() {
		if !slices.Contains(peerNames, c.Name) {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			e := peerTestEnv(t)
			if err := c.build(ctx, e); err != nil {
				if require {
					t.Fatalf("%s=1, but %s cannot run: %v", requirePeersEnv, c.Name, err)
				}
				t.Skipf("%s cannot run here: %v", c.Name, err)
			}
			p, err := topo.NewPair(topo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := p.Close(); err != nil {
					t.Errorf("remove %s: %v", p.Name, err)
				}
			})
			if err := staticNeighbours(p); err != nil {
				t.Fatal(err)
			}
			e.pairs[pairKey{queues: 1}] = p
			promA, promB := topo.Promiscuity(t, p.LinkA), topo.Promiscuity(t, p.LinkB)
			// Open vSwitch's datapath tap device, which ovs-vswitchd
			// leaves even after a clean exit: the stop removes it, unless
			// another Open vSwitch had one before.
			_, err = netlink.LinkByName(ovsDatapathTap)
			dpTapBefore := err == nil

			start := time.Now()
			stop, err := c.start(ctx, e, p)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			stopped := false
			t.Cleanup(func() {
				if !stopped {
					stop()
				}
			})
			t.Logf("%s forwards after %v (a ping crossed it)", c.Name, time.Since(start).Round(time.Millisecond))
			if e.childPID() == 0 {
				t.Error("no forwarder process is recorded for the CPU figures")
			}
			// Every process it runs names the pair's links or directory
			// on its command line; the check must see them now to mean
			// anything after the stop.
			if procs := procsNaming(pairID(p)); len(procs) == 0 {
				t.Fatalf("no process names %s on its command line", pairID(p))
			} else {
				t.Logf("processes: %v", procs)
			}
			// What it records in the topology (OVS: its bridge's tap
			// device) exists now, so the checks after the stop mean
			// something.
			if left := leftovers(e.res.Topology); len(left) != len(e.res.Topology) {
				t.Errorf("recorded %v, of which only %v exist while it runs", e.res.Topology, left)
			}
			for _, l := range []string{p.LinkA, p.LinkB} {
				if m := xdpMode(l); m == "" {
					t.Errorf("%s: no XDP program while %s runs", l, c.Name)
				}
			}

			// A burst well within every ring on the way (the veth's 256,
			// the peers' 2048-entry AF_XDP rings), so nothing is lost to
			// a full ring, only to a fault.
			const count = 200
			res, err := topo.UDPBurst(p.A, p.B, p.V4B, count, 64, 5*time.Second)
			if err != nil {
				t.Fatalf("UDP burst: %v", err)
			}
			if res.Received != count || res.Duplicates != 0 {
				t.Errorf("UDP burst: %d of %d datagrams arrived, %d duplicates", res.Received, count, res.Duplicates)
			}

			d, err := stop()
			stopped = true
			if err != nil {
				t.Errorf("stop: %v", err)
			}
			t.Logf("details: %v", d)
			// What it sent on both ports: the burst and the pings.
			if tx, ok := d["tx_packets"].(uint64); !ok || tx < uint64(res.Received) {
				t.Errorf("%s reports tx_packets %v, fewer than the %d datagrams that arrived", c.Name, d["tx_packets"], res.Received)
			}
			if d["xdp_mode"] != "native" {
				t.Errorf("xdp_mode %v, want native", d["xdp_mode"])
			}

			// Nothing left behind.
			// What a stop must leave: the pair as it found it.
			clean := func(when string) {
				t.Helper()
				for _, l := range []string{p.LinkA, p.LinkB} {
					if on, id, err := xdpprog.Attached(l); err != nil || on {
						t.Errorf("%s: %s: XDP program %d still attached (%v)", when, l, id, err)
					}
				}
				if a, b := topo.Promiscuity(t, p.LinkA), topo.Promiscuity(t, p.LinkB); a != promA || b != promB {
					t.Errorf("%s: promiscuity %d, %d, %d, %d before", when, a, b, promA, promB)
				}
				if procs := procsNaming(pairID(p)); len(procs) > 0 {
					t.Errorf("%s: processes left: %v", when, procs)
				}
				if left := leftovers(e.res.Topology); len(left) > 0 {
					t.Errorf("%s: left behind: %v", when, left)
				}
				if _, err := netlink.LinkByName(ovsDatapathTap); err == nil && !dpTapBefore {
					t.Errorf("%s: %s left behind", when, ovsDatapathTap)
				}
			}
			clean("after the stop")
			for _, dir := range []string{filepath.Join("/var/run/dpdk", "xf"+pairID(p)+"tp"), filepath.Join(e.tmp, "ovs-"+pairID(p))} {
				if _, err := os.Stat(dir); err == nil {
					t.Errorf("%s left behind", dir)
				}
			}

			// A forwarder that dies without cleaning up (SIGKILL) leaves
			// its XDP programs attached: the stop removes them, and says so.
			stop, err = c.start(ctx, e, p)
			if err != nil {
				t.Fatalf("second start: %v", err)
			}
			stopped = false
			pid := e.childPID()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %d: %v", pid, err)
			}
			_, err = stop()
			stopped = true
			t.Logf("stop after SIGKILL: %v", err)
			if err == nil || !strings.Contains(err.Error(), "left XDP program") {
				t.Errorf("stop after SIGKILL: %v, want it to report the XDP program left behind", err)
			}
			clean("after SIGKILL and stop")
		})
	}
}

// peerTestEnv is the part of perf's run environment a contender's start
// and stop use.
func peerTestEnv(t *testing.T) *env {
	o := &Options{}
	o.defaults()
	if _, err := o.placeCPUs(); err != nil {
		t.Fatal(err)
	}
	return &env{o: o, res: &report.Results{}, tmp: t.TempDir(), bins: map[string]string{}, pairs: map[pairKey]*topo.Pair{},
		hosts: map[*topo.Pair]*topo.Hosts{}, echoes: map[*topo.Pair]*echoCounter{}, own: measure.NewOwnCPU()}
}

// procsNaming lists the processes whose command line contains s, as
// "pid comm".
func procsNaming(s string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "comm"))
		out = append(out, fmt.Sprintf("%d %s", pid, bytes.TrimSpace(comm)))
	}
	return out
}

// TestCPUMask checks OVS's pmd-cpu-mask for CPUs beyond a machine word.
func TestCPUMask(t *testing.T) {
	for cpu, want := range map[int]string{0: "0x1", 1: "0x2", 3: "0x8", 4: "0x10", 6: "0x40", 67: "0x80000000000000000"} {
		if got := cpuMask(cpu); got != want {
			t.Errorf("cpuMask(%d) = %s, want %s", cpu, got, want)
		}
	}
}
