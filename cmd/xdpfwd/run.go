// `xdpfwd run`: the daemon. cmdRun parses its settings and hands them to
// a daemon, whose stages are its methods: start builds a forwarder and
// what serves it (control socket, --metrics), serve forwards with it until
// it stops (printing the stats line, answering SIGHUP with reload), stop
// tears down and reports. run repeats them while the forwarder is to be
// rebuilt: its links' queue count changed, or a link returned
// (--wait-for-links).

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/sdnotify"
)

// cmdRun is `xdpfwd run` (it writes only to stderr).
func cmdRun(args []string, _, stderr io.Writer) error {
	// Signals before anything else. Until serve runs nothing would read
	// SIGHUP, and its default action kills the process (exit 129), which
	// systemd's Restart=on-failure counts as a clean exit: a
	// `systemctl reload` while waiting for the links would leave the
	// daemon down. The channel holds it until forwarding starts.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGUSR2: hand over to a fresh xdpfwd (successor.go). Its default
	// action would kill the daemon.
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	st, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	d := newDaemon(args, st, hup, stderr)
	d.usr2 = usr2
	d.ctl.pidFile = pidFile(st.pidFile)
	defer d.ctl.close()
	defer func() {
		if !d.ctl.handedOver.Load() {
			d.ctl.pidFile.remove(os.Getpid())
		}
	}()
	// From the signal on, link list says the daemon is stopping, through
	// the drain and until the socket closes; so does systemd.
	context.AfterFunc(ctx, func() {
		d.ctl.stopping.Store(true)
		// Only the daemon systemd counts as the service's: not a
		// successor that failed to take over, nor one that handed over.
		if d.ready.Load() && !d.ctl.handedOver.Load() {
			sdnotify.Notify("STOPPING=1")
		}
	})
	if st.summary != "" {
		// Find out now, not after an hour of forwarding, that the
		// summary cannot be written.
		fh, err := os.OpenFile(st.summary, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return usageError{fmt.Sprintf("--summary: %v", err)}
		}
		fh.Close()
	}
	if d.ff.mode == "txonly" {
		return d.runTxOnly(ctx)
	}
	return d.run(ctx)
}

// daemon is `xdpfwd run` once its settings are parsed: what lasts as long
// as the process, across the forwarders it builds one after another.
type daemon struct {
	// st is the parse the daemon started with (a reload's are rl's); ff
	// its forwarder flags, with the mode's handler; logger its logger.
	st     *runSettings
	ff     *fwdFlags
	logger *slog.Logger
	// stderr gets the stats lines.
	stderr io.Writer
	// hup receives SIGHUP from before the settings were parsed: one
	// that arrives while no forwarder runs waits there (waitForLinks).
	// usr2 receives SIGUSR2: hand over to a successor, which succ starts.
	hup, usr2 chan os.Signal
	succ      *successor
	// ready: systemd was told the daemon is up (READY=1), or its
	// predecessor made it the main process.
	ready atomic.Bool
	// ctl is the control socket, made with the first forwarder and
	// pointed at each next one.
	ctl controlSocket
	// rl re-reads --config on SIGHUP; nil without one.
	rl *reloader
	// metricsLn is the --metrics listener a predecessor handed over, for
	// the first start; tookOver says from whom, for the log (takeover.go).
	metricsLn *os.File
	tookOver  takeoverInfo
}

func newDaemon(args []string, st *runSettings, hup chan os.Signal, stderr io.Writer) *daemon {
	d := &daemon{st: st, ff: &st.ff, logger: st.logger, stderr: stderr, hup: hup, succ: newSuccessor(args)}
	if st.config != "" {
		d.rl = &reloader{args: args, start: st, ctl: &d.ctl}
	}
	return d
}

// forwarding is one forwarder of the daemon's, and what start set up
// around it for stop to end.
type forwarding struct {
	f *fwd.Forwarder
	// interval is the stats interval it starts with: the one in force.
	interval                           time.Duration
	stopReturns, stopSink, stopMetrics func()
}

