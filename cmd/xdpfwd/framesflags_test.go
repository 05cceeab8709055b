package main

// The frame and ring flags: --multi-buffer (auto on a jumbo link) and
// --ring-size.

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestMultiBufferAuto: a link with MTU 9000 and no --multi-buffer starts
// with multi-buffer on, says why, and forwards a jumbo frame; with
// --multi-buffer off (either spelling) the same links are an input error.
func TestMultiBufferAuto(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{MTU: 9000})
	for _, off := range [][]string{{"--multi-buffer", "off"}, {"--multi-buffer=false"}} {
		args := append([]string{"run", "--link", p.LinkA, "--link", p.LinkB}, off...)
		r := runBin(t, 30*time.Second, nil, args...)
		t.Logf("%s: exit %d\nstderr:\n%s", strings.Join(off, " "), r.code, r.stderr)
		if r.code != 2 {
			t.Errorf("%s with MTU 9000: exit %d, want 2", strings.Join(off, " "), r.code)
		}
		for _, w := range []string{"MTU 9000", "2048", "multi-buffer"} {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: the message does not mention %q", strings.Join(off, " "), w)
			}
		}
		checkDetached(t, p.LinkA, p.LinkB)
	}

	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0")
	waitAttached(t, pr, p, 10*time.Second)
	if log := pr.stderr.String(); !strings.Contains(log, `msg="multi-buffer on"`) || !strings.Contains(log, "MTU 9000") {
		t.Errorf("no log line says multi-buffer is on because of MTU 9000:\n%s", log)
	}
	res, err := topo.SendFrames(p.A, p.B, []int{9014, 4000, 60}, 10*time.Second)
	if err != nil {
		t.Fatalf("send jumbo frames: %v\nstderr:\n%s", err, pr.stderr.String())
	}
	if res.Matched != res.Sent {
		t.Errorf("%d of %d frames arrived intact (missing %v, altered %v)", res.Matched, res.Sent, res.Missing, res.Mismatch)
	}
	pr.interrupt()
	checkDetached(t, p.LinkA, p.LinkB)
}

// TestMultiBufferFlag: --multi-buffer takes auto|on|off, and the boolean
// forms it had: bare, =true, =false; in process, no links needed.
func TestMultiBufferFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want fwd.MultiBufferMode
	}{
		{nil, fwd.MultiBufferAuto},
		{[]string{"--multi-buffer"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer", "--queues", "1"}, fwd.MultiBufferOn},
		{[]string{"--queues", "1", "--multi-buffer"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer=true"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer=false"}, fwd.MultiBufferOff},
		{[]string{"--multi-buffer", "off"}, fwd.MultiBufferOff},
		{[]string{"-multi-buffer", "on"}, fwd.MultiBufferOn},
		{[]string{"--multi-buffer", "auto"}, fwd.MultiBufferAuto},
		{[]string{"--multi-buffer=off"}, fwd.MultiBufferOff},
		{[]string{"--summary", "--multi-buffer", "--multi-buffer", "off"}, fwd.MultiBufferOff},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		var ff fwdFlags
		ff.register(fs, true)
		fs.String("summary", "", "")
		if err := parseFlags(fs, c.args, &bytes.Buffer{}); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		cfg, _, err := ff.config(&bytes.Buffer{})
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if cfg.MultiBufferMode != c.want {
			t.Errorf("%q: mode %v, want %v", c.args, cfg.MultiBufferMode, c.want)
		}
	}
	// YAML: the booleans it had, and the three words.
	dir := t.TempDir()
	for body, want := range map[string]fwd.MultiBufferMode{
		"multi-buffer: true\n":  fwd.MultiBufferOn,
		"multi-buffer: false\n": fwd.MultiBufferOff,
		"multi-buffer: on\n":    fwd.MultiBufferOn,
		"multi-buffer: off\n":   fwd.MultiBufferOff,
		"multi-buffer: auto\n":  fwd.MultiBufferAuto,
	} {
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		var ff fwdFlags
		ff.register(fs, true)
		if _, err := applyConfigFile(fs, path); err != nil {
			t.Errorf("%q: %v", body, err)
			continue
		}
		if ff.cfg.MultiBufferMode != want {
			t.Errorf("%q: mode %v, want %v", body, ff.cfg.MultiBufferMode, want)
		}
	}
	for _, args := range [][]string{{"--multi-buffer=maybe"}, {"--multi-buffer", "maybe"}} {
		var stderr bytes.Buffer
		if code := run(append([]string{"run"}, args...), &bytes.Buffer{}, &stderr); code != exitUsage {
			t.Errorf("%q: exit %d, want 2; stderr %q", args, code, stderr.String())
		}
	}
}

// TestRingSizeFlag: --ring-size (and ring-size: in a config file) takes 0
// (auto) or a power of two in 64..16384; anything else exits 2 saying so.
func TestRingSizeFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want uint32
	}{
		{nil, 0},
		{[]string{"--ring-size", "0"}, 0},
		{[]string{"--ring-size", "64"}, 64},
		{[]string{"--ring-size=4096"}, 4096},
		{[]string{"--ring-size", "16384"}, 16384},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		var ff fwdFlags
		ff.register(fs, true)
		if err := parseFlags(fs, c.args, &bytes.Buffer{}); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		cfg, _, err := ff.config(&bytes.Buffer{})
		if err != nil || cfg.RingSize != c.want {
			t.Errorf("%q: ring size %d, %v; want %d", c.args, cfg.RingSize, err, c.want)
		}
	}
	dir := t.TempDir()
	for _, v := range []string{"32", "100", "32768", "-64", "many"} {
		var stderr bytes.Buffer
		code := run([]string{"run", "--link", "a", "--link", "b", "--ring-size", v}, &bytes.Buffer{}, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "ring-size") {
			t.Errorf("--ring-size %s: exit %d, stderr %q; want 2 naming --ring-size", v, code, stderr.String())
		}
		path := filepath.Join(dir, "c.yaml")
		os.WriteFile(path, []byte("link: [a, b]\nring-size: "+v+"\n"), 0o644)
		stderr.Reset()
		code = run([]string{"run", "--config", path}, &bytes.Buffer{}, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "ring-size") {
			t.Errorf("ring-size: %s in a config file: exit %d, stderr %q; want 2 naming ring-size", v, code, stderr.String())
		}
	}
}
