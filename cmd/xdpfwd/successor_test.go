package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

func TestSuccessorArgs(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--link", "a", "--link", "b"}, []string{"run", "--link", "a", "--link", "b", "--takeover", "/c"}},
		{[]string{"--takeover", "/old", "--config", "x.yaml"}, []string{"run", "--config", "x.yaml", "--takeover", "/c"}},
		{[]string{"--takeover=auto", "-takeover", "/old", "-takeover=/p"}, []string{"run", "--takeover", "/c"}},
		{[]string{"--config=x.yaml", "--takeover"}, []string{"run", "--config=x.yaml", "--takeover", "/c"}},
		{[]string{"--link", "a", "--", "--takeover", "x"}, []string{"run", "--link", "a", "--", "--takeover", "x", "--takeover", "/c"}},
	} {
		if got := successorArgs(tt.args, "/c"); !slices.Equal(got, tt.want) {
			t.Errorf("successorArgs(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestListensOn(t *testing.T) {
	at := func(s string) *net.TCPAddr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, tt := range []struct {
		addr string
		at   string
		want bool
	}{
		{"127.0.0.1:9425", "127.0.0.1:9425", true},
		{"127.0.0.1:0", "127.0.0.1:40001", true},
		{"127.0.0.1:9426", "127.0.0.1:9425", false},
		{"127.0.0.2:9425", "127.0.0.1:9425", false},
		{":9425", "[::]:9425", true},
		{":9425", "127.0.0.1:9425", false},
		{"[::1]:9425", "[::1]:9425", true},
		{"localhost:9425", "127.0.0.1:9425", true},
		{"no port", "127.0.0.1:9425", false},
	} {
		if got := listensOn(tt.addr, at(tt.at)); got != tt.want {
			t.Errorf("listensOn(%q, %s) = %v, want %v", tt.addr, tt.at, got, tt.want)
		}
	}
}

// notifyListener is systemd's end of $NOTIFY_SOCKET: every datagram.
func notifyListener(t *testing.T, path string) <-chan string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan string, 64)
	go func() {
		defer close(got)
		for {
			b := make([]byte, 4096)
			n, err := c.Read(b)
			if err != nil {
				return
			}
			got <- string(b[:n])
		}
	}()
	return got
}

// expectNotify waits for systemd's next message and fails unless it
// starts with want.
func expectNotify(t *testing.T, got <-chan string, want string) string {
	t.Helper()
	select {
	case m := <-got:
		if !strings.HasPrefix(m, want) {
			t.Fatalf("systemd was told %q, want %q first", m, want)
		}
		return m
	case <-time.After(15 * time.Second):
		t.Fatalf("systemd was not told %q within 15 s", want)
	}
	return ""
}

// pidGone reports whether pid (a process this test caused, not its child)
// exited: gone, or a zombie its new parent has not reaped yet.
func pidGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(rest, "Z")
}

func waitPidGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !pidGone(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running %v later", pid, within)
		}
	}
}

// logFile is a daemon's stdout and stderr, which its successors inherit:
// a file, not a pipe, so that none of them writes to a reader that went
// away with the test's handle on the first.
type logFile struct{ path string }

func (l logFile) String() string {
	b, _ := os.ReadFile(l.path)
	return string(b)
}

// since is what was logged from mark (a length of String) on.
func (l logFile) since(mark int) string { return l.String()[mark:] }

var handedToRE = regexp.MustCompile(`msg="handed over: the successor forwards" pid=(\d+)`)

