package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// Options configure a Server.
type Options struct {
	// Version is xdpfwd_info's version label.
	Version string
	// Health reports whether the forwarder runs: nil means /healthz
	// answers 200 "ok"; an error, 503 with its text. The first error also
	// freezes the Collector for good: from then on the forwarder may be
	// closing, and scrapes serve the last values read. A nil Health is
	// healthy until Collector.Freeze is called.
	//
	// It must start failing before the forwarder's Close (or Shutdown)
	// begins, in the happens-before sense: set an atomic, then close.
	Health func() error
	// Check reports a fault of a running forwarder (a stalled worker):
	// an error makes /healthz answer 503 with its text, as long as it
	// lasts. Unlike Health it freezes nothing: the forwarder is still
	// there, and its metrics show what goes wrong. nil: no check.
	Check func() error
	// Registry is where the Collector is registered and what /metrics
	// serves. nil: a new registry, and /metrics serves after its families
	// those of the Go runtime (go_*) and the process (process_*), from a
	// registry of their own: xdpfwd's come first, where `curl | head`
	// shows them.
	Registry *prometheus.Registry
	// Logger receives the HTTP handler's errors; nil discards them.
	Logger *slog.Logger
	// FDB, in switch mode, is served on /fdb and counted (xdpfwd_fdb_*).
	FDB FDB
	// Sink, in sink mode, is served as xdpfwd_sink_*.
	Sink Sink
	// Swap, in 5tswap mode, is served as xdpfwd_5tswap_*.
	Swap Swap
	// Handovers, for a daemon, is served as xdpfwd_handovers_total and
	// xdpfwd_handover_pause_seconds; nil: not served.
	Handovers func() Handovers
	// Pods names the pod a link serves, for the per-link series'
	// namespace and pod labels and xdpfwd_link_info's pod_uid; nil, or
	// ok false: none (the labels are empty).
	Pods func(link string) (p Pod, ok bool)
}

// Pod is the pod a link serves, as the metrics label it.
type Pod struct{ Namespace, Name, UID string }

// Server serves a forwarder's metrics on /metrics and its health on
// /healthz. It is an http.Handler; the caller owns the listener.
type Server struct {
	c   *Collector
	reg *prometheus.Registry
	// runtime holds the Go and process collectors, served after reg's;
	// nil with Options.Registry.
	runtime *prometheus.Registry
	health  func() error
	check   func() error
	mux     *http.ServeMux
	logger  *slog.Logger
}

// NewServer builds a Collector over f (see NewCollector: call it before
// Run) and a Server over that.
func NewServer(f *fwd.Forwarder, opts Options) (*Server, error) {
	return newServer(NewCollector(f, opts.Version), opts)
}

// Handler is NewServer for callers that only need the http.Handler.
func Handler(f *fwd.Forwarder, opts Options) (http.Handler, error) {
	return NewServer(f, opts)
}

func newServer(c *Collector, opts Options) (*Server, error) {
	s := &Server{c: c, reg: opts.Registry, health: opts.Health, check: opts.Check, logger: opts.Logger}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	c.logger = s.logger
	c.live = s.healthErr
	if opts.Pods != nil {
		c.pods = opts.Pods
		c.last = c.read() // the first reading, with the pods
	}
	var served prometheus.Gatherer = s.reg
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.runtime = prometheus.NewRegistry()
		if err := s.runtime.Register(collectors.NewGoCollector()); err != nil {
			return nil, err
		}
		if err := s.runtime.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, err
		}
		served = inOrder{s.reg, s.runtime}
	}
	if err := s.reg.Register(c); err != nil {
		return nil, fmt.Errorf("metrics: register collector: %w", err)
	}
	if opts.FDB != nil {
		if err := s.reg.Register(newFDBCollector(opts.FDB)); err != nil {
			return nil, fmt.Errorf("metrics: register fdb collector: %w", err)
		}
	}
	if opts.Sink != nil {
		if err := s.reg.Register(newSinkCollector(opts.Sink)); err != nil {
			return nil, fmt.Errorf("metrics: register sink collector: %w", err)
		}
	}
	if opts.Swap != nil {
		if err := s.reg.Register(newSwapCollector(opts.Swap)); err != nil {
			return nil, fmt.Errorf("metrics: register 5tswap collector: %w", err)
		}
	}
	if opts.Handovers != nil {
		if err := s.reg.Register(newHandoverCollector(opts.Handovers)); err != nil {
			return nil, fmt.Errorf("metrics: register handover collector: %w", err)
		}
	}
	s.mux = http.NewServeMux()
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(served, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	s.mux.HandleFunc("GET /healthz", s.serveHealth)
	if opts.FDB != nil {
		s.mux.HandleFunc("GET /fdb", serveFDB(opts.FDB))
	}
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "xdpfwd: /metrics (Prometheus), /healthz\n")
	})
	return s, nil
}

// Collector is the Server's collector, e.g. to Freeze it before Close.
func (s *Server) Collector() *Collector { return s.c }

// Registry is the registry of xdpfwd's collectors, which /metrics serves
// first (see Options.Registry).
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// inOrder gathers each of its gatherers in turn and serves their families
// in that order, where prometheus.Gatherers would sort them all by name.
// Their names must not overlap.
type inOrder []prometheus.Gatherer

func (g inOrder) Gather() ([]*dto.MetricFamily, error) {
	var out []*dto.MetricFamily
	var errs prometheus.MultiError
	for _, x := range g {
		mfs, err := x.Gather()
		errs.Append(err)
		out = append(out, mfs...)
	}
	return out, errs.MaybeUnwrap()
}

// ServeHTTP serves /metrics, /healthz and a one-line index on /.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

var errFrozen = errors.New("stopping: forwarder metrics frozen")

// healthErr is nil while the forwarder runs.
func (s *Server) healthErr() error {
	if s.health != nil {
		if err := s.health(); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) serveHealth(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	err := s.healthErr()
	if err == nil && s.c.Frozen() {
		err = errFrozen
	}
	if err != nil {
		// Freeze at once, not at the next scrape: the forwarder is going.
		s.c.Freeze()
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%v\n", err)
		return
	}
	if s.check != nil {
		if err := s.check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%v\n", err)
			return
		}
	}
	fmt.Fprint(w, "ok\n")
}
