// `xdpfwd run`: the daemon. cmdRun builds a forwarder from the flags,
// serves its control socket and --metrics, and forwards until a signal,
// rebuilding the forwarder when its links' queues change or a link
// returns (--wait-for-links); forward is one forwarder's run, with its
// stats lines and SIGHUP reloads.

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
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/metrics"
	"github.com/xdpfwd/xdpfwd/modes"
)

func cmdRun(args []string, stderr io.Writer) error {
	// Signals before anything else. Until forward runs nothing would read
	// SIGHUP, and its default action kills the process (exit 129), which
	// systemd's Restart=on-failure counts as a clean exit: a
	// `systemctl reload` while waiting for the links would leave the
	// daemon down. The channel holds it until forwarding starts.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	st, err := parseRun(args, stderr)
	if err != nil {
		return err
	}
	ff, cfg, logger := &st.ff, st.cfg, st.logger
	interval, summary, metricsAddr, waitLinks, controlPath := &st.interval, &st.summary, &st.metrics, &st.waitLinks, &st.control
	var ctl controlSocket
	defer ctl.close()
	// From the signal on, link list says the daemon is stopping, through
	// the drain and until the socket closes.
	context.AfterFunc(ctx, func() { ctl.stopping.Store(true) })
	var rl *reloader
	if st.config != "" {
		rl = &reloader{args: args, start: st, linkOps: &ctl.linkOps}
	}
	if *summary != "" {
		// Find out now, not after an hour of forwarding, that the
		// summary cannot be written.
		fh, err := os.OpenFile(*summary, os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			return usageError{fmt.Sprintf("--summary: %v", err)}
		}
		fh.Close()
	}
	if ff.mode == "txonly" {
		return runTxOnly(ctx, ff, &st.gf, cfg, logger, *interval, *summary, stderr)
	}
	for {
		// A forwarder is rebuilt only where its links are fixed
		// (xconnect, zero-copy: fwd's links.go), so the Config's links
		// are the last one's.
		f, err := fwd.New(cfg)
		if err != nil {
			if *waitLinks && errors.Is(err, fwd.ErrUnknownLink) {
				logger.Warn("waiting for the links to exist", "err", err)
				if !waitForLinks(ctx, cfg.Links, hup, logger) {
					return nil
				}
				continue
			}
			return err
		}
		if err := ff.setLinkAddrs(cfg.Links); err != nil {
			f.Close()
			return err
		}
		iv := *interval
		if rl != nil {
			rl.f, rl.logger = f, logger
			// A rebuilt forwarder (--wait-for-links) runs with the
			// settings in force, not those it started with.
			iv = rl.restore(iv)
		}
		if ctl.mode == "" { // once: handlers read it from the first serve on
			ctl.mode = ff.mode
			ctl.sw, ctl.portSecurity = ff.sw, ff.portSecurity == "on"
		}
		if err := ctl.serve(*controlPath, cfg.Links, f, logger); err != nil {
			f.Close()
			return err
		}
		stopMetrics := func() {}
		if *metricsAddr != "" {
			if stopMetrics, err = serveMetrics(*metricsAddr, f, logger, ff.metricsOf()); err != nil {
				f.Close()
				return err
			}
		}
		stopSink := sinkLines(ff.sink, iv, stderr)
		stopReturns := func() {}
		if *waitLinks && linksAtRuntime(ff.mode) {
			stopReturns = addBackReturning(f, cfg.Links, logger)
		}
		sum, err := forward(ctx, f, iv, stderr, hup, rl, logger, ff.mode == "sink")
		queuesChanged := errors.Is(err, fwd.ErrQueuesChanged) && ctx.Err() == nil
		linkGone := *waitLinks && errors.Is(err, fwd.ErrLinkGone) && ctx.Err() == nil
		if !queuesChanged && !linkGone {
			ctl.stopping.Store(true) // no forwarder after this one
		}
		stopReturns()
		stopSink()
		stopMetrics()
		logger.Info("stopped", "duration_s", fmt.Sprintf("%.1f", sum.DurationS), "leaked_addresses", sum.UMEM.LeakedAddresses)
		logTotals(logger, sum, cfg.Links)
		logSink(logger, ff.sink)
		ff.logSwapStats(logger)
		if *summary != "" {
			if werr := writeSummary(*summary, withSink(sum, ff.sink)); werr != nil {
				err = errors.Join(err, werr)
			}
		}
		if queuesChanged {
			// Sockets must cover every RX queue: plan them again.
			logger.Warn("a link's queue count changed; rebuilding the forwarder on the new queues", "err", err)
			continue
		}
		if linkGone {
			logger.Warn("a link is gone; waiting for both to return (--wait-for-links)", "err", err)
			if !waitForLinks(ctx, cfg.Links, hup, logger) {
				return nil
			}
			continue
		}
		return err
	}
}

// fdbOf is sw as a metrics.FDB, or nil without a switch.
func fdbOf(sw *modes.Switch) metrics.FDB {
	if sw == nil {
		return nil
	}
	return sw
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

// waitForLinks polls until every link exists; false if ctx ended first.
// A SIGHUP meanwhile is logged and left queued on hup, for forward.
func waitForLinks(ctx context.Context, links []string, hup chan os.Signal, logger *slog.Logger) bool {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	queued := false
	defer func() {
		if queued {
			select {
			case hup <- syscall.SIGHUP:
			default: // another one is queued already
			}
		}
	}()
	for {
		all := true
		for _, l := range links {
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
		case <-hup:
			if !queued {
				logger.Info("SIGHUP: reload queued until forwarding starts")
			}
			queued = true
		case <-t.C:
		}
	}
}

// forward runs f until ctx is done, printing a stats line every interval
// and reloading the config on SIGHUP (hup), then shuts it down and returns
// its summary.
//
// With perQueue (sink mode) the line also gives each RX queue's rate.
func forward(ctx context.Context, f *fwd.Forwarder, interval time.Duration, stderr io.Writer, hup <-chan os.Signal, rl *reloader, logger *slog.Logger, perQueue bool) (fwd.Summary, error) {
	// The stats goroutine ends with the run, which a deleted link can end
	// as well as a signal.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
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
			case <-hup:
				if rl == nil {
					logger.Warn("SIGHUP ignored: no --config file to re-read")
					continue
				}
				next, err := rl.reload(interval)
				var failed failedChanges
				switch {
				case errors.As(err, &failed):
					logger.Error("config reload: some changes failed, the others applied", "err", failed.error)
				case err != nil:
					logger.Error("config reload: not applied", "err", err)
				}
				if next != interval {
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
				line := fwd.StatsLine(names, prev, cur, now.Sub(last)) + fwd.EfficiencyTail(prev, cur, prevW, curW)
				if f.Queues() > 1 {
					x := f.XPS()
					line += fmt.Sprintf(" | xps %s over %d queues: %d flows, %d moves (%d deferred), %d evictions",
						x.Mode, x.Queues, x.TableEntries, x.Moves, x.DeferredMoves, x.Evictions)
				}
				curQ := queueRX(f)
				if perQueue {
					line += queueRates(names, prevQ, curQ, now.Sub(last))
				}
				fmt.Fprintln(stderr, line)
				prev, prevW, prevQ, last = cur, curW, curQ, now
			}
		}
	}()
	runErr := f.Run(ctx)
	cancel()
	<-done
	sum, err := f.Shutdown()
	return sum, errors.Join(runErr, err)
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