// run forwards until a signal, or until a forwarder ends on a failure:
// one that ends because a link's queue count changed, or (with
// --wait-for-links) because a link is gone, is built again.
func (d *daemon) run(ctx context.Context) error {
	for {
		fw, err := d.start(ctx)
		if fw == nil {
			return err
		}
		sum, err := d.serve(ctx, fw)
		queuesChanged := errors.Is(err, fwd.ErrQueuesChanged) && ctx.Err() == nil
		linkGone := d.st.waitLinks && errors.Is(err, fwd.ErrLinkGone) && ctx.Err() == nil
		if !queuesChanged && !linkGone {
			d.ctl.stopping.Store(true) // no forwarder after this one
		}
		err = d.stop(fw, sum, err)
		if fw.f.HandedOver() && d.st.afterHandover == "wait" {
			// A pod's container: its exit would be restarted, and the
			// restart would take the datapath back (--takeover auto).
			d.logger.Info("handed over; waiting for SIGTERM to exit (--after-handover wait)")
			<-ctx.Done()
			return err
		}
		if queuesChanged {
			// Sockets must cover every RX queue: plan them again.
			d.logger.Warn("a link's queue count changed; rebuilding the forwarder on the new queues", "err", err)
			continue
		}
		if linkGone {
			d.logger.Warn("a link is gone; waiting for both to return (--wait-for-links)", "err", err)
			if !d.waitForLinks(ctx) {
				return nil
			}
			continue
		}
		return err
	}
}

// start builds the next forwarder, first waiting for its links with
// --wait-for-links, and what serves it: the control socket (made the
// first time), --metrics, the sink's lines, and the adding back of links
// that return. Neither a forwarding nor an error: ctx ended while waiting.
func (d *daemon) start(ctx context.Context) (*forwarding, error) {
	// A forwarder is rebuilt only where its links are fixed (xconnect,
	// zero-copy: fwd's links.go), so the Config's links are the last
	// one's.
	cfg := d.st.cfg
	var f *fwd.Forwarder
	var err error
	if d.st.takeover != "" && d.ctl.mode == "" { // the first forwarder only
		f, err = d.runTakeover(ctx, cfg)
		if err != nil {
			return nil, err
		}
	}
	if f == nil {
		f, err = fwd.New(cfg)
	}
	for err != nil {
		if !d.st.waitLinks || !errors.Is(err, fwd.ErrUnknownLink) {
			return nil, err
		}
		d.logger.Warn("waiting for the links to exist", "err", err)
		// Up, as systemd counts it: a start that waits is no failed
		// start.
		d.markReady("waiting for the links: " + err.Error())
		if !d.waitForLinks(ctx) {
			return nil, nil
		}
		f, err = fwd.New(cfg)
	}
	if err := d.ff.setLinkAddrs(cfg.Links); err != nil {
		f.Close()
		return nil, err
	}
	fw := &forwarding{f: f, interval: d.st.interval, stopReturns: func() {}, stopMetrics: func() {}}
	if d.rl != nil {
		d.rl.f, d.rl.logger = f, d.logger
		// A rebuilt forwarder (--wait-for-links) runs with the
		// settings in force, not those it started with.
		fw.interval = d.rl.restore(fw.interval)
	}
	if d.ctl.mode == "" { // once: handlers read it from the first serve on
		d.ctl.mode = d.ff.mode
		d.ctl.sw, d.ctl.portSecurity = d.ff.sw, d.ff.portSecurity == "on"
		if d.ctl.sw != nil {
			go d.ctl.logPortEvents(ctx, d.logger)
		}
	}
	if err := d.ctl.serve(d.st.control, cfg.Links, f, d.logger); err != nil {
		f.Close()
		return nil, err
	}
	if d.st.metrics != "" {
		if fw.stopMetrics, err = d.serveMetrics(f); err != nil {
			f.Close()
			return nil, err
		}
	}
	if t := d.tookOver; t.from != 0 {
		// The predecessor makes this one systemd's main process.
		d.ready.Store(true)
		pause := time.Since(t.frozen)
		d.ctl.lastPause = pause
		d.logger.Info("took over the datapath", "from_pid", t.from, "pause", pause.Round(time.Microsecond), "handovers", d.ctl.handovers,
			"waiting_frames", f.InheritedWaiting(), "links", f.Links())
		d.tookOver = takeoverInfo{}
	}
	d.markReady("forwarding " + d.ff.mode + " on " + strings.Join(f.Links(), " "))
	fw.stopSink = sinkLines(d.ff.sink, fw.interval, d.stderr)
	if d.st.waitLinks && linksAtRuntime(d.ff.mode) {
		fw.stopReturns = addBackReturning(f, cfg.Links, d.logger)
	}
	return fw, nil
}

