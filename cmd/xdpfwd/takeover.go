// Restarts that lose nothing: a running daemon hands its datapath to the
// next one (`xdpfwd run --takeover SOCKET`) over its control socket.

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/handover"
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/metrics"
	"github.com/xdpfwd/xdpfwd/modes"
)

// The handover, as the two daemons see it. Everything that forwards is a
// kernel object or memory the kernel holds (fwd's handover.go): the
// successor is handed their descriptors, with the control socket's and
// --metrics' listeners, and forwards on them; nothing is rebuilt, and
// what arrives meanwhile waits on the RX rings.
//
//  1. The successor asks on the control socket ({"op":"handover"}).
//  2. The predecessor, holding its link operations, offers: its version,
//     mode, forwarder's legacy and files (or says why it refuses).
//  3. The successor builds its forwarder around them (fwd.Adopt), its
//     own settings against the predecessor's layout, and says ready (or
//     why not: the predecessor goes on, the successor exits 2).
//  4. The predecessor freezes (its workers parked, nothing in flight)
//     and sends where every unit is, its counters and its switch's state.
//  5. The successor takes them (fwd.Inherit, modes.Switch.Import) and
//     says so.
//  6. The predecessor says go.
//  7. The successor says "mine" and runs; the predecessor abdicates: its
//     Run returns, it stops serving both sockets and exits 0.
//
// Until the successor says "mine" it has written nothing the two share
// (rings, UMEM, maps; fwd.Inherit only reads), so the predecessor can go
// on: a successor that dies, refuses or takes too long before 6, or dies
// between 6 and 7, leaves it thawed, and it logs why. After 7 the
// datapath is the successor's, and so it is if the successor falls silent
// after 6 (it may write at any moment); a successor killed then is a
// crash (the kernel removes the programs with the last descriptor), as
// kill -9 of any daemon is. A predecessor killed once frozen takes its
// datapath with it: the successor exits 1 and a supervisor starts afresh.
//
// Compatibility: a successor takes over only from a predecessor of its
// own handoverVersion (and fwd.HandoverVersion) whose layout its own
// settings give; an older daemon, which knows no handover, answers the
// request as an unknown op, and the successor says to restart instead.

// handoverVersion is the daemons' protocol's version.
const handoverVersion = 1

// handoverWaits bound each step: the successor's build (mapping the UMEM,
// adopting every socket) may take a while; the frozen steps may not.
const (
	handoverBuildWait  = 30 * time.Second
	handoverFrozenWait = 2 * time.Second
)

// offer is the predecessor's answer to the request.
type offer struct {
	Version int    `json:"version"`
	Refused string `json:"refused,omitempty"`
	PID     int    `json:"pid"`
	Mode    string `json:"mode"`
	// Legacy is the forwarder's; Files how many descriptors follow: its
	// files, then the control socket's listener, then --metrics' (if
	// Metrics).
	Legacy     fwd.Legacy `json:"legacy"`
	Files      int        `json:"files"`
	ControlIno uint64     `json:"control_ino"`
	Metrics    bool       `json:"metrics"`
	// Given are the links the daemon's settings give (not added over the
	// socket: the link state file leaves them out).
	Given []string `json:"given"`
	// Handovers is how many handovers the datapath went through before.
	Handovers uint64 `json:"handovers"`
}

// verdict is the successor's answer at steps 3 and 5: "" to go on.
type verdict struct {
	Error string `json:"error,omitempty"`
	// Knows (step 3) are the parts of the state the successor takes that
	// an older one, of the same handoverVersion, would drop without a
	// word (handoverKnows): a predecessor whose state has one the
	// successor does not know refuses, and goes on.
	Knows []string `json:"knows,omitempty"`
}

// handoverKnows is what this daemon's verdict says it knows: "vlans",
// the switch's VLANs (modes.SwitchState.VLANs), without which the
// successor would make every port a port of every network.
var handoverKnows = []string{"vlans"}

// unknownTo is the part of cs's state a successor that knows only knows
// would drop, or "".
func (cs *controlSocket) unknownTo(knows []string) string {
	if cs.sw != nil && len(cs.sw.PortVLANs()) > 0 && !slices.Contains(knows, "vlans") {
		return "vlans"
	}
	return ""
}

