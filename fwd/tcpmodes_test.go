package fwd_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xps"
)

// netstat reads the named counters of ns from /proc/thread-self/net/netstat
// and /proc/thread-self/net/snmp ("TcpExt:" and "Tcp:" tables).
func netstat(t *testing.T, ns *topo.NS) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := ns.Do(func() error {
		for _, file := range []string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			sc := bufio.NewScanner(f)
			var names []string
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) < 2 {
					continue
				}
				if names == nil || names[0] != fields[0] {
					names = fields
					continue
				}
				for k := 1; k < len(fields) && k < len(names); k++ {
					v, _ := strconv.ParseInt(fields[k], 10, 64)
					out[strings.TrimSuffix(fields[0], ":")+"."+names[k]] = v
				}
				names = nil
			}
			f.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// disableIPv6 turns IPv6 off on ifname inside ns, so that the namespace
// stack sends nothing of its own (router and neighbour solicitations, MLD
// reports) across the forwarder during a measurement.
func disableIPv6(t *testing.T, ns *topo.NS, ifname string) {
	t.Helper()
	if err := ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+ifname+"/disable_ipv6", []byte("1\n"), 0)
	}); err != nil {
		t.Fatalf("disable IPv6 on %s in %s: %v", ifname, ns.Name, err)
	}
}

// TestTCPBulkByMode runs a 128 MiB TCP transfer across a 2-queue forwarder
// in each xps mode and asserts that every mode delivers it byte-exact
// (topo.TCPTransfer checks every byte) and that sticky keeps the
// connection on one TX queue of each link, by the per-queue TX counters
// over the transfer. It reports throughput, the endpoints' reordering and
// retransmission counters and the per-queue counts of every mode.
//
// The connection is the only traffic: IPv6 is off on the namespace ends,
// and a ping beforehand resolves both ends' neighbours. What else may
// cross is an ARP probe and its reply, should a neighbour entry be
// revalidated during the transfer: at most 2 packets, on whatever queue
// ARP goes to. Sticky binds both directions of the connection (one
// decision for both, the default) to one TX queue and moves it only when
// nothing of it is in flight; a bulk transfer always has something in
// flight, so its flow does not move, and moves must stay 0.
func TestTCPBulkByMode(t *testing.T) {
	const n = 128 << 20
	const arpSlack = 2
	var lines []string
	for _, mode := range []xps.Mode{xps.ModeCPU, xps.ModeHash, xps.ModeSticky} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t, topo.Options{Queues: 2})
			disableIPv6(t, p.A, p.PeerA)
			disableIPv6(t, p.B, p.PeerB)
			r := start(t, p, fwd.Config{Queues: 2, XPS: mode})
			if res, err := topo.Ping(p.A, p.V4B, 3, 5*time.Second); err != nil || res.Received == 0 {
				t.Fatalf("ping before the transfer: %+v %v", res, err)
			}
			a0, b0 := netstat(t, p.A), netstat(t, p.B)
			q0 := r.f.XPS().TXQueuePackets
			res, err := topo.TCPTransfer(p.A, p.B, p.V4B, n, time.Minute)
			if err != nil {
				t.Fatalf("TCP: %v", err)
			}
			if res.Bytes != n {
				t.Fatalf("TCP: %d bytes arrived, want %d", res.Bytes, n)
			}
			q1 := r.f.XPS().TXQueuePackets
			a1, b1 := netstat(t, p.A), netstat(t, p.B)
			s := r.stop(t)
			d := func(m0, m1 map[string]int64, k string) int64 { return m1[k] - m0[k] }
			perQueue := map[string][]uint64{}
			for _, l := range []string{p.LinkA, p.LinkB} {
				for q := range q1[l] {
					perQueue[l] = append(perQueue[l], q1[l][q]-q0[l][q])
				}
			}
			line := fmt.Sprintf("%-6s %.2f Gbit/s byte-exact  receiver TCPOFOQueue %d TCPSACKReorder %d  sender RetransSegs %d TCPSACKReorder %d  tx packets per queue over the transfer %v (%s data, %s acks)",
				mode, res.Gbps, d(b0, b1, "TcpExt.TCPOFOQueue"), d(b0, b1, "TcpExt.TCPSACKReorder"),
				d(a0, a1, "Tcp.RetransSegs"), d(a0, a1, "TcpExt.TCPSACKReorder"), perQueue, p.LinkB, p.LinkA)
			t.Log(line)
			lines = append(lines, line)
			if mode != xps.ModeSticky {
				return
			}
			if s.XPS.Moves != 0 || s.XPS.Fallbacks != 0 {
				t.Errorf("sticky: flows moved (moves %d, fallbacks %d) during a bulk transfer", s.XPS.Moves, s.XPS.Fallbacks)
			}
			// Data on p.LinkB, ACKs on p.LinkA: each on one queue.
			segs := uint64(n / 9000) // far fewer packets than any MSS makes
			for _, l := range []string{p.LinkB, p.LinkA} {
				qs := perQueue[l]
				if len(qs) != 2 {
					t.Fatalf("%s: %d TX queues counted, want 2", l, len(qs))
				}
				hi, lo := max(qs[0], qs[1]), min(qs[0], qs[1])
				if l == p.LinkB && hi < segs {
					t.Errorf("sticky: %s sent %v packets per queue, fewer than the %d segments of the transfer at least", l, qs, segs)
				}
				if lo > arpSlack {
					t.Errorf("sticky: the connection left %s on both TX queues: %v packets (at most %d on the second queue may be ARP)", l, qs, arpSlack)
				}
			}
		})
	}
	for _, l := range lines {
		fmt.Println("tcp bulk:", l)
	}
}
