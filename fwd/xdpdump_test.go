package fwd_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestXDPDump: xdp-tools' xdpdump attaches to the XDP program of a link
// xdpfwd forwards on, native and generic, and captures every frame that
// enters it (the RX side), whole, while forwarding goes on (the frames
// reach the other namespace intact too). With fexit as well, each frame
// appears a second time, as the program left it.
//
// xdpdump first finds the program's entry function through its BTF (which
// it refuses to go on without), then loads fentry/fexit programs aimed at
// it. A kernel that refuses every fentry program, whatever its target
// (some sandboxed kernels do: probeFentry), can only show the first step;
// the test then checks that and says why it stops there.
func TestXDPDump(t *testing.T) {
	xdpdump := requireTool(t, "xdpdump", "xdp-tools")
	fentryErr := probeFentry()
	for _, tc := range []struct {
		name    string
		mode    xsk.XDPMode
		capture string // --rx-capture
		copies  int    // each frame's appearances in the capture
	}{
		{"native", xsk.XDPNative, "entry", 1},
		{"generic", xsk.XDPGeneric, "entry", 1},
		{"native-entry-exit", xsk.XDPNative, "entry,exit", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, topo.Options{Queues: 2})
			r := start(t, p, fwd.Config{XDPMode: tc.mode})
			want := map[xsk.XDPMode]string{xsk.XDPNative: "native", xsk.XDPGeneric: "generic"}[tc.mode]
			if got := r.f.LinkStats(0).XDPMode; got != want {
				t.Fatalf("link A's program is attached in %q mode, want %q", got, want)
			}
			file := filepath.Join(t.TempDir(), "a.pcapng")
			d, early := startXDPDump(t, xdpdump, "--verbose", "-i", p.LinkA, "--rx-capture", tc.capture, "-w", file)
			// xdpdump --verbose says which function it found in the
			// program's BTF, before it loads anything.
			if found := "Found func " + xsk.ProgramName + " matching " + xsk.ProgramName; !strings.Contains(d.stderr.String(), found) {
				t.Fatalf("xdpdump did not find the program's function (%q):\n%s", found, d.stderr)
			}
			if early != nil {
				if fentryErr != nil {
					t.Skipf("xdpdump found %s by its BTF, then could not load its fentry program: this kernel refuses every fentry program (%v), so no capture can be checked here:\n%s",
						xsk.ProgramName, fentryErr, lastLines(d.stderr.String(), 4))
				}
				t.Fatalf("xdpdump exited (%v) before listening:\n%s", early, d.stderr)
			}
			if listening := "func " + xsk.ProgramName; !strings.Contains(d.stderr.String(), listening) {
				t.Fatalf("xdpdump is not listening on %s:\n%s", xsk.ProgramName, d.stderr)
			}

			var sizes []int
			for n := 60; n <= 1514; n += 47 {
				sizes = append(sizes, n)
			}
			res, err := topo.SendFrames(p.A, p.B, sizes, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if res.Matched != len(sizes) {
				t.Fatalf("forwarding while xdpdump ran: %d of %d frames arrived intact (missing sizes %v, altered %v)",
					res.Matched, len(sizes), res.Missing, res.Mismatch)
			}
			summary := d.stop(t)
			frames, err := readPCAPNG(file)
			if err != nil {
				t.Fatalf("xdpdump's capture: %v\nxdpdump said:\n%s", err, summary)
			}
			checkCaptured(t, frames, sizes, tc.copies, p)
			if !strings.Contains(summary, "\n0 packets dropped by perf ring") {
				t.Errorf("xdpdump lost packets:\n%s", summary)
			}
		})
	}
}

// probeFentry loads the smallest fentry program, on the kernel function
// that exists for such tests (bpf_fentry_test1): an error means the kernel
// takes no fentry program at all, whatever the target.
func probeFentry() error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceFEntry,
		AttachTo:     "bpf_fentry_test1",
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		return fmt.Errorf("fentry on bpf_fentry_test1: %w", err)
	}
	return prog.Close()
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// requireTool returns the path of a command the test needs: a missing one
// skips the test, or fails it under XDPFWD_REQUIRE_INTEGRATION=1 (.ci/install
// installs it from the Debian package pkg).
func requireTool(t *testing.T, name, pkg string) string {
	t.Helper()
	topo.RequireRoot(t)
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found (Debian package %s): %v", name, pkg, err)
	if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// xdpdumpRun is an xdpdump child process, with a bounded lifetime.
type xdpdumpRun struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	stderr *logBuffer
	done   chan error
	exited bool
}

