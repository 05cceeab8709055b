package fwd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xsk"
)

type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestNewFitsDriverFrames: New applies package zcbuf's decision to the
// links' drivers. The pair's veths pose as igb with zero-copy of one
// segment, as Linux 6.14+ reports it (probeLink): with the frame
// size left to it, New picks 4096 and says why; an explicit 2048 binds in
// copy mode with zero-copy auto and is refused with zero-copy on, naming
// --frame-size 4096. Without zero-copy (as the kernel says of veth),
// nothing changes, even with an explicit 2048. Not
// parallel: it swaps probeLink, which no parallel test then reads.
func TestNewFitsDriverFrames(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	saved := probeLink
	defer func() { probeLink = saved }()
	asIGB := func(name string, ifindex int) (string, xsk.ZeroCopyFeatures) {
		if name == p.LinkA || name == p.LinkB {
			return "igb", xsk.ZeroCopyFeatures{Known: true, ZeroCopy: true, MaxSegs: 1}
		}
		return saved(name, ifindex)
	}
	igbNoZC := func(name string, ifindex int) (string, xsk.ZeroCopyFeatures) {
		_, zc := saved(name, ifindex)
		return "igb", zc
	}
	for _, tc := range []struct {
		name      string
		probe     func(string, int) (string, xsk.ZeroCopyFeatures)
		frameSize int
		zc        xsk.ZeroCopy
		wantFrame int
		wantZC    xsk.ZeroCopy
		log, err  string
	}{
		{"default", asIGB, 0, xsk.ZeroCopyAuto, 4096, xsk.ZeroCopyAuto,
			`msg="frame size 4096" reason="igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024; link ` + p.LinkA + ` needs 1518 (MTU 1500 + 18)"`, ""},
		{"explicit auto", asIGB, 2048, xsk.ZeroCopyAuto, 2048, xsk.ZeroCopyOff, `level=WARN msg="zero-copy off" reason="--frame-size 2048: igb programs`, ""},
		{"explicit on", asIGB, 2048, xsk.ZeroCopyOn, 0, 0, "", "--frame-size 2048 with --zerocopy on: igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024"},
		{"igb without zero-copy (the veths' own features)", igbNoZC, 2048, xsk.ZeroCopyAuto, 2048, xsk.ZeroCopyAuto, `msg="multi-buffer off"`, ""},
		{"veths as themselves", saved, 0, xsk.ZeroCopyAuto, 2048, xsk.ZeroCopyAuto, `msg="multi-buffer off"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			probeLink = tc.probe
			var logs syncLog
			f, err := New(Config{Links: []string{p.LinkA, p.LinkB}, FrameSize: tc.frameSize, ZeroCopy: tc.zc,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if tc.err != "" {
				var ie *InputError
				if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("New: %v, want an input error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer f.Close()
			if f.cfg.FrameSize != tc.wantFrame || f.cfg.ZeroCopy != tc.wantZC || f.region.Config().FrameSize != tc.wantFrame {
				t.Errorf("frame size %d (UMEM %d), zero-copy %v; want %d, %v", f.cfg.FrameSize, f.region.Config().FrameSize, f.cfg.ZeroCopy, tc.wantFrame, tc.wantZC)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log lacks %q:\n%s", tc.log, logs.String())
			}
		})
	}
}
