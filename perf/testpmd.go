package main

// The testpmd peer: DPDK's dpdk-testpmd with one net_af_xdp port on each
// root end, forwarding in io mode (frames sent on unchanged, L2 port to
// port), started and stopped by perf as a child process.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

const testpmdInstall = "dpdk-dev librte-net-af-xdp23"

func testpmdContender() *contender {
	return &contender{
		Name:  "testpmd",
		Label: "DPDK testpmd (net_af_xdp, io forwarding)",
		Desc:  "dpdk-testpmd (DPDK 22.11) with a net_af_xdp port on each root end, --forward-mode=io, one forwarding lcore polling both ports; no hugepages",
		build: func(ctx context.Context, e *env) error {
			bins, err := lookTools(testpmdInstall, "dpdk-testpmd")
			if err != nil {
				return err
			}
			if !hasAfxdpPMD(bins["dpdk-testpmd"]) {
				return fmt.Errorf("DPDK's net_af_xdp PMD is not installed (Debian: apt-get install librte-net-af-xdp23)")
			}
			e.bins["testpmd"] = bins["dpdk-testpmd"]
			return nil
		},
		start: startTestpmd,
	}
}

// hasAfxdpPMD reports whether DPDK's net_af_xdp driver is there: a plugin
// (Debian's packages: librte-net-af-xdp23 puts it in the PMD directory
// EAL loads every driver from), or built into a static testpmd.
func hasAfxdpPMD(testpmd string) bool {
	for _, pat := range []string{"/usr/lib/*/dpdk/pmds-*/librte_net_af_xdp.so*", "/usr/lib*/dpdk/pmds-*/librte_net_af_xdp.so*", "/usr/local/lib*/dpdk/pmds-*/librte_net_af_xdp.so*", "/usr/local/lib*/*/dpdk/pmds-*/librte_net_af_xdp.so*"} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return true
		}
	}
	b, err := os.ReadFile(testpmd)
	return err == nil && bytes.Contains(b, []byte("net_af_xdp"))
}

// startTestpmd runs dpdk-testpmd on p's root ends, pinned to the forwarder
// CPU, and waits until a ping crosses it.
func startTestpmd(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
	cpu, q := e.o.FwdCPU, e.queuesOf(p)
	if q > 1 {
		// DPDK 22.11's net_af_xdp reads the queue count from
		// ETHTOOL_GCHANNELS' combined count, which a veth lacks.
		return nil, fmt.Errorf("net_af_xdp (DPDK 22.11) serves one queue of a veth only; this pair has %d", q)
	}
	// EAL's runtime directory (/var/run/dpdk/<prefix>) is named by the
	// prefix: unique per pair, so runs can overlap, and removed on stop.
	prefix := "xf" + pairID(p) + "tp"
	vdev := func(i int, link string) string {
		return fmt.Sprintf("net_af_xdp%d,iface=%s,start_queue=0,queue_count=1", i, link)
	}
	args := []string{
		// The main lcore (0) and the forwarding lcore (1) both on the
		// forwarder CPU, where every forwarder's threads run: the main
		// lcore only sleeps between statistics periods. EAL's own threads
		// take the process's affinity, the same CPU (startChild).
		"--lcores", fmt.Sprintf("0@%d,1@%d", cpu, cpu),
		"-n", "1", "--no-pci", "--no-huge", "--no-shconf", "--no-telemetry", "-m", "512",
		"--file-prefix", prefix,
		"--vdev", vdev(0, p.LinkA), "--vdev", vdev(1, p.LinkB),
		"--",
		// Each RX queue's fill ring holds 2048 mbufs (the PMD's default
		// ring size): enough for both ports and their TX rings.
		"--total-num-mbufs=16384",
		"--forward-mode=io", "--nb-cores=1", "--rxq=1", "--txq=1",
		// Not interactive: with a statistics period testpmd forwards
		// until SIGINT and never reads stdin (/dev/null here).
		"--stats-period=3600", "--auto-start",
	}
	ends, err := snapshotEnds(p.LinkA, p.LinkB)
	if err != nil {
		return nil, err
	}
	cleanup := func(d map[string]any) error {
		err := ends.restore("testpmd", d)
		if rerr := os.Remove(filepath.Join("/var/run/dpdk", prefix)); rerr != nil && !os.IsNotExist(rerr) {
			err = errors.Join(err, fmt.Errorf("remove EAL runtime directory: %w", rerr))
		}
		return err
	}
	ch, err := e.startForwarder(ctx, p, "testpmd", e.bins["testpmd"], args, []int{cpu})
	if err != nil {
		return nil, errors.Join(err, cleanup(nil))
	}
	mode := xdpMode(p.LinkA)
	return func() (map[string]any, error) {
		e.child.Store(nil)
		err := ch.stop(10 * time.Second)
		d, perr := testpmdStats(ch.logPath)
		if d == nil {
			d = map[string]any{}
		}
		d["xdp_mode"], d["lcores"] = mode, fmt.Sprintf("main and forwarding lcore on CPU %d", cpu)
		return d, errors.Join(err, perr, cleanup(d))
	}, nil
}

var (
	testpmdPortRE = regexp.MustCompile(`Forward statistics for port (\d+)`)
	testpmdRXRE   = regexp.MustCompile(`RX-packets:\s*(\d+)\s+RX-dropped:\s*(\d+)`)
	testpmdTXRE   = regexp.MustCompile(`TX-packets:\s*(\d+)\s+TX-dropped:\s*(\d+)`)
)

// testpmdStats reads the forward statistics testpmd prints per port when
// it stops (a_*: port 0, on A's root end; b_*: port 1, on B's): packets received and sent, and dropped (RX: no mbuf or ring
// full; TX: the TX ring full).
func testpmdStats(logPath string) (map[string]any, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("testpmd output: %w", err)
	}
	defer f.Close()
	d := map[string]any{}
	var rx, tx, rxDrop, txDrop uint64
	port := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := testpmdPortRE.FindStringSubmatch(line); m != nil {
			// Port 0 is on A's root end, port 1 on B's.
			port = map[string]string{"0": "a", "1": "b"}[m[1]]
			continue
		}
		if strings.Contains(line, "Accumulated forward statistics") {
			port = "" // the sum of the ports above
			continue
		}
		if port == "" {
			continue
		}
		for _, r := range []struct {
			re          *regexp.Regexp
			dir         string
			sum, dropAt *uint64
		}{{testpmdRXRE, "rx", &rx, &rxDrop}, {testpmdTXRE, "tx", &tx, &txDrop}} {
			if m := r.re.FindStringSubmatch(line); m != nil {
				n, _ := strconv.ParseUint(m[1], 10, 64)
				dr, _ := strconv.ParseUint(m[2], 10, 64)
				d[port+"_"+r.dir+"_packets"], d[port+"_"+r.dir+"_dropped"] = n, dr
				*r.sum += n
				*r.dropAt += dr
			}
		}
	}
	if _, ok := d["a_rx_packets"]; !ok {
		return nil, fmt.Errorf("testpmd printed no forward statistics (see %s)", logPath)
	}
	d["rx_packets"], d["tx_packets"], d["rx_dropped"], d["tx_dropped"], d["drops"] = rx, tx, rxDrop, txDrop, rxDrop+txDrop
	return d, sc.Err()
}