// frozenState is step 4's message.
type frozenState struct {
	Error string `json:"error,omitempty"`
	// Refused: Error is a refusal of this successor (exit 2), not a
	// failure to freeze.
	Refused     bool               `json:"refused,omitempty"`
	Inheritance fwd.Inheritance    `json:"inheritance"`
	Switch      *modes.SwitchState `json:"switch,omitempty"`
	// FrozenAt is when the predecessor froze, on CLOCK_MONOTONIC (ns),
	// which both processes read alike: the successor's pause runs from
	// it, not from when this state reached it.
	FrozenAt int64 `json:"frozen_at,omitempty"`
	// Pods are the links' pods (pods.go), the last removed ones' too.
	Pods map[string]linkop.Pod `json:"pods,omitempty"`
}

// goAhead is step 6's.
type goAhead struct {
	Go bool `json:"go"`
}

// errHandedOver: the daemon handed its datapath over; a link request
// that finds it so goes to the successor.
var errHandedOver = fmt.Errorf("this xdpfwd: %w", linkop.ErrHandedOver)

// handOver serves a successor's request on c (the control socket's
// connection, whose request line r read): steps 2 to 6 above.
func (cs *controlSocket) handOver(c net.Conn, r net.Conn) {
	uc := control.UnixConn(c)
	if uc == nil {
		c.Close()
		return
	}
	h, err := handover.Accept(uc, r)
	if err != nil {
		c.Close()
		return
	}
	defer h.Close()
	cs.linkOps.Lock()
	defer cs.linkOps.Unlock()
	f := cs.fw.Load()
	files, ok := cs.offer(h, f)
	defer func() {
		for _, fl := range files {
			fl.Close()
		}
	}()
	if !ok || !cs.successorBuilt(h) {
		return
	}
	if begin, ok := cs.freezeAndPass(h, f); ok {
		cs.abdicate(f, peerPID(uc), begin)
	}
}

// refuse tells the successor at h why this daemon does not hand over.
func (cs *controlSocket) refuse(h *handover.Conn, why string) {
	cs.log.Warn("handover refused", "why", why)
	h.Send(offer{Version: handoverVersion, Refused: why, PID: os.Getpid()})
}

// offer sends the successor at h what it builds on, forwarder f's legacy
// and the files it needs (the sockets, the UMEM, the programs, the
// control and metrics listeners), or refuses; it returns the files to
// close once the handover is over, and whether it offered.
func (cs *controlSocket) offer(h *handover.Conn, f *fwd.Forwarder) ([]*os.File, bool) {
	switch {
	case f == nil || f.Stopping():
		cs.refuse(h, "no forwarder is running (stopping, or being rebuilt)")
		return nil, false
	case cs.srv == nil:
		cs.refuse(h, "no control socket to hand over")
		return nil, false
	}
	lg, files, err := f.Legacy()
	if err != nil {
		cs.refuse(h, err.Error())
		return nil, false
	}
	ln, ino, err := cs.srv.Listener()
	if err != nil {
		cs.refuse(h, err.Error())
		return files, false
	}
	files = append(files, ln)
	of := offer{Version: handoverVersion, PID: os.Getpid(), Mode: cs.mode, Legacy: lg, ControlIno: ino,
		Given: cs.given, Handovers: cs.handovers}
	if cs.metricsLn != nil {
		ml, err := cs.metricsLn.File()
		if err != nil {
			cs.refuse(h, fmt.Sprintf("--metrics listener: %v", err))
			return files, false
		}
		files, of.Metrics = append(files, ml), true
	}
	of.Files = len(files)
	cs.log.Info("handover: a successor asks; offering the datapath", "links", f.Links(), "files", len(files))
	if err := h.Send(of); err != nil {
		cs.log.Error("handover: the successor went away; going on", "err", err)
		return files, false
	}
	if err := h.SendFiles(files); err != nil {
		cs.log.Error("handover: the successor went away; going on", "err", err)
		return files, false
	}
	return files, true
}

// successorBuilt waits for the successor at h to say it built on the
// offer, and refuses one that does not know all of the switch's state.
func (cs *controlSocket) successorBuilt(h *handover.Conn) bool {
	var v verdict
	if err := h.Recv(&v, handoverBuildWait); err != nil || v.Error != "" {
		cs.log.Error("handover: the successor did not take over; going on", "why", cmpErr(v.Error, err))
		return false
	}
	if part := cs.unknownTo(v.Knows); part != "" {
		why := fmt.Sprintf("the successor does not know the switch's %s (an older xdpfwd): it would put every port in every network; restart it instead", part)
		h.Send(frozenState{Error: why, Refused: true})
		cs.log.Error("handover refused; going on", "why", why)
		return false
	}
	return true
}

