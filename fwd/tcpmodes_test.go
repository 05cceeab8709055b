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

// TestTCPBulkByMode runs a TCP bulk transfer across a 2-queue forwarder in
// each xps mode and reports throughput and the endpoints' reordering and
// retransmission counters.
func TestTCPBulkByMode(t *testing.T) {
	const n = 128 << 20
	var lines []string
	for _, mode := range []xps.Mode{xps.ModeCPU, xps.ModeHash, xps.ModeSticky} {
		t.Run(mode.String(), func(t *testing.T) {
			p := newPair(t, topo.Options{Queues: 2})
			r := start(t, p, fwd.Config{Queues: 2, XPS: mode})
			a0, b0 := netstat(t, p.A), netstat(t, p.B)
			res, err := topo.TCPTransfer(p.A, p.B, p.V4B, n, time.Minute)
			if err != nil {
				t.Fatalf("TCP: %v", err)
			}
			a1, b1 := netstat(t, p.A), netstat(t, p.B)
			s := r.stop(t)
			d := func(m0, m1 map[string]int64, k string) int64 { return m1[k] - m0[k] }
			line := fmt.Sprintf("%-6s %.2f Gbit/s  receiver TCPOFOQueue %d TCPSACKReorder %d  sender RetransSegs %d TCPSACKReorder %d  tx queues %v",
				mode, res.Gbps, d(b0, b1, "TcpExt.TCPOFOQueue"), d(b0, b1, "TcpExt.TCPSACKReorder"),
				d(a0, a1, "Tcp.RetransSegs"), d(a0, a1, "TcpExt.TCPSACKReorder"), s.XPS.TXQueuePackets)
			t.Log(line)
			lines = append(lines, line)
		})
	}
	for _, l := range lines {
		fmt.Println("tcp bulk:", l)
	}
}
