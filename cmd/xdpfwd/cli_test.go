package main

// Tests of the real xdpfwd binary: built once per test run, started as a
// child process on throw-away topo pairs, judged by exit code, stderr, the
// --summary file and what stays attached to the links afterwards.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// ourProgName is the name xdpfwd's XDP program carries (xsk.ProgramName,
// spelled out so the test notices if it changes under us).
const ourProgName = "xdpfwd_redir"

// readyMsg is what xdpfwd logs (text format) once New has bound and
// registered every socket.
const readyMsg = `msg="forwarder ready"`

// The binary is built at most once, on first use, and removed by TestMain.
var bin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bin.dir != "" {
		os.RemoveAll(bin.dir)
	}
	os.Exit(code)
}

// binary returns the path of the xdpfwd binary, building it on first call.
func binary(t testing.TB) string {
	t.Helper()
	bin.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "xdpfwd-cli-test-")
		if err != nil {
			bin.err = err
			return
		}
		bin.dir = dir
		// Another uid (the not-root case) must be able to reach and run it.
		if err := os.Chmod(dir, 0o755); err != nil {
			bin.err = err
			return
		}
		path := filepath.Join(dir, "xdpfwd")
		cmd := exec.Command(gobin, "build", "-o", path, ".")
		out, err := cmd.CombinedOutput()
		if err != nil {
			bin.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		if err := os.Chmod(path, 0o755); err != nil {
			bin.err = err
			return
		}
		bin.path = path
	})
	if bin.err != nil {
		t.Fatalf("build xdpfwd: %v", bin.err)
	}
	return bin.path
}

// syncBuffer is a bytes.Buffer safe to read while a child writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is the outcome of one finished run of the binary.
type result struct {
	stdout, stderr string
	code           int // -1: killed by a signal
	elapsed        time.Duration
	timedOut       bool
}

// runBin runs the binary with args until it exits or timeout passes (then it
// is killed and timedOut is set). cred, if not nil, runs it as another user.
func runBin(t *testing.T, timeout time.Duration, cred *syscall.Credential, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 2 * time.Second
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.code = 0
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("xdpfwd %s: %v", strings.Join(args, " "), err)
	}
	r.timedOut = ctx.Err() != nil
	return r
}

// proc is a running xdpfwd started with startBin.
type proc struct {
	t              *testing.T
	args           []string
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
}

// startBin starts the binary in the background. Cleanup kills it if the test
// did not wait for it.
func startBin(t *testing.T, args ...string) *proc {
	t.Helper()
	return startPath(t, binary(t), nil, args...)
}

// startPath is startBin of the binary at path, with env added to the
// environment.
func startPath(t *testing.T, path string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, args: args, stdout: new(syncBuffer), stderr: new(syncBuffer), done: make(chan struct{})}
	p.cmd = exec.Command(path, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start xdpfwd %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to xdpfwd (pid %d): %v", sig, p.cmd.Process.Pid, err)
	}
}

// wait waits up to timeout for the process to exit and returns its exit
// code (-1 if a signal ended it). On timeout it kills the process and fails.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("xdpfwd %s (pid %d) still running after %v; killed\nstderr:\n%s",
			strings.Join(p.args, " "), p.cmd.Process.Pid, timeout, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// interrupt sends SIGINT and expects a clean exit 0.
func (p *proc) interrupt() {
	p.t.Helper()
	p.signal(os.Interrupt)
	if code := p.wait(15 * time.Second); code != 0 {
		p.t.Fatalf("xdpfwd exited %d after SIGINT, want 0\nstderr:\n%s", code, p.stderr.String())
	}
	checkNoPanic(p.t, "stderr", p.stderr.String())
}

func checkNoPanic(t *testing.T, what, s string) {
	t.Helper()
	if strings.Contains(s, "panic:") || strings.Contains(s, "goroutine ") {
		t.Errorf("%s shows a panic:\n%s", what, s)
	}
}

// newPair builds a topo pair that the test owns and removes.
func newPair(t *testing.T, opt topo.Options) *topo.Pair {
	t.Helper()
	topo.RequireRoot(t)
	p, err := topo.NewPair(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close pair: %v", err)
		}
	})
	return p
}