// freezeAndPass freezes f, sends the successor at h the frozen state and
// lets it take the rings; it returns when f froze, and whether the
// successor took over. Any failure before the successor says it took the
// rings thaws f, which goes on.
func (cs *controlSocket) freezeAndPass(h *handover.Conn, f *fwd.Forwarder) (time.Time, bool) {
	logger := cs.log
	// The frozen state's memory is touched now, not while frozen.
	h.Prepare(cs.frozenState(f.InheritanceShape(), 0))
	begin, frozenAt := time.Now(), monotonicNow()
	in, err := f.Freeze(f.Links())
	if err != nil {
		h.Send(frozenState{Error: err.Error()})
		logger.Error("handover: could not freeze; going on", "err", err)
		return begin, false
	}
	logger.Debug("handover: frozen", "took", time.Since(begin))
	killPoint("predecessor-frozen")
	thaw := func(why string, err error) (time.Time, bool) {
		f.Thaw()
		logger.Error("handover: "+why+"; thawed, going on", "err", err, "frozen", time.Since(begin).Round(time.Microsecond))
		return begin, false
	}
	if err := h.Send(cs.frozenState(in, frozenAt)); err != nil {
		return thaw("the successor went away", err)
	}
	logger.Debug("handover: frozen state sent", "since_freeze", time.Since(begin))
	var v verdict
	if err := h.Recv(&v, handoverFrozenWait); err != nil || v.Error != "" {
		return thaw("the successor could not take the frozen state", errors.New(cmpErr(v.Error, err)))
	}
	logger.Debug("handover: the successor took it", "since_freeze", time.Since(begin))
	if err := h.Send(goAhead{Go: true}); err != nil {
		return thaw("the successor went away", err)
	}
	// It says "mine" before it writes a ring: the connection's end
	// without it means it died not having touched one, and the
	// datapath is still this one's. Silence is not that: a successor
	// that is slow (stopped, starved) may write at any moment, so the
	// datapath is its own.
	if err := h.Recv(&v, handoverFrozenWait); errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return thaw("the successor died before it took the rings", err)
	} else if err != nil {
		logger.Warn("handover: the successor did not say it took the rings; it has them", "err", err)
	}
	return begin, true
}

// abdicate ends this daemon's part once the successor (pid) took over,
// frozen since begin: no link request of ours changes the datapath,
// neither socket is served here, and Run returns.
func (cs *controlSocket) abdicate(f *fwd.Forwarder, pid int, begin time.Time) {
	cs.handedOver.Store(true)
	cs.srv.Release()
	if cs.stopMetrics != nil {
		cs.stopMetrics()
	}
	f.Abdicate()
	cs.log.Info("handed over: the successor forwards", "pid", pid, "frozen", time.Since(begin).Round(time.Microsecond), "links", f.Links())
	cs.pidFile.handOverPID(pid, cs.log)
}

// frozenState is what a successor takes over with: in, the pods and the
// switch's state.
func (cs *controlSocket) frozenState(in fwd.Inheritance, frozenAt int64) frozenState {
	st := frozenState{Inheritance: in, Pods: cs.pods.all(true), FrozenAt: frozenAt}
	if cs.sw != nil {
		sw := cs.sw.Export()
		st.Switch = &sw
	}
	return st
}

