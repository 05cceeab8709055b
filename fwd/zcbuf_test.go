package fwd_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/umem"
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
// links' drivers. Links that report igb with zero-copy of one segment, as
// Linux 6.14+ reports it: with the frame size left to it, New picks 4096
// and says why; an explicit 2048 binds in copy mode with zero-copy auto
// and is refused with zero-copy on, naming --frame-size 4096. Without
// zero-copy (as the kernel says of veth), nothing changes, even with an
// explicit 2048. On the fake environment (its links report what the test
// says): no root.
func TestNewFitsDriverFrames(t *testing.T) {
	igbZC := fwdtest.LinkOptions{Driver: "igb", ZeroCopy: xsk.ZeroCopyFeatures{Known: true, ZeroCopy: true, MaxSegs: 1}}
	igbNoZC := fwdtest.LinkOptions{Driver: "igb", ZeroCopy: xsk.ZeroCopyFeatures{Known: true}} // as the kernel says of veth
	veth := fwdtest.LinkOptions{Driver: "veth", Veth: true, ZeroCopy: xsk.ZeroCopyFeatures{Known: true}}
	for _, tc := range []struct {
		name      string
		link      fwdtest.LinkOptions
		frameSize int
		zc        xsk.ZeroCopy
		wantFrame int
		log, err  string
	}{
		{"default", igbZC, 0, xsk.ZeroCopyAuto, 4096,
			`msg="frame size 4096" reason="igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024; link a needs 1518 (MTU 1500 + 18)"`, ""},
		{"explicit auto", igbZC, 2048, xsk.ZeroCopyAuto, 2048, `level=WARN msg="zero-copy off" reason="--frame-size 2048: igb programs`, ""},
		{"explicit on", igbZC, 2048, xsk.ZeroCopyOn, 0, "", "--frame-size 2048 with --zerocopy on: igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024"},
		{"igb without zero-copy", igbNoZC, 2048, xsk.ZeroCopyAuto, 2048, `msg="multi-buffer off"`, ""},
		{"veths as themselves", veth, 0, xsk.ZeroCopyAuto, 2048, `msg="multi-buffer off"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := fwdtest.New()
			env.AddLink("a", tc.link)
			env.AddLink("b", tc.link)
			var logs syncLog
			f, err := fwd.New(fwd.Config{Links: []string{"a", "b"}, Env: env, FrameSize: tc.frameSize, ZeroCopy: tc.zc,
				HugePages: umem.HugePagesOff, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if tc.err != "" {
				if err == nil || !fwd.IsInputError(err) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("New: %v, want an input error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer f.Close()
			if got := f.Region().Config().FrameSize; got != tc.wantFrame {
				t.Errorf("UMEM frame size %d, want %d", got, tc.wantFrame)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log lacks %q:\n%s", tc.log, logs.String())
			}
			if off := strings.Contains(logs.String(), `msg="zero-copy off"`); off != (tc.name == "explicit auto") {
				t.Errorf("zero-copy turned off: %v, want %v:\n%s", off, tc.name == "explicit auto", logs.String())
			}
		})
	}
}
