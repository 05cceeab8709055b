package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestWaitMetricsAddr: the address is the addr field of the daemon's
// "serving metrics" line, past other lines (a "forwarder ready" with an
// addr of its own included); a daemon that exits without the line is an
// error naming it, at once rather than at the deadline.
func TestWaitMetricsAddr(t *testing.T) {
	dir := t.TempDir()
	script := `echo 'time=2026-12-03T10:00:00Z level=INFO msg="forwarder ready" addr=wrong links="[a b]"'
echo 'time=2026-12-03T10:00:00Z level=INFO msg="serving metrics" addr=127.0.0.1:40123 url=http://127.0.0.1:40123/metrics'
exec sleep 10`
	c, err := startChild("fake-xdpfwd", "sh", []string{"-c", script}, nil, filepath.Join(dir, "a.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop(time.Second)
	if addr, err := c.waitMetricsAddr(5 * time.Second); err != nil || addr != "127.0.0.1:40123" {
		t.Errorf("waitMetricsAddr = %q, %v; want 127.0.0.1:40123", addr, err)
	}

	c2, err := startChild("fake-xdpfwd", "sh", []string{"-c", `echo 'level=ERROR msg="cannot listen"'`}, nil, filepath.Join(dir, "b.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.stop(time.Second)
	start := time.Now()
	addr, err := c2.waitMetricsAddr(5 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited before") || !strings.Contains(err.Error(), "cannot listen") {
		t.Errorf("waitMetricsAddr = %q, %v; want an error that it exited, with its log", addr, err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("took %v: it waited for the deadline, not for the exit", d)
	}
	if (*child)(nil).metrics() != "" {
		t.Error("no child: want no metrics address")
	}
}
