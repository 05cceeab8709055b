// The daemon's --metrics endpoint: Prometheus metrics and /healthz for
// the running forwarder, over an HTTP server whose clients are bounded
// (httpLimits). Its client, `xdpfwd stats`, is stats.go.

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/metrics"
	"github.com/xdpfwd/xdpfwd/modes"
)

// metricsLogMsg is logged, with the bound address as addr, once the
// metrics endpoint listens (tests read the port of --metrics HOST:0 there).
const metricsLogMsg = "serving metrics"

// stallAfter is how long a worker may go without a round of its loop, with
// packets waiting on its RX rings, before /healthz reports it.
const stallAfter = 5 * time.Second

// httpLimits bound what the clients of --metrics can hold. A scraper or a
// probe needs a short request now and then; without limits, connections
// that idle (kept alive, or never sending a request) pile up for ever.
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	maxConns                      int // accepted at once; more wait in the listen backlog
}

var defaultHTTPLimits = httpLimits{
	readHeader: 5 * time.Second,
	read:       10 * time.Second,
	write:      30 * time.Second,
	idle:       60 * time.Second, // longer than most scrape intervals: keep-alive still pays
	maxConns:   16,
}

// serveMetrics serves Prometheus metrics and /healthz for f on addr until
// the returned stop function is called. Call it after fwd.New and before
// Run. It fails at once, with a usage error, if it cannot listen on addr.
// /healthz turns 503 once the forwarder is stopping (for good), while a
// worker is stalled (fwd.Forwarder.Stalled) or while it has no link;
// scrapes that overlap its Close are safe (fwd guards its stats readers),
// and after stop the last values read are served.
func serveMetrics(addr string, f *fwd.Forwarder, logger *slog.Logger, mm *modeMetrics) (stop func(), err error) {
	return serveMetricsWith(addr, f, logger, defaultHTTPLimits, mm)
}

// modeMetrics are what a mode's handler exports beside the forwarder's
// metrics: nil fields (and a nil *modeMetrics) export nothing.
type modeMetrics struct {
	fdb  metrics.FDB
	sink metrics.Sink
	swap metrics.Swap
}

// metricsOf is the handler's metrics, once handler built it.
func (ff *fwdFlags) metricsOf() *modeMetrics {
	mm := &modeMetrics{fdb: fdbOf(ff.sw)}
	if ff.sink != nil {
		mm.sink = ff.sink
	}
	if ff.swap != nil {
		mm.swap = ff.swap
	}
	return mm
}

// fdbOf is sw as a metrics.FDB, or nil without a switch.
func fdbOf(sw *modes.Switch) metrics.FDB {
	if sw == nil {
		return nil
	}
	return sw
}

func serveMetricsWith(addr string, f *fwd.Forwarder, logger *slog.Logger, lim httpLimits, mm *modeMetrics) (stop func(), err error) {
	ln, err := listenMetrics(addr, nil)
	if err != nil {
		return nil, err
	}
	return serveMetricsOn(ln, f, logger, lim, mm, nil)
}

// listenMetrics is --metrics' listener: the one a predecessor handed over
// (inherited, which it takes), else a new one on addr.
func listenMetrics(addr string, inherited *os.File) (*net.TCPListener, error) {
	if inherited != nil {
		ln, err := net.FileListener(inherited)
		inherited.Close()
		if err != nil {
			return nil, fmt.Errorf("--metrics %s: inherited listener: %w", addr, err)
		}
		tl, ok := ln.(*net.TCPListener)
		if !ok {
			ln.Close()
			return nil, fmt.Errorf("--metrics %s: inherited listener is a %T", addr, ln)
		}
		if listensOn(addr, tl.Addr().(*net.TCPAddr)) {
			return tl, nil
		}
		// The successor's --metrics is another address: its own.
		tl.Close()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--metrics %s: cannot listen: %v", addr, unwrapNetErr(err))}
	}
	return ln.(*net.TCPListener), nil
}

// listensOn reports whether a listener on at serves --metrics addr: the
// same port (any, for port 0) on the same address (or both unspecified).
func listensOn(addr string, at *net.TCPAddr) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if port != "0" && port != strconv.Itoa(at.Port) {
		return false
	}
	if host == "" {
		return at.IP.IsUnspecified()
	}
	ip := net.ParseIP(host)
	if ip == nil { // a name: what it resolves to now
		ips, err := net.LookupIP(host)
		if err != nil {
			return false
		}
		return slices.ContainsFunc(ips, at.IP.Equal)
	}
	return ip.Equal(at.IP)
}

