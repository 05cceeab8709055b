// The xdpfwd daemon as a contender's process: started with --metrics on
// a port the kernel picks, which perf then reads from its log.

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/logfmt"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// metricsLogMsg is the line xdpfwd logs once its --metrics endpoint
// listens, with the address it bound as addr (cmd/xdpfwd/metrics.go).
const metricsLogMsg = "serving metrics"

// startXdpfwd starts xdpfwd as startForwarder does, with --metrics
// 127.0.0.1:0 when the build has the flag, and records the address it
// bound (child.metricsAddr): workloads that need xdpfwd's own counts over
// their window (cost, delivery) scrape it before and after. Port 0 leaves
// the choice to the kernel, so no other process can take the port between
// a pick and the bind; the daemon logs the port before it forwards, so
// once startForwarder has seen traffic cross, the line is in the log.
func (e *env) startXdpfwd(ctx context.Context, p *topo.Pair, name, bin string, args []string, cpus []int) (*child, error) {
	if e.xdpfwdMetrics {
		args = append(slices.Clone(args), "--metrics", "127.0.0.1:0")
	}
	c, err := e.startForwarder(ctx, p, name, bin, args, cpus)
	if err != nil || !e.xdpfwdMetrics {
		return c, err
	}
	if c.metricsAddr, err = c.waitMetricsAddr(2 * time.Second); err != nil {
		e.child.Store(nil)
		return nil, errors.Join(err, c.stop(5*time.Second))
	}
	return c, nil
}

// waitMetricsAddr waits up to within for the addr field of the daemon's
// "serving metrics" log line.
func (c *child) waitMetricsAddr(within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	for {
		exited := c.exited() // before the read: the log is then complete
		if f, ok := logfmt.Find(c.p.Output(), metricsLogMsg); ok && f["addr"] != "" {
			return f["addr"], nil
		}
		if exited {
			return "", fmt.Errorf("%s exited before it logged %q%s", c.name, metricsLogMsg, c.logTail())
		}
		if !time.Now().Before(deadline) {
			return "", fmt.Errorf("%s: no %q line with an addr in its log within %v%s", c.name, metricsLogMsg, within, c.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metrics is the address the forwarder c serves its metrics on; "" when
// there is none running, or it serves none (not xdpfwd, or an xdpfwd
// without --metrics).
func (c *child) metrics() string {
	if c == nil {
		return ""
	}
	return c.metricsAddr
}