// xdpProg returns the ID (0: none) and name of the XDP program on a link.
func xdpProg(t *testing.T, link string) (uint32, string) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatalf("look up %s: %v", link, err)
	}
	x := l.Attrs().Xdp
	if x == nil || x.ProgId == 0 {
		return 0, ""
	}
	name := "?"
	if prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId)); err == nil {
		if info, err := prog.Info(); err == nil {
			name = info.Name
		}
		prog.Close()
	}
	return x.ProgId, name
}

// checkDetached fails unless no XDP program is on any of the links.
func checkDetached(t *testing.T, links ...string) {
	t.Helper()
	for _, l := range links {
		if id, name := xdpProg(t, l); id != 0 {
			t.Errorf("XDP program %d (%s) left attached to %s", id, name, l)
		}
	}
}

// waitDetached polls until no XDP program is on the links.
func waitDetached(t *testing.T, within time.Duration, links ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := ""
		for _, l := range links {
			if id, name := xdpProg(t, l); id != 0 {
				left += fmt.Sprintf(" %s: program %d (%s)", l, id, name)
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still attached %v later:%s", within, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAttached polls netlink until xdpfwd's program is on both links of p
// and xdpfwd has logged that it is ready, and returns the program IDs. It
// fails if the process exits first.
func waitAttached(t *testing.T, pr *proc, p *topo.Pair, within time.Duration) [2]uint32 {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var ids [2]uint32
		ok := true
		for i, l := range []string{p.LinkA, p.LinkB} {
			id, name := xdpProg(t, l)
			if id == 0 || !strings.HasPrefix(name, ourProgName) {
				ok = false
			}
			ids[i] = id
		}
		// The programs go on first; "forwarder ready" is logged once the
		// sockets are bound and registered in the programs' XSKMAPs.
		if ok && strings.Contains(pr.stderr.String(), readyMsg) {
			return ids
		}
		if pr.exited() {
			t.Fatalf("xdpfwd exited %d before attaching\nstderr:\n%s", pr.cmd.ProcessState.ExitCode(), pr.stderr.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("xdpfwd not attached to %s and %s within %v\nstderr:\n%s", p.LinkA, p.LinkB, within, pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pingAcross checks that traffic crosses the forwarder from A to B.
func pingAcross(t *testing.T, p *topo.Pair, pr *proc) {
	t.Helper()
	start := time.Now()
	res, err := topo.Ping(p.A, p.V4B, 3, 3*time.Second)
	t.Logf("ping %s → %s: %d/%d answered in %v", p.A.Name, p.V4B, res.Received, res.Sent, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("ping across the forwarder: %v\nxdpfwd stderr:\n%s", err, pr.stderr.String())
	}
	if res.Received == 0 {
		t.Fatalf("ping across the forwarder: %d sent, none answered", res.Sent)
	}
}

// attachForeign loads a minimal XDP_PASS program called foreign_pass and
// attaches it to link through netlink in generic mode (no BPF link), as
// another tool would. Cleanup detaches it if it is still there.
func attachForeign(t *testing.T, link string) uint32 {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "foreign_pass",
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 2), // XDP_PASS
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatalf("load foreign XDP program: %v", err)
	}
	info, err := prog.Info()
	if err != nil {
		prog.Close()
		t.Fatalf("foreign program info: %v", err)
	}
	id, _ := info.ID()
	l, err := netlink.LinkByName(link)
	if err != nil {
		prog.Close()
		t.Fatalf("look up %s: %v", link, err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, prog.FD(), unix.XDP_FLAGS_SKB_MODE); err != nil {
		prog.Close()
		t.Fatalf("attach foreign XDP program to %s: %v", link, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(link); err == nil {
			if x := l.Attrs().Xdp; x != nil && x.ProgId == uint32(id) {
				if err := netlink.LinkSetXdpFdWithFlags(l, -1, unix.XDP_FLAGS_SKB_MODE); err != nil {
					t.Errorf("detach foreign program from %s: %v", link, err)
				}
			}
		}
		prog.Close()
	})
	if got, _ := xdpProg(t, link); got != uint32(id) {
		t.Fatalf("foreign program %d not on %s after attach (found %d)", id, link, got)
	}
	return uint32(id)
}

// TestVersion: `xdpfwd version` prints the version and exits 0.
func TestVersion(t *testing.T) {
	t.Parallel()
	r := runBin(t, 30*time.Second, nil, "version")
	if r.code != 0 {
		t.Fatalf("exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "xdpfwd ") {
		t.Errorf("stdout %q does not start with %q", r.stdout, "xdpfwd ")
	}
}

// TestBadInput: every bad command line or environment exits 2 with a message
// naming the problem, without a panic, and leaves no XDP program behind.
func TestBadInput(t *testing.T) {
	topo.RequireRoot(t)
	binary(t) // build once, before the parallel subtests

	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	links := func(p *topo.Pair, extra ...string) []string {
		return append([]string{"run", "--link", p.LinkA, "--link", p.LinkB}, extra...)
	}
	type tcase struct {
		name string
		// setup prepares the pair; it returns substrings the message must
		// also contain and the program ID it left on LinkB (0: none).
		setup func(t *testing.T, p *topo.Pair) (want []string, foreignB uint32)
		args  func(p *topo.Pair) []string
		want  []string
		cred  *syscall.Credential
	}
	cases := []tcase{
		{name: "no command", args: func(*topo.Pair) []string { return nil }, want: []string{"usage: xdpfwd"}},
		{name: "unknown command", args: func(*topo.Pair) []string { return []string{"frobnicate"} },
			want: []string{`unknown command "frobnicate"`}},
		{name: "unknown flag", args: func(p *topo.Pair) []string { return links(p, "--bogus") },
			want: []string{"not defined", "-bogus"}},
		{name: "run without --link", args: func(*topo.Pair) []string { return []string{"run"} },
			want: []string{"two --link", "got 0"}},
		{name: "one --link", args: func(p *topo.Pair) []string { return []string{"run", "--link", p.LinkA} },
			want: []string{"two --link", "got 1"}},
		{name: "three --link", args: func(p *topo.Pair) []string { return links(p, "--link", p.LinkA+"x") },
			want: []string{"two --link", "got 3"}},
		{name: "switch with one --link, none to come", args: func(p *topo.Pair) []string {
			return []string{"run", "--mode", "switch", "--link", p.LinkA, "--max-links", "0"}
		}, want: []string{"--mode switch takes 2..64 --link flags, got 1", "--max-links above 1"}},
		{name: "bad after-handover", args: func(p *topo.Pair) []string { return links(p, "--after-handover", "linger") },
			want: []string{`--after-handover "linger"`, "exit or wait"}},
		{name: "takeover with another control socket", args: func(p *topo.Pair) []string {
			return links(p, "--takeover", "/run/xdpfwd/a.sock", "--control", "/run/xdpfwd/b.sock")
		}, want: []string{"--takeover /run/xdpfwd/a.sock and --control /run/xdpfwd/b.sock"}},
		{name: "takeover of no daemon", args: func(p *topo.Pair) []string {
			return links(p, "--takeover", "/nonexistent/xdpfwd.sock")
		}, want: []string{"--takeover /nonexistent/xdpfwd.sock", "no such file"}},
		{name: "bad mode", args: func(p *topo.Pair) []string { return links(p, "--mode", "router") },
			want: []string{`mode "router"`, "xconnect, switch, reflect, sink, 5tswap, mac or txonly"}},
		{name: "txonly frame too small", args: func(p *topo.Pair) []string {
			return []string{"run", "--mode", "txonly", "--link", p.LinkA, "--size", "40"}
		}, want: []string{"frame size 40", "64..2052"}},
		{name: "txonly 64 B with a VLAN tag", args: func(p *topo.Pair) []string {
			return []string{"run", "--mode", "txonly", "--link", p.LinkA, "--vlan", "7"}
		}, want: []string{"frame size 64", "68..", "VLAN"}},
		{name: "txonly frame over the MTU", args: func(p *topo.Pair) []string {
			return []string{"run", "--mode", "txonly", "--link", p.LinkA, "--size", "1600"}
		}, want: []string{"--size 1600", "MTU 1500"}},
		{name: "txonly bad rate", args: func(p *topo.Pair) []string {
			return []string{"run", "--mode", "txonly", "--link", p.LinkA, "--rate", "fast"}
		}, want: []string{"--rate", "fast"}},
		{name: "txonly too many flows", args: func(p *topo.Pair) []string {
			return []string{"run", "--mode", "txonly", "--link", p.LinkA, "--flows", "5000"}
		}, want: []string{"flows 5000"}},
		{name: "txonly bad dst-mac", args: func(p *topo.Pair) []string {
			return []string{"run", "--mode", "txonly", "--link", p.LinkA, "--dst-mac", "nope"}
		}, want: []string{"--dst-mac", "nope"}},
		{name: "bench bad dut", args: func(*topo.Pair) []string { return []string{"bench", "--dut", "router"} },
			want: []string{"--dut", "router"}},
		{name: "bench bad size", args: func(*topo.Pair) []string { return []string{"bench", "--size", "9000"} },
			want: []string{"--size 9000"}},
		{name: "bad static fdb entry", args: func(p *topo.Pair) []string {
			return links(p, "--mode", "switch", "--fdb-static", "02:00:00:00:00:01=nolink")
		},
			want: []string{"--fdb-static", "not one of the links"}},
		{name: "static fdb entry without switch", args: func(p *topo.Pair) []string { return links(p, "--fdb-static", "02:00:00:00:00:01="+p.LinkA) },
			want: []string{"--fdb-static is for --mode switch"}},
		{name: "access VLAN of no link", args: func(p *topo.Pair) []string { return links(p, "--mode", "switch", "--access-vlan", "nolink=100") },
			want: []string{"--access-vlan", "not one of the links"}},
		{name: "access VLAN 4095", args: func(p *topo.Pair) []string { return links(p, "--mode", "switch", "--access-vlan", p.LinkA+"=4095") },
			want: []string{"--access-vlan", "1..4094"}},
		{name: "trunk range backwards", args: func(p *topo.Pair) []string { return links(p, "--mode", "switch", "--trunk", p.LinkA+"=200-100") },
			want: []string{"--trunk", "200-100"}},
		{name: "access VLAN and trunk on one link", args: func(p *topo.Pair) []string {
			return links(p, "--mode", "switch", "--access-vlan", p.LinkA+"=5", "--trunk", p.LinkA+"=6")
		}, want: []string{"given VLANs twice"}},
		{name: "trunk without switch", args: func(p *topo.Pair) []string { return links(p, "--trunk", p.LinkA+"=6") },
			want: []string{"--access-vlan and --trunk are for --mode switch"}},
		{name: "same link twice",
			args: func(p *topo.Pair) []string { return []string{"run", "--link", p.LinkA, "--link", p.LinkA} },
			want: []string{"given twice"}},
		{name: "unknown link",
			args: func(p *topo.Pair) []string {
				return []string{"run", "--link", p.LinkA, "--link", p.LinkB[:len(p.LinkB)-1] + "z"}
			},
			want: []string{"unknown link"}},
		{name: "bad xdp-mode", args: func(p *topo.Pair) []string { return links(p, "--xdp-mode", "turbo") },
			want: []string{"xdp mode", "turbo"}},
		{name: "bad zerocopy", args: func(p *topo.Pair) []string { return links(p, "--zerocopy", "maybe") },
			want: []string{"zerocopy", "maybe"}},
		{name: "bad hugepages", args: func(p *topo.Pair) []string { return links(p, "--hugepages", "sometimes") },
			want: []string{"hugepages", "sometimes"}},
		{name: "frame-size 3000", args: func(p *topo.Pair) []string { return links(p, "--frame-size", "3000") },
			want: []string{"--frame-size 3000", "2048", "4096"}},
		{name: "negative coalesce", args: func(p *topo.Pair) []string { return links(p, "--coalesce", "-1us") },
			want: []string{"--coalesce -1µs", "0..1ms"}},
		{name: "coalesce too long", args: func(p *topo.Pair) []string { return links(p, "--coalesce", "2ms") },
			want: []string{"--coalesce 2ms", "0..1ms"}},
		{name: "bad spin", args: func(p *topo.Pair) []string { return links(p, "--spin", "fast") },
			want: []string{`--spin "fast"`, "auto, off"}},
		{name: "negative spin", args: func(p *topo.Pair) []string { return links(p, "--spin", "-3") },
			want: []string{`--spin "-3"`, "auto, off"}},
		{name: "negative busy-poll", args: func(p *topo.Pair) []string { return links(p, "--busy-poll", "-5us") },
			want: []string{"--busy-poll -5µs", "0..1s"}},
		{name: "bad log-format", args: func(p *topo.Pair) []string { return links(p, "--log-format", "xml") },
			want: []string{"log format", "xml"}},
		{name: "too many queues", args: func(p *topo.Pair) []string { return links(p, "--queues", "5") },
			setup: func(t *testing.T, p *topo.Pair) ([]string, uint32) {
				return []string{p.LinkA, "--queues 5", "has 1 RX"}, 0
			}},
		{name: "MTU too large for frame size", args: func(p *topo.Pair) []string { return links(p, "--multi-buffer", "off") },
			setup: func(t *testing.T, p *topo.Pair) ([]string, uint32) {
				if err := p.SetMTU(3000); err != nil {
					t.Fatal(err)
				}
				return []string{"MTU 3000", "2048"}, 0
			}},
		{name: "MTU beyond the kernel's 18 frames", args: func(p *topo.Pair) []string { return links(p) },
			setup: func(t *testing.T, p *topo.Pair) ([]string, uint32) {
				if err := p.SetMTU(40000); err != nil {
					t.Fatal(err)
				}
				// (40000 + 18) / (2048 - 256 headroom), rounded up.
				return []string{"MTU 40000", "23 frames", "at most 18"}, 0
			}},
		{name: "bad multi-buffer", args: func(p *topo.Pair) []string { return links(p, "--multi-buffer", "sometimes") },
			want: []string{"multi-buffer", "sometimes"}},
		{name: "ring-size not a power of two", args: func(p *topo.Pair) []string { return links(p, "--ring-size", "1000") },
			want: []string{"--ring-size 1000", "power of two"}},
		{name: "ring-size too large", args: func(p *topo.Pair) []string { return links(p, "--ring-size", "32768") },
			want: []string{"--ring-size 32768", "16384"}},
		{name: "foreign program", args: func(p *topo.Pair) []string { return links(p) },
			setup: func(t *testing.T, p *topo.Pair) ([]string, uint32) {
				// On LinkB: xdpfwd attaches to LinkA first and must
				// take that back when it is refused on LinkB.
				return nil, attachForeign(t, p.LinkB)
			},
			want: []string{"foreign_pass", "--force"}},
		{name: "zerocopy on veth", args: func(p *topo.Pair) []string { return links(p, "--zerocopy", "on") },
			want: []string{"zero-copy"}},
		{name: "not root", args: func(p *topo.Pair) []string { return links(p) }, cred: nobody,
			want: []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF", "CAP_IPC_LOCK"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newPair(t, topo.Options{})
			want := tc.want
			var foreign uint32
			if tc.setup != nil {
				more, id := tc.setup(t, p)
				want = append(append([]string(nil), want...), more...)
				foreign = id
			}
			args := tc.args(p)
			r := runBin(t, 30*time.Second, tc.cred, args...)
			t.Logf("xdpfwd %s: exit %d in %v\nstderr:\n%s", strings.Join(args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stderr)
			if r.timedOut {
				t.Fatalf("xdpfwd %s did not exit within 30s", strings.Join(args, " "))
			}
			if r.code != 2 {
				t.Errorf("exit code %d, want 2", r.code)
			}
			for _, w := range want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr does not mention %q", w)
				}
			}
			checkNoPanic(t, "stderr", r.stderr)
			checkNoPanic(t, "stdout", r.stdout)
			checkDetached(t, p.LinkA)
			if foreign == 0 {
				checkDetached(t, p.LinkB)
			} else if id, name := xdpProg(t, p.LinkB); id != foreign {
				t.Errorf("%s carries program %d (%s) after the refused run, want the foreign program %d", p.LinkB, id, name, foreign)
			}
		})
	}
}

// TestForce: with --force, xdpfwd replaces a foreign netlink-attached
// program, runs, and on SIGINT exits 0 leaving both links bare.
func TestForce(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	foreign := attachForeign(t, p.LinkB)

	r := runBin(t, 30*time.Second, nil, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0")
	if r.code != 2 {
		t.Fatalf("without --force: exit %d, want 2\nstderr:\n%s", r.code, r.stderr)
	}
	if id, _ := xdpProg(t, p.LinkB); id != foreign {
		t.Fatalf("without --force the foreign program %d was replaced by %d", foreign, id)
	}

	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--force")
	start := time.Now()
	ids := waitAttached(t, pr, p, 5*time.Second)
	if ids[1] == foreign {
		t.Fatalf("foreign program still on %s", p.LinkB)
	}
	pingAcross(t, p, pr)
	if d := time.Second - time.Since(start); d > 0 {
		time.Sleep(d)
	}
	pr.interrupt()
	checkDetached(t, p.LinkA, p.LinkB)
}

// TestTwoInstances: a second xdpfwd on links another one holds exits 2 at
// once, naming the other instance, and does not disturb the first.
func TestTwoInstances(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	args := []string{"run", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0"}
	first := startBin(t, args...)
	ids := waitAttached(t, first, p, 5*time.Second)

	r := runBin(t, 30*time.Second, nil, args...)
	t.Logf("second instance: exit %d in %v\nstderr:\n%s", r.code, r.elapsed.Round(time.Millisecond), r.stderr)
	if r.code != 2 {
		t.Errorf("second instance: exit %d, want 2", r.code)
	}
	if r.elapsed > 5*time.Second {
		t.Errorf("second instance took %v to give up", r.elapsed)
	}
	if !strings.Contains(r.stderr, "another xdpfwd instance") {
		t.Errorf("second instance's stderr does not say another xdpfwd instance holds the link")
	}
	checkNoPanic(t, "second instance's stderr", r.stderr)

	if first.exited() {
		t.Fatalf("first instance exited (%d) when the second started\nstderr:\n%s", first.cmd.ProcessState.ExitCode(), first.stderr.String())
	}
	for i, l := range []string{p.LinkA, p.LinkB} {
		if id, name := xdpProg(t, l); id != ids[i] {
			t.Errorf("%s: program %d (%s) after the second instance, want the first's %d", l, id, name, ids[i])
		}
	}
	pingAcross(t, p, first)
	first.interrupt()
	checkDetached(t, p.LinkA, p.LinkB)
}

// TestKill9: a SIGKILLed xdpfwd leaves nothing attached (its BPF links die
// with it), and a new one can take the links over at once. Five cycles.
func TestKill9(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	args := []string{"run", "--link", p.LinkA, "--link", p.LinkB}
	const cycles = 5
	for i := 0; i <= cycles; i++ {
		start := time.Now()
		pr := startBin(t, args...)
		waitAttached(t, pr, p, 5*time.Second)
		pingAcross(t, p, pr)
		if i == cycles {
			pr.interrupt()
			checkDetached(t, p.LinkA, p.LinkB)
			t.Logf("run %d: started, forwarded, stopped by SIGINT in %v", i, time.Since(start).Round(time.Millisecond))
			break
		}
		if err := pr.cmd.Process.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		code := pr.wait(10 * time.Second)
		if ws, ok := pr.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("run %d: exit %d, want death by SIGKILL", i, code)
		}
		killed := time.Now()
		waitDetached(t, 2*time.Second, p.LinkA, p.LinkB)
		t.Logf("run %d: forwarded, SIGKILLed, detached %v after death (cycle %v)", i,
			time.Since(killed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
}

// summaryDoc is the part of the --summary document the test reads.
type summaryDoc struct {
	Links map[string]struct {
		RXPackets *uint64 `json:"rx_packets"`
		TXPackets *uint64 `json:"tx_packets"`
		XDPMode   string  `json:"xdp_mode"`
		BindMode  string  `json:"bind_mode"`
	} `json:"links"`
	UMEM struct {
		Backing         string `json:"backing"`
		LeakedAddresses *int   `json:"leaked_addresses"`
	} `json:"umem"`
	DurationS float64 `json:"duration_s"`
}

// TestRunSummary: a run with --summary and a stats interval prints stats
// lines and writes a summary whose counters match the traffic sent.
func TestRunSummary(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	path := filepath.Join(t.TempDir(), "s.json")
	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--summary", path, "--stats-interval", "200ms")
	waitAttached(t, pr, p, 5*time.Second)
	res, err := topo.Ping(p.A, p.V4B, 5, 10*time.Second)
	if err != nil {
		t.Fatalf("ping across the forwarder: %v\nstderr:\n%s", err, pr.stderr.String())
	}
	if res.Sent != 5 {
		t.Fatalf("ping sent %d requests, want 5", res.Sent)
	}
	t.Logf("ping: %d/%d answered, median RTT %v", res.Received, res.Sent, res.RTT)
	// At least one more stats line after the ping.
	lines := strings.Count(pr.stderr.String(), "pps")
	for deadline := time.Now().Add(5 * time.Second); strings.Count(pr.stderr.String(), "pps") <= lines; {
		if time.Now().After(deadline) || pr.exited() {
			t.Fatalf("no stats line within 5s of the ping (interval 200ms)\nstderr:\n%s", pr.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	pr.interrupt()
	checkDetached(t, p.LinkA, p.LinkB)
	stderr := pr.stderr.String()
	if !strings.Contains(stderr, "pps") {
		t.Errorf("no stats line (with \"pps\") on stderr:\n%s", stderr)
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("summary not written: %v", err)
	}
	t.Logf("summary:\n%s", raw)
	var s summaryDoc
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("summary is not JSON: %v", err)
	}
	a, okA := s.Links[p.LinkA]
	b, okB := s.Links[p.LinkB]
	if !okA || !okB {
		t.Fatalf("summary links %v lack %s or %s", keys(s.Links), p.LinkA, p.LinkB)
	}
	if a.RXPackets == nil || a.TXPackets == nil || b.RXPackets == nil || b.TXPackets == nil {
		t.Fatalf("summary lacks rx_packets/tx_packets")
	}
	if *a.RXPackets < 5 {
		t.Errorf("%s rx_packets %d, want ≥ 5 (5 pings sent)", p.LinkA, *a.RXPackets)
	}
	if *a.RXPackets != *b.TXPackets {
		t.Errorf("%s rx_packets %d != %s tx_packets %d", p.LinkA, *a.RXPackets, p.LinkB, *b.TXPackets)
	}
	if *b.RXPackets != *a.TXPackets {
		t.Errorf("%s rx_packets %d != %s tx_packets %d", p.LinkB, *b.RXPackets, p.LinkA, *a.TXPackets)
	}
	if s.UMEM.LeakedAddresses == nil {
		t.Errorf("summary lacks umem.leaked_addresses")
	} else if *s.UMEM.LeakedAddresses != 0 {
		t.Errorf("umem.leaked_addresses %d, want 0", *s.UMEM.LeakedAddresses)
	}
	if s.UMEM.Backing == "" {
		t.Errorf("umem.backing is empty")
	}
	if s.DurationS <= 0 {
		t.Errorf("duration_s %v, want > 0", s.DurationS)
	}
	for name, l := range map[string]string{p.LinkA: a.BindMode, p.LinkB: b.BindMode} {
		if l != "copy" {
			t.Errorf("%s bind_mode %q, want copy (veth)", name, l)
		}
	}
	if a.XDPMode == "" || b.XDPMode == "" {
		t.Errorf("xdp_mode empty: %s %q, %s %q", p.LinkA, a.XDPMode, p.LinkB, b.XDPMode)
	}
}

func keys[V any](m map[string]V) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	return k
}
