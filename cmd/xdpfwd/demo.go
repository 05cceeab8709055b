// `xdpfwd demo`: two namespaces joined through xdpfwd (xconnect), or
// three on one switching xdpfwd (--mode switch), traffic checked across
// them, a PASS or FAIL verdict, everything built removed.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// cmdDemo is the main job on an embedded default: it builds two namespaces
// joined through xdpfwd, proves that traffic crosses both ways, and removes
// everything it built, also on Ctrl-C and on failure.
func cmdDemo(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	d := &demo{stdout: stdout, stderr: stderr}
	d.ff.register(fs, false)
	fs.DurationVar(&d.duration, "duration", 5*time.Second, "how long to keep traffic flowing after the checks, `D`")
	fs.IntVar(&d.tcpMiB, "tcp-mib", 64, "size of the verified TCP transfer, `N` MiB")
	fs.IntVar(&d.udpCount, "udp-count", 100000, "`N` datagrams in the counted UDP burst")
	fs.StringVar(&d.metrics, "metrics", "", "serve Prometheus metrics and /healthz on this `ADDR` during the demo")
	fs.Float64Var(&d.maxLoss, "max-loss", demoMaxLoss, "FAIL when more than `PCT` percent of a direction's UDP datagrams are lost (sent unpaced: a busy machine loses some at xdpfwd's RX ring)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if d.duration < 0 || d.tcpMiB < 1 || d.udpCount < 1 || !(d.maxLoss >= 0 && d.maxLoss <= 100) {
		return usageError{"demo: --duration must be ≥ 0, --tcp-mib and --udp-count ≥ 1, --max-loss 0..100"}
	}
	var err error
	if d.cfg, d.logger, err = d.ff.config(stderr); err != nil {
		return err
	}
	if err := fwd.CheckCapabilities(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch d.ff.mode {
	case "switch":
		err = d.switchHosts(ctx)
	case "xconnect":
		err = d.xconnect(ctx)
	default:
		return usageError{fmt.Sprintf("demo: --mode %s: the demo shows xconnect and switch", d.ff.mode)}
	}
	// The verdict comes last, after the cleanup: a demo that could not
	// remove what it built failed too.
	if err != nil && !strings.HasPrefix(d.verdict, "FAIL") {
		d.verdict = "FAIL: " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	fmt.Fprintln(stdout, d.verdict)
	return err
}

// demo is one `xdpfwd demo`: its flags, the forwarder's Config they make,
// where it writes, and the verdict its mode's run sets.
type demo struct {
	ff     fwdFlags
	cfg    fwd.Config // without links: the demo's mode gives them
	logger *slog.Logger

	duration         time.Duration // traffic both ways after the checks
	tcpMiB, udpCount int
	maxLoss          float64 // percent
	metrics          string  // --metrics: "" for none

	stdout, stderr io.Writer
	// verdict is the PASS or FAIL line, printed last (cmdDemo); "" when
	// the cleanup failed.
	verdict string
}

// serveMetrics serves --metrics for f, if asked; stop ends it.
func (d *demo) serveMetrics(f *fwd.Forwarder) (stop func(), err error) {
	if d.metrics == "" {
		return func() {}, nil
	}
	return serveMetrics(d.metrics, f, d.logger, d.ff.metricsOf())
}

// xconnect is the demo of the default mode: two namespaces, one xdpfwd
// between them. It sets d.verdict to the PASS or FAIL line.
func (d *demo) xconnect(ctx context.Context) (err error) {
	stdout, stderr := d.stdout, d.stderr
	// The namespace ends keep their default offloads, as a container's
	// veth does: xdpfwd finishes the partial checksums they send.
	p, err := topo.NewPair(topo.Options{Queues: max(d.ff.cfg.Queues, 1), TxChecksum: true})
	if err != nil {
		return fmt.Errorf("demo: build namespaces: %w", err)
	}
	defer func() {
		if cerr := p.Close(); cerr != nil {
			fmt.Fprintf(stderr, "xdpfwd demo: cleanup: %v\n", cerr)
			err = errors.Join(err, fmt.Errorf("demo: cleanup: %w", cerr))
			d.verdict = ""
			return
		}
		fmt.Fprintf(stdout, "removed namespaces %s, %s and links %s, %s\n", p.A.Name, p.B.Name, p.LinkA, p.LinkB)
	}()

	cfg := d.cfg
	cfg.Links = []string{p.LinkA, p.LinkB}
	f, err := fwd.New(cfg)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	stopMetrics, err := d.serveMetrics(f)
	if err != nil {
		f.Close()
		return err
	}
	defer stopMetrics()
	a, b := f.LinkStats(0), f.LinkStats(1)
	fmt.Fprintf(stdout, "xdpfwd demo: namespaces %s and %s, forwarding %s <-> %s\n", p.A.Name, p.B.Name, p.LinkA, p.LinkB)
	fmt.Fprintf(stdout, "  xdp %s/%s, sockets %s mode, %d queue(s), umem %d MiB on %s\n",
		a.XDPMode, b.XDPMode, a.BindMode, f.Queues(), f.Region().Size()>>20, f.Region().Backing())

	runCtx, cancelRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- f.Run(runCtx) }()

	var res demoResult
	checks := make(chan error, 1)
	go func() { checks <- d.traffic(ctx, p, &res) }()
	var checkErr error
	select {
	case checkErr = <-checks:
	case <-ctx.Done():
		fmt.Fprintln(stdout, "interrupted: stopping and cleaning up")
		checkErr = errors.New("interrupted")
	}
	cancelRun()
	runErr := <-runDone
	sum, closeErr := f.Shutdown()
	var links []fwd.LinkStats
	for _, name := range []string{p.LinkA, p.LinkB} {
		l := sum.Links[name]
		links = append(links, l)
		fmt.Fprintf(stdout, "  %s: rx %d pkts %d bytes, tx %d pkts %d bytes, drops %d: %s\n", name, l.RXPackets, l.RXBytes, l.TXPackets, l.TXBytes, l.TotalDrops(), dropReasons(l))
	}
	explainDrops(stdout, links)
	var csums uint64
	for _, l := range sum.Links {
		csums += l.ChecksumsCompleted
	}
	var total uint64
	for _, v := range sum.TXPaths {
		total += v
	}
	if total > 0 {
		fmt.Fprintf(stdout, "  tx paths: inline %.1f%%, frame %.1f%%, frag %.1f%%, chain %.1f%%; %d partial checksums completed\n",
			100*float64(sum.TXPaths["inline"])/float64(total), 100*float64(sum.TXPaths["frame"])/float64(total),
			100*float64(sum.TXPaths["frag"])/float64(total), 100*float64(sum.TXPaths["chain"])/float64(total), csums)
	}
	fmt.Fprintf(stdout, "  umem: %d MiB on %s, %.0f distinct 4 KiB pages (%.0f of 2 MiB) per 1,000 TX descriptors, %d addresses leaked\n",
		sum.UMEM.SizeBytes>>20, sum.UMEM.Backing, sum.PagesPer1KDesc["4k"], sum.PagesPer1KDesc["2m"], sum.UMEM.LeakedAddresses)
	res.checkErr = errors.Join(checkErr, runErr, closeErr)
	res.leaked = sum.UMEM.LeakedAddresses
	res.maxLoss = d.maxLoss
	res.bothWays = d.duration > 0
	d.verdict, err = res.verdict()
	return err
}

// demoMaxLoss is the default bound on the share of UDP datagrams lost.
// The demo sends UDP unpaced, as fast as the sender's CPU allows: when
// xdpfwd's worker gets less CPU than the sender (the machine is busy, or
// has as few cores as the demo has busy threads), the kernel drops what
// no longer fits the socket's RX ring (rx_ring_full), and TCP would slow
// down instead. Half lost means xdpfwd forwarded less than half of what
// one sender offered: something is wrong, or the machine too busy to say.
const demoMaxLoss = 50.0

// demoResult is what the demo's checks found, for its verdict.
type demoResult struct {
	checkErr error // a check that failed: ping, TCP, a UDP burst, the run
	// burst is the counted UDP burst A→B; dirSent and dirGot the
	// datagrams of the both-ways phase, A→B and B→A.
	burst           topo.UDPResult
	dirSent, dirGot [2]int
	bothWays        bool // the both-ways phase ran (--duration > 0)
	leaked          int
	maxLoss         float64 // percent
}

// verdict is the demo's last line, PASS or FAIL with what it judged, and
// the error that makes its exit code nonzero on FAIL.
func (r *demoResult) verdict() (string, error) {
	var fails []string
	if r.checkErr != nil {
		fails = append(fails, r.checkErr.Error())
	}
	loss := func(sent, got int) float64 {
		if sent == 0 {
			return 100
		}
		return 100 * float64(sent-got) / float64(sent)
	}
	worst := loss(r.burst.Sent, r.burst.Received)
	if r.checkErr == nil && r.bothWays {
		for d, name := range []string{"A→B", "B→A"} {
			if r.dirGot[d] == 0 {
				fails = append(fails, fmt.Sprintf("udp %s: nothing delivered of %d sent", name, r.dirSent[d]))
			}
			worst = max(worst, loss(r.dirSent[d], r.dirGot[d]))
		}
	}
	if r.checkErr == nil && worst > r.maxLoss {
		fails = append(fails, fmt.Sprintf("udp loss %.1f%% > %.0f%%", worst, r.maxLoss))
	}
	if r.leaked != 0 {
		fails = append(fails, fmt.Sprintf("%d UMEM addresses leaked", r.leaked))
	}
	criterion := fmt.Sprintf("all pings answered, TCP byte for byte, UDP delivered both ways with at most %.0f%% lost (worst %.1f%%), 0 UMEM addresses leaked", r.maxLoss, worst)
	if len(fails) == 0 {
		return "PASS: " + criterion, nil
	}
	return "FAIL: " + strings.Join(fails, "; ") + " (want " + criterion + ")", errors.New("demo failed: " + strings.Join(fails, "; "))
}

// explainDrops prints, once per drop reason the links counted, what it
// means.
func explainDrops(w io.Writer, links []fwd.LinkStats) {
	seen := map[string]bool{}
	for _, l := range links {
		for k, v := range l.Drops {
			if v != 0 {
				seen[k] = true
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(seen)) {
		fmt.Fprintf(w, "    %s: %s\n", k, dropMeaning[k])
	}
}

// traffic runs the checks on p, each bounded in time and count, and
// notes in res what they found.
func (d *demo) traffic(ctx context.Context, p *topo.Pair, res *demoResult) error {
	out, tcpMiB, udpCount, duration := d.stdout, d.tcpMiB, d.udpCount, d.duration
	pings := []struct {
		name string
		src  *topo.NS
		dst  netip.Addr
	}{{"ping  A→B", p.A, p.V4B}, {"ping  B→A", p.B, p.V4A}, {"ping6 A→B", p.A, p.V6B}, {"ping6 B→A", p.B, p.V6A}}
	for _, c := range pings {
		r, err := topo.Ping(c.src, c.dst, 3, 3*time.Second)
		if err != nil || r.Received != r.Sent {
			return fmt.Errorf("%s %s: %d/%d replies: %v", c.name, c.dst, r.Received, r.Sent, err)
		}
		fmt.Fprintf(out, "  %s %-18s %d/%d replies, median rtt %v\n", c.name, c.dst, r.Received, r.Sent, r.RTT.Round(time.Microsecond))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	n := int64(tcpMiB) << 20
	t, err := topo.TCPTransfer(p.A, p.B, p.V4B, n, time.Minute)
	if err != nil {
		return fmt.Errorf("tcp A→B: %w", err)
	}
	fmt.Fprintf(out, "  tcp   A→B %d MiB verified byte for byte in %v: %.2f Gbit/s\n", t.Bytes>>20, t.Elapsed.Round(time.Millisecond), t.Gbps)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	u, err := topo.UDPBurst(p.A, p.B, p.V4B, udpCount, 64, 30*time.Second)
	if err != nil {
		return fmt.Errorf("udp A→B: %w", err)
	}
	res.burst = u
	fmt.Fprintf(out, "  udp   A→B %d sent, %d received (%.1f%%), %.0f pps, %d out of order\n",
		u.Sent, u.Received, 100*float64(u.Received)/float64(u.Sent), u.PPS, u.OutOfOrder)
	if u.Received == 0 {
		return errors.New("udp A→B: nothing arrived")
	}
	// Keep traffic flowing, both ways, for the rest of the demo.
	end := time.Now().Add(duration)
	for time.Now().Before(end) && ctx.Err() == nil {
		for i, dir := range []struct {
			src, dst *topo.NS
			addr     netip.Addr
		}{{p.A, p.B, p.V4B}, {p.B, p.A, p.V6A}} {
			u, err := topo.UDPBurst(dir.src, dir.dst, dir.addr, 20000, 256, 5*time.Second)
			if err != nil {
				return fmt.Errorf("udp: %w", err)
			}
			res.dirSent[i] += u.Sent
			res.dirGot[i] += u.Received
		}
	}
	if total := res.dirSent[0] + res.dirSent[1]; total > 0 {
		fmt.Fprintf(out, "  udp   both ways for %v: %d sent, %d received (A→B %d/%d, B→A %d/%d)\n", duration, total, res.dirGot[0]+res.dirGot[1],
			res.dirGot[0], res.dirSent[0], res.dirGot[1], res.dirSent[1])
	}
	return nil
}

// switchHosts is the demo of --mode switch: it builds three namespaces on
// three links of one switching xdpfwd, and proves ping and a byte-exact
// TCP transfer between each pair of them, both ways, then prints what the
// switch learned. It sets d.verdict to the PASS or FAIL line.
func (d *demo) switchHosts(ctx context.Context) (err error) {
	ff, tcpMiB, stdout, stderr := &d.ff, d.tcpMiB, d.stdout, d.stderr
	h, err := topo.NewHosts(3, topo.Options{Queues: max(ff.cfg.Queues, 1), TxChecksum: true})
	if err != nil {
		return fmt.Errorf("demo: build namespaces: %w", err)
	}
	defer func() {
		n := len(h.NS)
		if cerr := h.Close(); cerr != nil {
			fmt.Fprintf(stderr, "xdpfwd demo: cleanup: %v\n", cerr)
			err = errors.Join(err, fmt.Errorf("demo: cleanup: %w", cerr))
			d.verdict = ""
			return
		}
		fmt.Fprintf(stdout, "removed %d namespaces and links %v\n", n, h.Links)
	}()
	cfg := d.cfg
	cfg.Links = h.Links
	if err := ff.handler(&cfg); err != nil { // the switch, over these links
		return usageError{err.Error()}
	}
	f, err := fwd.New(cfg)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	stopMetrics, err := d.serveMetrics(f)
	if err != nil {
		f.Close()
		return err
	}
	defer stopMetrics()
	fmt.Fprintf(stdout, "xdpfwd demo --mode switch: %d hosts on links %v, one xdpfwd switching between them\n", len(h.NS), h.Links)
	runCtx, cancelRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- f.Run(runCtx) }()

	var checkErr error
	for i := range h.NS {
		for j := range h.NS {
			if i == j || ctx.Err() != nil {
				continue
			}
			if _, err := topo.Ping(h.NS[i], h.V4[j], 3, 3*time.Second); err != nil {
				checkErr = errors.Join(checkErr, fmt.Errorf("ping host %d → %d: %w", i, j, err))
				continue
			}
			res, err := topo.TCPTransfer(h.NS[i], h.NS[j], h.V4[j], int64(tcpMiB)<<20, 60*time.Second)
			if err != nil {
				checkErr = errors.Join(checkErr, fmt.Errorf("TCP host %d → %d: %w", i, j, err))
				continue
			}
			fmt.Fprintf(stdout, "  host %d → %d (%s): ping ok, TCP %d MiB byte-exact at %.2f Gbit/s\n", i, j, h.V4[j], tcpMiB, res.Gbps)
		}
	}
	for _, e := range ff.sw.Entries() {
		fmt.Fprintf(stdout, "  learned %s on link %d (%s)\n", e.MAC, e.Link, h.Links[e.Link])
	}
	cancelRun()
	runErr := <-runDone
	sum, closeErr := f.Shutdown()
	var links []fwd.LinkStats
	for _, name := range h.Links {
		l := sum.Links[name]
		links = append(links, l)
		fmt.Fprintf(stdout, "  %s: rx %d pkts, tx %d pkts, drops %d: %s\n", name, l.RXPackets, l.TXPackets, l.TotalDrops(), dropReasons(l))
	}
	explainDrops(stdout, links)
	if sum.UMEM.LeakedAddresses != 0 {
		checkErr = errors.Join(checkErr, fmt.Errorf("%d UMEM addresses leaked", sum.UMEM.LeakedAddresses))
	}
	checkErr = errors.Join(checkErr, runErr, closeErr)
	pairs := len(h.NS) * (len(h.NS) - 1)
	criterion := fmt.Sprintf("ping and TCP byte for byte between each of the %d ordered host pairs, 0 UMEM addresses leaked (TCP resends what a drop took)", pairs)
	if checkErr != nil {
		msg := strings.ReplaceAll(checkErr.Error(), "\n", "; ")
		d.verdict = fmt.Sprintf("FAIL: %s (want %s)", msg, criterion)
		return fmt.Errorf("demo failed: %s", msg)
	}
	d.verdict = "PASS: " + criterion
	return nil
}