// TestDaemonSelfHandover: a daemon started as systemd's unit would
// ($NOTIFY_SOCKET, a config file, the binary at a path an upgrade
// replaces) carries a sequenced stream at 50,000 datagrams/s while it
// replaces itself: on SIGUSR2; on a SIGHUP whose config change a reload
// cannot apply (log-level); on a SIGHUP after the binary at its path was
// replaced (the successor runs the new file); and not on a SIGHUP whose
// change the handover cannot carry (ring-size: the successor exits 2
// naming it, the daemon goes on saying so). A stand-in for systemd's
// notify socket reads READY=1 once at the start, "handed over to pid N"
// at each handover and STOPPING=1 at the end; the PID file names the
// first daemon, then each successor before its predecessor exits, and is
// removed at the end; each predecessor exits. (deploy's
// TestSystemdHandover runs the unit under a real systemd.) With after-handover: wait, the predecessor stays
// after the handover until SIGTERM, then exits 0. The stream loses,
// reorders and duplicates nothing across it all.
func TestDaemonSelfHandover(t *testing.T) {
	p := newTestPair(t)
	dir := t.TempDir()
	ctl, cfg, notify := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "xdpfwd.yaml"), filepath.Join(dir, "notify")
	exe := filepath.Join(dir, "bin", "xdpfwd")
	install := func() {
		t.Helper()
		os.MkdirAll(filepath.Dir(exe), 0o755)
		copyFile(t, binary(t), exe+".new", 0o755)
		if err := os.Rename(exe+".new", exe); err != nil {
			t.Fatal(err)
		}
	}
	install()
	config := func(extra string) {
		t.Helper()
		body := fmt.Sprintf("link: [%s, %s]\nstats-interval: 0s\n%s", p.LinkA, p.LinkB, extra)
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	config("")
	sd := notifyListener(t, notify)
	log := logFile{filepath.Join(dir, "log")}
	lf, err := os.Create(log.path)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemons' log:\n%s", log)
		}
	})
	pidPath := filepath.Join(dir, "xdpfwd.pid")
	cmd := exec.Command(exe, "run", "--config", cfg, "--control", ctl, "--pid-file", pidPath)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	first := cmd.Process.Pid
	var pids []int // every daemon of the test's, ended at cleanup
	pids = append(pids, first)
	t.Cleanup(func() {
		for _, pid := range pids {
			if !pidGone(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		cmd.Wait()
	})
	expectNotify(t, sd, "READY=1\nSTATUS=forwarding xconnect on "+p.LinkA+" "+p.LinkB)
	if b, err := os.ReadFile(pidPath); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(first) {
		t.Errorf("the PID file at start holds %q (%v), want %d", b, err, first)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(ctl); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("control socket: %v\n%s", err, log)
		}
	}
	s, err := topo.StartSeqStream(p.A, p.B, p.V4A, p.V4B, 50_000, 64, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(0)
	time.Sleep(200 * time.Millisecond)

	// handOver signals the daemon pid and returns its successor's, once
	// the daemon handed over and systemd was told.
	handOver := func(pid int, sig syscall.Signal, why string) int {
		t.Helper()
		mark := len(log.String())
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatal(err)
		}
		var next int
		for deadline := time.Now().Add(30 * time.Second); next == 0; time.Sleep(20 * time.Millisecond) {
			if m := handedToRE.FindStringSubmatch(log.since(mark)); m != nil {
				next, _ = strconv.Atoi(m[1])
			} else if time.Now().After(deadline) {
				t.Fatalf("%s: pid %d did not hand over:\n%s", why, pid, log.since(mark))
			}
		}
		pids = append(pids, next)
		expectNotify(t, sd, fmt.Sprintf("STATUS=handed over to pid %d", next))
		if b, err := os.ReadFile(pidPath); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(next) {
			t.Errorf("%s: the PID file holds %q (%v), want %d", why, b, err, next)
		}
		if !strings.Contains(log.since(mark), why) {
			t.Errorf("%s: the log does not say why it hands over:\n%s", why, log.since(mark))
		}
		return next
	}

	// SIGUSR2.
	d := handOver(first, syscall.SIGUSR2, "SIGUSR2")
	if err := cmd.Wait(); err != nil {
		t.Errorf("the first daemon after it handed over: %v, want exit 0", err)
	}

	// A change a reload cannot apply.
	config("log-level: debug\n")
	d2 := handOver(d, syscall.SIGHUP, "config changes a reload cannot apply: log-level")
	waitPidGone(t, d, 10*time.Second)

	// A change the handover cannot carry: refused, and it goes on.
	config("ring-size: 1024\n")
	mark := len(log.String())
	syscall.Kill(d2, syscall.SIGHUP)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.since(mark), "the successor exited without taking over; going on"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a SIGHUP with ring-size changed: no word of the refused successor:\n%s", log.since(mark))
		}
	}
	if out := log.since(mark); !strings.Contains(out, "ring_size") || pidGone(d2) {
		t.Errorf("a successor of another ring size: its refusal should name ring_size and the daemon (gone: %v) go on:\n%s", pidGone(d2), out)
	}
	config("log-level: debug\n")

	// The binary replaced, as an upgrade does.
	install()
	d3 := handOver(d2, syscall.SIGHUP, "was replaced")
	waitPidGone(t, d2, 10*time.Second)
	var now, running syscall.Stat_t
	syscall.Stat(exe, &now)
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/exe", d3), &running); err != nil || running.Ino != now.Ino {
		t.Errorf("the successor of the replaced binary runs inode %d (%v), the file at %s is %d", running.Ino, err, exe, now.Ino)
	}

	// after-handover: wait (applied by a handover: a reload cannot).
	config("log-level: debug\nafter-handover: wait\n")
	d4 := handOver(d3, syscall.SIGHUP, "after-handover")
	waitPidGone(t, d3, 10*time.Second)
	mark = len(log.String())
	d5 := handOver(d4, syscall.SIGUSR2, "SIGUSR2")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.since(mark), "waiting for SIGTERM to exit"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || pidGone(d4) {
			t.Fatalf("with after-handover: wait, pid %d (gone: %v) does not wait:\n%s", d4, pidGone(d4), log.since(mark))
		}
	}
	time.Sleep(300 * time.Millisecond)
	if pidGone(d4) {
		t.Fatalf("pid %d exited after the handover, want it waiting", d4)
	}
	syscall.Kill(d4, syscall.SIGTERM)
	waitPidGone(t, d4, 10*time.Second)

	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		t.Error(err)
	}
	t.Logf("across 5 handovers and a refusal: %d sent, %d received, %d lost, %d reordered, %d duplicated, longest silence %v",
		res.Sent, res.Received, res.Lost, res.Reordered, res.Duplicates, res.MaxGap)
	if res.Received == 0 || res.Lost != 0 || res.Reordered != 0 || res.Duplicates != 0 {
		t.Errorf("the stream lost %d, reordered %d, duplicated %d of %d; want none", res.Lost, res.Reordered, res.Duplicates, res.Sent)
		for _, r := range res.Reorders {
			t.Logf("reordered: %d arrived at %s, %d behind", r.Seq, r.At.UTC().Format("15:04:05.000000"), r.Behind)
		}
	}
	if r, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || r.Received != 1 {
		t.Errorf("ping through the last successor: %+v %v", r, err)
	}
	syscall.Kill(d5, syscall.SIGTERM)
	expectNotify(t, sd, "STOPPING=1")
	waitPidGone(t, d5, 15*time.Second)
	if _, err := os.Stat(pidPath); !os.IsNotExist(err) {
		t.Errorf("the PID file after the last daemon stopped: %v, want it removed", err)
	}
	checkNoPanic(t, "the daemons' log", log.String())
	waitDetached(t, 5*time.Second, p.LinkA, p.LinkB)
}

// copyFile copies from to to, with mode.
func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDaemonPID1RefusesSelfHandover: a daemon that is its PID namespace's
// first process (a container's) refuses SIGUSR2, saying why (its exit
// would end the successor with it), and forwards on.
func TestDaemonPID1RefusesSelfHandover(t *testing.T) {
	p := newTestPair(t)
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	u := startPath(t, "unshare", nil, "--pid", "--kill-child", binary(t), "run", "--link", p.LinkA, "--link", p.LinkB,
		"--stats-interval", "0", "--control", ctl)
	waitLog(t, u, readyMsg, 30*time.Second)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", u.cmd.Process.Pid, u.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("unshare's child: %q: %v", b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	waitLog(t, u, "container's first process", 10*time.Second)
	if r, err := topo.Ping(p.A, p.V4B, 1, 3*time.Second); err != nil || r.Received != 1 {
		t.Errorf("ping after the refusal: %+v %v", r, err)
	}
	syscall.Kill(pid, syscall.SIGINT) // unshare passes no signal on
	if code := u.wait(15 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGINT, want 0", code)
	}
	waitDetached(t, 5*time.Second, p.LinkA, p.LinkB)
}