// daemonMetrics are what a daemon's control socket exports beside the
// forwarder's: its handovers and its links' pods (nil: none).
type daemonMetrics struct {
	handovers func() metrics.Handovers
	pods      func(link string) (metrics.Pod, bool)
}

// serveMetricsOn is serveMetricsWith on the listener ln, with the
// daemon's handovers and pods (nil dm: none exported).
func serveMetricsOn(ln *net.TCPListener, f *fwd.Forwarder, logger *slog.Logger, lim httpLimits, mm *modeMetrics, dm *daemonMetrics) (stop func(), err error) {
	if mm == nil {
		mm = &modeMetrics{}
	}
	if dm == nil {
		dm = &daemonMetrics{}
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	srv, err := metrics.NewServer(f, metrics.Options{
		Handovers: dm.handovers,
		Pods:      dm.pods,
		Version:   version,
		Logger:    logger,
		FDB:       mm.fdb,
		Sink:      mm.sink,
		Swap:      mm.swap,
		Health: func() error {
			if f.Stopping() {
				return errors.New("stopping")
			}
			return nil
		},
		Check: func() error {
			// Stopping is Health's: Check runs only while f runs.
			if state, why := health(f, false); state != linkop.HealthForwarding {
				return errors.New(why)
			}
			return nil
		},
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	hs, lln := limitedServer(ln, srv, lim, logger)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := hs.Serve(lln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server failed", "addr", ln.Addr().String(), "err", err)
		}
	}()

	bound := ln.Addr().String()
	logger.Info(metricsLogMsg, "addr", bound, "url", "http://"+bound+"/metrics")
	var once sync.Once
	return func() {
		once.Do(func() {
			srv.Collector().Freeze()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := hs.Shutdown(ctx); err != nil {
				hs.Close()
			}
			<-served
			logger.Debug("metrics server stopped", "addr", bound)
		})
	}, nil
}

// limitedServer is an HTTP server for h within lim, and the listener it
// is to serve: ln, limited.
func limitedServer(ln net.Listener, h http.Handler, lim httpLimits, logger *slog.Logger) (*http.Server, net.Listener) {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	if lim.maxConns > 0 {
		l := newLimitListener(ln, lim.maxConns)
		hs.ConnState = l.connState
		ln = l
	}
	return hs, ln
}

// limitListener serves at most n connections at a time. A connection
// beyond them is accepted and waits for a slot, and so do the clients
// behind it (in the listen backlog). A kept-alive connection between two
// requests gives its slot up to the one waiting (the oldest idle one is
// closed): scrapers that keep their connections alive cannot keep a
// liveness probe out. A connection in the middle of a request keeps its
// slot, for ReadHeaderTimeout at most.
type limitListener struct {
	net.Listener
	sem       chan struct{} // one token per open accepted connection
	done      chan struct{} // closed by Close: a waiting Accept returns
	closeOnce sync.Once
	idled     chan struct{} // a connection went idle: a waiting Accept looks

	mu   sync.Mutex
	idle map[*limitConn]time.Time // since when, between requests
}

func newLimitListener(ln net.Listener, n int) *limitListener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{}),
		idled: make(chan struct{}, 1), idle: map[*limitConn]time.Time{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for {
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		default:
		}
		if l.closeIdle() {
			continue // its Close gave its token back
		}
		select {
		case l.sem <- struct{}{}:
			return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
		case <-l.idled:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

// closeIdle closes the connection idle the longest, if any.
func (l *limitListener) closeIdle() bool {
	l.mu.Lock()
	var oldest *limitConn
	for c, since := range l.idle {
		if oldest == nil || since.Before(l.idle[oldest]) {
			oldest = c
		}
	}
	delete(l.idle, oldest)
	l.mu.Unlock()
	if oldest == nil {
		return false
	}
	oldest.Close()
	return true
}

// connState is the server's http.Server.ConnState: it keeps track of the
// connections that idle between requests.
func (l *limitListener) connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*limitConn)
	if !ok {
		return
	}
	l.mu.Lock()
	if st == http.StateIdle {
		l.idle[c] = time.Now()
	} else {
		delete(l.idle, c)
	}
	l.mu.Unlock()
	if st == http.StateIdle {
		select {
		case l.idled <- struct{}{}:
		default:
		}
	}
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

// limitConn gives its token back on the first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// unwrapNetErr drops net.OpError's "listen tcp ADDR:" prefix, which
// repeats what the message already says.
func unwrapNetErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}