// stop ends what start set up around fw's forwarder, which serve shut
// down with summary sum, logs its totals and writes --summary. It returns
// err, serve's, with the summary's own.
func (d *daemon) stop(fw *forwarding, sum fwd.Summary, err error) error {
	fw.stopReturns()
	fw.stopSink()
	fw.stopMetrics()
	if fw.f.HandedOver() {
		// The successor counts on from these totals, and writes the
		// summary when it stops.
		d.logger.Info("stopped: handed over to the successor", "duration_s", fmt.Sprintf("%.1f", sum.DurationS))
		return err
	}
	d.logger.Info("stopped", "duration_s", fmt.Sprintf("%.1f", sum.DurationS), "leaked_addresses", sum.UMEM.LeakedAddresses)
	logTotals(d.logger, sum, d.st.cfg.Links)
	logSink(d.logger, d.ff.sink)
	d.ff.logSwapStats(d.logger)
	if d.st.summary != "" {
		if werr := writeSummary(d.st.summary, summaryOf(sum, d.ff.sink, d.ctl.pods.all(true))); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	return err
}

// reload answers a SIGHUP while forwarding: --config read again and
// applied (reloader.reload), what failed logged; what it could not apply,
// and a binary replaced since the daemon started, are a successor's to
// run (handOverNow). It returns the stats interval in force after it.
func (d *daemon) reload(interval time.Duration) time.Duration {
	if d.succ.replaced() {
		d.handOverNow("SIGHUP: the binary at " + d.succ.exe + " was replaced")
		return interval
	}
	if d.rl == nil {
		d.logger.Warn("SIGHUP ignored: no --config file to re-read, and the binary is the one running")
		return interval
	}
	next, err := d.rl.reload(interval)
	if keys := d.rl.needsRestart; err == nil && len(keys) > 0 {
		d.handOverNow("SIGHUP: config changes a reload cannot apply: " + strings.Join(keys, " "))
	}
	var failed failedChanges
	switch {
	case errors.As(err, &failed):
		d.logger.Error("config reload: some changes failed, the others applied", "err", failed.error)
	case err != nil:
		d.logger.Error("config reload: not applied", "err", err)
	}
	return next
}

// waitForLinks polls until every link of the daemon's exists; false if
// ctx ended first. A SIGHUP meanwhile is logged and left queued on d.hup,
// for serve.
func (d *daemon) waitForLinks(ctx context.Context) bool {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	queued := false
	defer func() {
		if queued {
			select {
			case d.hup <- syscall.SIGHUP:
			default: // another one is queued already
			}
		}
	}()
	for {
		all := true
		for _, l := range d.st.cfg.Links {
			if _, err := net.InterfaceByName(l); err != nil {
				all = false
			}
		}
		if all {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-d.usr2:
			d.logger.Warn("SIGUSR2 ignored: waiting for the links, no datapath to hand over")
		case <-d.hup:
			if !queued {
				d.logger.Info("SIGHUP: reload queued until forwarding starts")
			}
			queued = true
		case <-t.C:
		}
	}
}

// serve runs fw's forwarder until ctx is done, printing a stats line every
// interval and reloading the config on SIGHUP meanwhile (report), then
// shuts it down and returns its summary.
func (d *daemon) serve(ctx context.Context, fw *forwarding) (fwd.Summary, error) {
	// The stats goroutine ends with the run, which a deleted link can end
	// as well as a signal.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.report(ctx, fw)
	}()
	runErr := fw.f.Run(ctx)
	cancel()
	<-done
	sum, err := fw.f.Shutdown()
	return sum, errors.Join(runErr, err)
}