// peerPID is the process at the other end of c, as this process's PID
// namespace numbers it (0: not in it, a pod's).
func peerPID(c *net.UnixConn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var cred *unix.Ucred
	rc.Control(func(fd uintptr) { cred, _ = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if cred == nil {
		return 0
	}
	return int(cred.Pid)
}

func cmpErr(s string, err error) string {
	if s != "" {
		return s
	}
	if err != nil {
		return err.Error()
	}
	return "no reason given"
}

// takeover is the successor's side, from the offer on.
type takeover struct {
	h         *handover.Conn
	log       *slog.Logger
	of        offer
	files     []*os.File // the forwarder's
	control   *os.File
	metrics   *os.File
	socket    string
	sentReady bool
	pods      map[string]linkop.Pod // the frozen state's
}

// beginTakeover asks the daemon at socket to hand over and receives its
// offer; nil without an error: auto found no daemon there to take over
// from. A refusal is the request's fault (exit 2).
func beginTakeover(socket string, auto bool, logger *slog.Logger) (*takeover, error) {
	h, err := handover.Dial(socket, 5*time.Second)
	if err != nil {
		if auto {
			logger.Info("takeover auto: no daemon answers on the control socket; starting afresh", "socket", socket)
			return nil, nil
		}
		return nil, usageError{fmt.Sprintf("--takeover %s: %v", socket, err)}
	}
	t := &takeover{h: h, socket: socket, log: logger}
	if err := h.Recv(&t.of, 10*time.Second); err != nil {
		h.Close()
		return nil, usageError{fmt.Sprintf("--takeover %s: the daemon there does not hand over (an xdpfwd older than handover, or busy): %v; restart it instead", socket, err)}
	}
	switch {
	case t.of.Refused != "":
		h.Close()
		return nil, usageError{fmt.Sprintf("--takeover %s: refused: %s", socket, t.of.Refused)}
	case t.of.Version != handoverVersion:
		h.Close()
		return nil, usageError{fmt.Sprintf("--takeover %s: the daemon there speaks handover version %d, this one %d: restart it instead", socket, t.of.Version, handoverVersion)}
	}
	files, err := h.RecvFiles(t.of.Files, 10*time.Second)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("--takeover %s: %w", socket, err)
	}
	n := len(files)
	if t.of.Metrics {
		t.metrics, n = files[n-1], n-1
	}
	t.control, n = files[n-1], n-1
	t.files = files[:n]
	killPoint("offer")
	logger.Info("takeover: offered the datapath", "socket", socket, "pid", t.of.PID, "mode", t.of.Mode, "files", t.of.Files)
	return t, nil
}

// adopt builds the forwarder around the offer (step 3), or says why not
// to the predecessor, which then goes on.
func (t *takeover) adopt(cfg fwd.Config, mode string) (*fwd.Forwarder, error) {
	var f *fwd.Forwarder
	err := fmt.Errorf("the running daemon's mode is %s, this one's %s: a restart, not a handover, changes it", t.of.Mode, mode)
	if t.of.Mode == mode {
		f, err = fwd.Adopt(cfg, t.of.Legacy, t.files)
	}
	t.files = nil // Adopt's now
	if err != nil {
		t.h.Send(verdict{Error: err.Error()})
		t.close()
		if errors.Is(err, fwd.ErrHandover) || t.of.Mode != mode {
			return nil, usageError{fmt.Sprintf("--takeover %s: %v", t.socket, err)}
		}
		return nil, fmt.Errorf("--takeover %s: %w", t.socket, err)
	}
	t.sentReady = true
	killPoint("adopted")
	t.log.Debug("takeover: adopted")
	if err := t.h.Send(verdict{Knows: handoverKnows}); err != nil {
		f.Close()
		t.close()
		return nil, fmt.Errorf("--takeover %s: the running daemon went away: %w", t.socket, err)
	}
	return f, nil
}

// inherit takes the frozen state (steps 4 and 5) and waits for go (6);
// once it returns nil the datapath is this process's, paused since
// frozen.
func (t *takeover) inherit(f *fwd.Forwarder, sw *modes.Switch) (frozen time.Time, err error) {
	var st frozenState
	if err := t.h.Recv(&st, handoverBuildWait); err != nil {
		return time.Time{}, fmt.Errorf("--takeover %s: the running daemon went away before it froze: %w", t.socket, err)
	}
	frozen = frozenSince(st.FrozenAt)
	killPoint("frozen")
	t.log.Debug("takeover: frozen state received")
	if st.Refused {
		return frozen, usageError{fmt.Sprintf("--takeover %s: the running daemon refused: %s", t.socket, st.Error)}
	}
	if st.Error != "" {
		return frozen, fmt.Errorf("--takeover %s: the running daemon could not freeze: %s", t.socket, st.Error)
	}
	err = f.Inherit(st.Inheritance)
	t.pods = st.Pods
	if err == nil && st.Switch != nil {
		if sw == nil {
			err = errors.New("a switch's state, and this daemon has no switch")
		} else {
			err = sw.Import(*st.Switch)
		}
	}
	t.log.Debug("takeover: inherited", "since_frozen", time.Since(frozen))
	if err != nil {
		t.h.Send(verdict{Error: err.Error()})
		return frozen, fmt.Errorf("--takeover %s: %w", t.socket, err)
	}
	if err := t.h.Send(verdict{}); err != nil {
		return frozen, fmt.Errorf("--takeover %s: the running daemon went away: %w", t.socket, err)
	}
	killPoint("inherited")
	var g goAhead
	if err := t.h.Recv(&g, handoverFrozenWait); err != nil || !g.Go {
		return frozen, fmt.Errorf("--takeover %s: the running daemon did not let go (it goes on): %v", t.socket, err)
	}
	killPoint("go")
	// Step 7: "mine", before any ring is written (Run). A predecessor
	// that went away since has abdicated or died: either way the
	// datapath is this one's to run.
	t.h.Send(verdict{})
	t.log.Debug("takeover: go", "since_frozen", time.Since(frozen))
	return frozen, nil
}

// monotonicNow is CLOCK_MONOTONIC in ns: the one clock a predecessor and
// its successor read alike (Go's monotonic readings are per process).
func monotonicNow() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// frozenSince is the instant, on this process's clock, of the
// predecessor's freeze at frozenAt (monotonicNow's); now if it gave none
// or one this clock has not reached (a time namespace between them).
func frozenSince(frozenAt int64) time.Time {
	now, mono := time.Now(), monotonicNow()
	if frozenAt <= 0 || mono == 0 || frozenAt > mono {
		return now
	}
	return now.Add(-time.Duration(mono - frozenAt))
}

// close closes what the takeover still holds.
func (t *takeover) close() {
	for _, f := range append(t.files, t.control, t.metrics) {
		if f != nil {
			f.Close()
		}
	}
	t.files, t.control, t.metrics = nil, nil, nil
	t.h.Close()
}

// takeoverFrom is where --takeover points: the socket named, or with
// auto, --control's (its default too).
func takeoverFrom(takeover, controlPath string, links []string) (socket string, auto bool) {
	if takeover != "auto" {
		return takeover, false
	}
	if controlPath == "" || controlPath == "off" {
		return control.DefaultPath(links[0]), true
	}
	return controlPath, true
}

// runTakeover is start's: the forwarder taken over from the daemon at
// --takeover (nil, nil: auto found none to take over from, start
// afresh), with the control socket's and --metrics' listeners.
func (d *daemon) runTakeover(ctx context.Context, cfg fwd.Config) (*fwd.Forwarder, error) {
	socket, auto := takeoverFrom(d.st.takeover, d.st.control, cfg.Links)
	t, err := beginTakeover(socket, auto, d.logger)
	if t == nil {
		return nil, err
	}
	f, err := t.adopt(cfg, d.ff.mode)
	if err != nil {
		return nil, err
	}
	frozen, err := t.inherit(f, d.ff.sw)
	if err != nil {
		f.Close()
		t.close()
		return nil, err
	}
	// From here on the datapath is ours: the sockets are served at once.
	d.ctl.inherit(socket, t.of.ControlIno, t.control, t.of.Given, t.of.Handovers+1)
	d.ctl.pods.load(t.pods)
	d.ctl.pods.keep(f.Links())
	if d.st.metrics != "" {
		d.metricsLn = t.metrics
		t.metrics = nil
	} // else t.close closes it: this daemon serves no metrics
	t.control = nil
	t.close()
	d.tookOver = takeoverInfo{from: t.of.PID, frozen: frozen}
	return f, nil
}

// takeoverInfo is what the daemon logs once it runs what it took over.
type takeoverInfo struct {
	from   int
	frozen time.Time
}

// serveMetrics serves --metrics for f on the listener a predecessor
// handed over, or a new one, and keeps it for a successor.
func (d *daemon) serveMetrics(f *fwd.Forwarder) (stop func(), err error) {
	ln, err := listenMetrics(d.st.metrics, d.metricsLn)
	d.metricsLn = nil
	if err != nil {
		return nil, err
	}
	stop, err = serveMetricsOn(ln, f, d.logger, defaultHTTPLimits, d.ff.metricsOf(), &daemonMetrics{d.ctl.handoverStats, d.ctl.pods.metric})
	if err != nil {
		return nil, err
	}
	d.ctl.metricsLn, d.ctl.stopMetrics = ln, stop
	return stop, nil
}

// handoverStats is what the metrics say of the handovers.
func (cs *controlSocket) handoverStats() metrics.Handovers {
	return metrics.Handovers{Count: cs.handovers, LastPause: cs.lastPause}
}
