package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// The capture contenders: what a running `xdpfwd capture` costs
// forwarding. The same xdpfwd as the reference row, with a
// capture client attached through its control socket for the whole
// sample, writing pcapng to /dev/null; the
// client runs on the forwarder's CPU, so the capture's whole cost (the
// workers' copies, the daemon's streaming, the client's writing) is
// charged to forwarding. The reference row, in the same run, is the
// forwarder with nobody capturing.
var captureConfigs = []struct {
	Name, Label string
	Args        []string
}{
	// Every packet, both directions, whole: the worst case.
	{"xdpfwd-capture", "xdpfwd, capture of everything running", nil},
	// A filter that every packet runs through and none passes: the
	// filter's cost alone.
	{"xdpfwd-capture-filter", "xdpfwd, capture 'udp port 1' running (keeps nothing)", []string{"udp", "port", "1"}},
}

func captureContenders() []*contender {
	var cs []*contender
	for _, cfg := range captureConfigs {
		cs = append(cs, xdpfwdCaptureContender(cfg.Name, cfg.Label, cfg.Args))
	}
	return cs
}

func xdpfwdCaptureContender(name, label string, filter []string) *contender {
	c := xdpfwdContender(name, label, nil)
	c.Desc = "xdpfwd (default) with `xdpfwd capture -w /dev/null" + argsNote(filter) + "` attached for the whole sample, on the forwarder's CPU"
	c.Groups = []string{"udp", "cost"}
	build := c.build
	c.build = func(ctx context.Context, e *env) error {
		if err := build(ctx, e); err != nil {
			return err
		}
		help, _ := exec.Command(e.bins["xdpfwd"], "capture", "--help").CombinedOutput()
		if !strings.Contains(string(help), "-snaplen") {
			return errors.New("this xdpfwd has no capture command yet")
		}
		return nil
	}
	start := c.start
	c.start = func(ctx context.Context, e *env, p *topo.Pair) (stopFunc, error) {
		stop, err := start(ctx, e, p)
		if err != nil {
			return nil, err
		}
		// run's default control socket: /run/xdpfwd/FIRST-LINK.sock.
		sock := filepath.Join("/run/xdpfwd", p.LinkA+".sock")
		args := append([]string{"capture", "--control", sock, "-w", "/dev/null"}, filter...)
		log := filepath.Join(e.tmp, name+"-capture.log")
		cl, err := startChild(name+"-capture", e.bins["xdpfwd"], args, []int{e.o.FwdCPU}, log)
		if err == nil {
			err = waitLogged(ctx, cl, log, "listening on", 10*time.Second)
		}
		if err != nil {
			if cl != nil {
				cl.stop(5 * time.Second)
			}
			_, serr := stop()
			return nil, errors.Join(err, serr)
		}
		return func() (map[string]any, error) {
			cerr := cl.stop(10 * time.Second)
			d, err := stop()
			if d == nil {
				d = map[string]any{}
			}
			captured, lost, perr := captureCounts(log)
			d["capture_captured"], d["capture_lost"] = captured, lost
			return d, errors.Join(err, cerr, perr)
		}, nil
	}
	return c
}

// waitLogged waits until the child's log holds want.
func waitLogged(ctx context.Context, c *child, log, want string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), want) {
			return nil
		}
		if c.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: no %q within %v%s", c.name, want, within, c.logTail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var captureCountsRE = regexp.MustCompile(`(\d+) packets captured\n(\d+) packets lost`)

// captureCounts reads what a capture client said it captured and lost.
func captureCounts(log string) (captured, lost uint64, err error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return 0, 0, err
	}
	m := captureCountsRE.FindSubmatch(b)
	if m == nil {
		return 0, 0, fmt.Errorf("capture log %s: no counts", log)
	}
	captured, _ = strconv.ParseUint(string(m[1]), 10, 64)
	lost, _ = strconv.ParseUint(string(m[2]), 10, 64)
	return captured, lost, nil
}