// report prints fw's stats line every interval until ctx is done, and
// answers SIGHUP (reload), which may change the interval. In sink mode the
// line also gives each RX queue's rate.
func (d *daemon) report(ctx context.Context, fw *forwarding) {
	f, interval, perQueue := fw.f, fw.interval, d.ff.mode == "sink"
	// A stopped ticker channel never fires: interval 0 prints nothing.
	t := time.NewTicker(time.Hour)
	t.Stop()
	if interval > 0 {
		t.Reset(interval)
	}
	defer t.Stop()
	names := f.Links()
	prev := allStats(f)
	prevW := f.WorkerStats()
	prevQ := queueRX(f)
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.usr2:
			d.handOverNow("SIGUSR2")
		case <-d.hup:
			if next := d.reload(interval); next != interval {
				interval = next
				t.Stop()
				if interval > 0 {
					t.Reset(interval)
				}
			}
		case now := <-t.C:
			if cur := f.Links(); !slices.Equal(cur, names) {
				// Links added or removed (xdpfwd link): rates start
				// again from this reading, under the new names.
				names, prev, prevW, prevQ, last = cur, allStats(f), f.WorkerStats(), queueRX(f), now
				continue
			}
			cur := allStats(f)
			curW := f.WorkerStats()
			line := statsLine(names, prev, cur, now.Sub(last)) + efficiencyTail(prev, cur, prevW, curW)
			if f.Queues() > 1 {
				x := f.XPS()
				line += fmt.Sprintf(" | xps %s over %d queues: %d flows, %d moves (%d deferred), %d evictions",
					x.Mode, x.Queues, x.TableEntries, x.Moves, x.DeferredMoves, x.Evictions)
			}
			curQ := queueRX(f)
			if perQueue {
				line += queueRates(names, prevQ, curQ, now.Sub(last))
			}
			fmt.Fprintln(d.stderr, line)
			prev, prevW, prevQ, last = cur, curW, curQ, now
		}
	}
}

// queueRX reads every RX queue's received packets, by link.
func queueRX(f *fwd.Forwarder) [][]uint64 {
	q := make([][]uint64, len(f.Links()))
	for i := range q {
		for n := range f.LinkQueues(i) {
			q[i] = append(q[i], f.QueueStats(i, n).RXPackets)
		}
	}
	return q
}

// queueRates formats each RX queue's packets/s between two readings.
func queueRates(names []string, prev, cur [][]uint64, dt time.Duration) string {
	var b strings.Builder
	for i, name := range names {
		fmt.Fprintf(&b, " | %s rx pps per queue", name)
		for q := range cur[i] {
			fmt.Fprintf(&b, " %d:%.0f", q, float64(cur[i][q]-prev[i][q])/dt.Seconds())
		}
	}
	return b.String()
}

// allStats reads every link's counters.
func allStats(f *fwd.Forwarder) []fwd.LinkStats {
	s := make([]fwd.LinkStats, len(f.Links()))
	for i := range s {
		s[i] = f.LinkStats(i)
	}
	return s
}

func writeSummary(path string, s any) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("summary: %w", err)
	}
	return nil
}

// handOverNow starts a successor to take the datapath over (successor.go),
// or logs why it cannot.
func (d *daemon) handOverNow(why string) {
	ctl := ""
	if d.ctl.srv != nil {
		ctl = d.ctl.srv.Path()
	}
	if err := d.succ.start(ctl, why, &d.ctl.handedOver, d.logger); err != nil {
		d.logger.Error("no handover", "why", why, "err", err)
	}
}

// markReady tells systemd, once, that the daemon is up, with status, and
// writes --pid-file.
func (d *daemon) markReady(status string) {
	if !d.ready.CompareAndSwap(false, true) {
		return
	}
	if err := d.ctl.pidFile.write(os.Getpid()); err != nil {
		d.logger.Error("PID file not written", "err", err)
	}
	sdnotify.Notify("READY=1", "STATUS="+status)
}