// startXDPDump starts xdpdump and waits until it says it is listening,
// which it does once its fentry/fexit programs are attached, or exits:
// then early is how it ended.
func startXDPDump(t *testing.T, path string, args ...string) (_ *xdpdumpRun, early error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	d := &xdpdumpRun{cancel: cancel, stderr: &logBuffer{}, done: make(chan error, 1)}
	d.cmd = exec.CommandContext(ctx, path, args...)
	d.cmd.Stdout = io.Discard
	d.cmd.Stderr = d.stderr
	d.cmd.WaitDelay = 5 * time.Second
	if err := d.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start xdpdump: %v", err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(d.stderr.String(), "listening on") {
		select {
		case err := <-d.done:
			d.exited = true
			if err == nil {
				err = errors.New("exit status 0")
			}
			return d, err
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdpdump %s not listening after 20 s:\n%s", strings.Join(args, " "), d.stderr)
		}
	}
	return d, nil
}

// stop interrupts xdpdump, which then flushes its capture and prints its
// counts, and returns what it printed on standard error.
func (d *xdpdumpRun) stop(t *testing.T) string {
	t.Helper()
	if !d.exited {
		d.exited = true
		if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Errorf("interrupt xdpdump: %v", err)
		}
		if err := <-d.done; err != nil {
			t.Errorf("xdpdump: %v\n%s", err, d.stderr)
		}
	}
	d.cancel()
	return d.stderr.String()
}

// checkCaptured: the capture holds, among other traffic, exactly the
// frames SendFrames sent from A to B (EtherType 0x88b5), each copies times,
// whole, identical, with A's and B's MAC addresses, the marker of this
// SendFrames call and the sequence number after it. (Order is not checked:
// xdpdump reads one perf buffer per CPU, in turn.)
func checkCaptured(t *testing.T, frames [][]byte, sizes []int, copies int, p *topo.Pair) {
	t.Helper()
	macA, err := p.A.HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	macB, err := p.B.HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	seen := make([][][]byte, len(sizes))
	var marker []byte
	n := 0
	for _, f := range frames {
		if len(f) < 14 || binary.BigEndian.Uint16(f[12:]) != 0x88b5 {
			continue
		}
		n++
		if len(f) < 26 {
			t.Fatalf("captured a %d-byte frame with EtherType 0x88b5", len(f))
		}
		seq := int(binary.BigEndian.Uint32(f[22:]))
		switch {
		case seq >= len(sizes):
			t.Fatalf("captured frame with sequence %d; %d were sent", seq, len(sizes))
		case len(f) != sizes[seq]:
			t.Fatalf("captured frame %d: %d bytes, want %d", seq, len(f), sizes[seq])
		case !bytes.Equal(f[0:6], macB) || !bytes.Equal(f[6:12], macA):
			t.Fatalf("captured frame %d: %x -> %x, want %s -> %s", seq, f[6:12], f[0:6], macA, macB)
		case marker != nil && !bytes.Equal(f[14:22], marker):
			t.Fatalf("captured frame %d: marker %x, want %x as in the others", seq, f[14:22], marker)
		case len(seen[seq]) > 0 && !bytes.Equal(f, seen[seq][0]):
			t.Fatalf("captured frame %d twice, with different bytes", seq)
		}
		marker = f[14:22]
		seen[seq] = append(seen[seq], f)
	}
	for seq, s := range seen {
		if len(s) != copies {
			t.Errorf("frame %d (%d bytes) captured %d times, want %d", seq, sizes[seq], len(s), copies)
		}
	}
	if n != copies*len(sizes) {
		t.Errorf("capture holds %d frames with EtherType 0x88b5 (of %d captured), want %d (%d sent × %d)",
			n, len(frames), copies*len(sizes), len(sizes), copies)
	}
}

// readPCAPNG returns the packet data of every Enhanced Packet Block in a
// pcapng file written on this machine (so in its byte order).
func readPCAPNG(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	const (
		shb = 0x0a0d0d0a
		epb = 6
	)
	bo := binary.NativeEndian
	if len(b) < 12 || bo.Uint32(b) != shb || bo.Uint32(b[8:]) != 0x1a2b3c4d {
		return nil, fmt.Errorf("%s: not a pcapng file in this machine's byte order", path)
	}
	var frames [][]byte
	for off := 0; off < len(b); {
		if len(b)-off < 12 {
			return nil, fmt.Errorf("%s: truncated block at %d", path, off)
		}
		typ, n := bo.Uint32(b[off:]), int(bo.Uint32(b[off+4:]))
		if n < 12 || n%4 != 0 || off+n > len(b) {
			return nil, fmt.Errorf("%s: block at %d: bad length %d", path, off, n)
		}
		if typ == epb {
			body := b[off+8 : off+n-4]
			if len(body) < 20 {
				return nil, fmt.Errorf("%s: short packet block at %d", path, off)
			}
			capLen, origLen := int(bo.Uint32(body[12:])), int(bo.Uint32(body[16:]))
			if capLen != origLen || 20+capLen > len(body) {
				return nil, fmt.Errorf("%s: packet block at %d: captured %d of %d bytes", path, off, capLen, origLen)
			}
			frames = append(frames, body[20:20+capLen])
		}
		off += n
	}
	return frames, nil
}
