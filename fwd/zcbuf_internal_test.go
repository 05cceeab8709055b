package fwd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
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
// links' drivers. The pair's veths pose as igb (driverOf): with the frame
// size left to it, New picks 4096 and says why; an explicit 2048 binds in
// copy mode with zero-copy auto and is refused with zero-copy on, naming
// --frame-size 4096. Not parallel: it swaps driverOf, which no parallel
// test then reads.
func TestNewFitsDriverFrames(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	saved := driverOf
	defer func() { driverOf = saved }()
	driverOf = func(name string) (string, error) {
		if name == p.LinkA || name == p.LinkB {
			return "igb", nil
		}
		return ethtool.Driver(name)
	}
	for _, tc := range []struct {
		name      string
		frameSize int
		zc        xsk.ZeroCopy
		wantFrame int
		wantZC    xsk.ZeroCopy
		log, err  string
	}{
		{"default", 0, xsk.ZeroCopyAuto, 4096, xsk.ZeroCopyAuto,
			`msg="frame size 4096" reason="igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024; link ` + p.LinkA + ` needs 1518 (MTU 1500 + 18)"`, ""},
		{"explicit auto", 2048, xsk.ZeroCopyAuto, 2048, xsk.ZeroCopyOff, `level=WARN msg="zero-copy off" reason="--frame-size 2048: igb programs`, ""},
		{"explicit on", 2048, xsk.ZeroCopyOn, 0, 0, "", "--frame-size 2048 with --zerocopy on: igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024"},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
