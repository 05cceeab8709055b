package main

import (
	"io"
	"log/slog"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// serveMetrics serves Prometheus metrics and /healthz for f on addr until
// the returned stop function is called.
func serveMetrics(addr string, f *fwd.Forwarder, logger *slog.Logger) (stop func(), err error) {
	return nil, usageError{"--metrics: not built yet"}
}

// cmdStats prints a running daemon's counters once per second.
func cmdStats(args []string, stdout, stderr io.Writer) error {
	return usageError{"stats: not built yet"}
}
