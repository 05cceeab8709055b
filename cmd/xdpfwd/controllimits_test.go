package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/cbpf"
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestControlSocketLimits: clients of the control socket cannot make the
// daemon hold memory or refuse service. 64 clients each sending a
// partial request line of 4 MiB took the daemon's VmRSS from 61 to
// 607 MB, kept after they closed; now the
// daemon's peak and its VmRSS after they closed stay within a bound, and
// 64 clients holding partial lines get a one-line refusal beyond the
// connection limit while link list and capture still work, during and
// after.
func TestControlSocketLimits(t *testing.T) {
	p := newPair(t, topo.Options{})
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "sink", "--link", p.LinkA, "--stats-interval", "0", "--control", ctl)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	pid := d.cmd.Process.Pid

	// The ordinary requests, each bounded in time.
	linkList := func() error {
		c, err := linkop.Dial(ctl)
		if err != nil {
			return err
		}
		defer c.Close()
		l, err := c.ListLinks()
		if err == nil && !l.Has(p.LinkA) {
			err = fmt.Errorf("link list %v: no %s", l.Links, p.LinkA)
		}
		return err
	}
	// A capture with a filter (accept everything: ret #65535), started
	// and stopped: its Hello and its Totals.
	captureOnce := func(filter []cbpf.Instruction) error {
		c, err := capture.Dial(ctl, capture.Request{Filter: filter})
		if err != nil {
			return err
		}
		defer c.Close()
		c.Stop()
		done := make(chan error, 1)
		go func() {
			for {
				if _, err := c.Next(); err != nil {
					if err == io.EOF {
						err = nil
					}
					done <- err
					return
				}
			}
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			c.Close()
			<-done
			return errors.New("capture: no totals within 10 s of its stop")
		}
	}
	accept := []cbpf.Instruction{{Op: 0x06, K: 0xffff}}
	// A client told the socket is busy tries again, as the line says,
	// here for up to within: connections just closed may still be
	// counted for a moment, and one that holds a partial line keeps its
	// place for control.RequestGrace.
	retry := func(what, when string, within time.Duration, do func() error) {
		t.Helper()
		busy := 0
		err := do()
		for deadline := time.Now().Add(within); err != nil && strings.Contains(err.Error(), "busy") && time.Now().Before(deadline); err = do() {
			busy++
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("%s: %s: %v (after %d busy answers)", when, what, err, busy)
		} else if busy > 0 {
			t.Logf("%s: %s: served after %d busy answers", when, what, busy)
		}
	}
	ordinary := func(when string) {
		t.Helper()
		retry("link list", when, 3*time.Second, linkList)
		retry("capture", when, 3*time.Second, func() error { return captureOnce(accept) })
	}
	ordinary("before")

	// The largest request a capture client can make (a filter of
	// cbpf.MaxInstructions) is read whole and answered with what is wrong
	// with it, not cut for its length.
	long := make([]cbpf.Instruction, cbpf.MaxInstructions)
	for i := range long {
		long[i] = cbpf.Instruction{Op: 0xffff, Jt: 255, Jf: 255, K: 0xffffffff}
	}
	long[len(long)-1] = accept[0]
	if err := captureOnce(long); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at most %d", capture.MaxFilter)) {
		t.Errorf("a capture request with a filter of %d instructions: %v; want a refusal naming the limit (at most %d)", len(long), err, capture.MaxFilter)
	}

	// Memory: 64 clients each send a partial line of 4 MiB (the bound of
	// today's reader, less one byte) and hold it. The daemon's peak VmRSS
	// while they do, and its VmRSS after they closed, may exceed the
	// start by at most memBound: a few dozen connections of at most a
	// few hundred KiB each, doubled for a buffer and the one it grew
	// from, and the runtime's slack.
	const (
		hogs     = 64
		hogLine  = 4<<20 - 1
		memBound = 40 << 20
	)
	resetPeak(t, pid)
	rss0 := procStatus(t, pid, "VmRSS")
	conns := dialHogs(t, ctl, hogs)
	var wg sync.WaitGroup
	var sent sync.Map
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetWriteDeadline(time.Now().Add(20 * time.Second))
			chunk := bytes.Repeat([]byte("a"), 64<<10)
			n, _ := c.Write([]byte(`{"links":["`))
			for n < hogLine {
				k, err := c.Write(chunk[:min(len(chunk), hogLine-n)])
				n += k
				if err != nil {
					break
				}
			}
			sent.Store(i, n)
		}()
	}
	wg.Wait()
	total := 0
	sent.Range(func(_, v any) bool { total += v.(int); return true })
	// While they hold their lines: the peak, and the ordinary requests.
	peak := procStatus(t, pid, "VmHWM")
	ordinary("while 64 clients hold partial lines of 4 MiB")
	for _, c := range conns {
		c.Close()
	}
	// After: what the daemon keeps once they are gone. Its first-line
	// reads end at once (the peers closed); poll for the drop, bounded.
	var rss1 int64
	for deadline := time.Now().Add(5 * time.Second); ; {
		rss1 = procStatus(t, pid, "VmRSS")
		if rss1-rss0 <= memBound || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d clients sent %d MiB of partial lines: VmRSS %d MiB before, peak (VmHWM) %d MiB while they held them, VmRSS %d MiB after they closed",
		hogs, total>>20, rss0>>20, peak>>20, rss1>>20)
	if peak-rss0 > memBound {
		t.Errorf("%d clients holding partial lines took the daemon's peak VmRSS from %d to %d MiB: more than %d MiB above", hogs, rss0>>20, peak>>20, memBound>>20)
	}
	if rss1-rss0 > memBound {
		t.Errorf("after %d clients holding partial lines closed, the daemon's VmRSS is %d MiB (%d MiB before): more than %d MiB above", hogs, rss1>>20, rss0>>20, memBound>>20)
	}
	ordinary("after 64 clients with partial lines of 4 MiB closed")

	// Connections: 64 clients hold a short partial line (64 KiB, within
	// any bound) each. Those beyond the limit get a one-line refusal;
	// link list and capture still get through while they hold theirs.
	conns = dialHogs(t, ctl, hogs)
	replies := make(chan string, hogs)
	for _, c := range conns {
		go func() {
			c.SetDeadline(time.Now().Add(20 * time.Second))
			c.Write(append([]byte(`{"links":["`), bytes.Repeat([]byte("a"), 64<<10)...))
			l, err := bufio.NewReader(c).ReadString('\n')
			if l == "" && err != nil {
				l = "(" + err.Error() + ")"
			}
			replies <- l
		}()
	}
	start := time.Now()
	retry("link list", "while 64 clients hold partial lines", 8*time.Second, linkList)
	retry("capture", "while 64 clients hold partial lines", 8*time.Second, func() error { return captureOnce(accept) })
	took := time.Since(start)
	// The refusals came at the clients' connect, long read; the others
	// end now.
	for _, c := range conns {
		c.Close()
	}
	var refused []string
	kinds := map[string]int{}
	for range hogs {
		select {
		case l := <-replies:
			kinds[l[:min(len(l), 80)]]++
			if strings.Contains(l, "error") {
				refused = append(refused, strings.TrimSpace(l))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("a client holding a partial line did not end within 10 s of its close")
		}
	}
	t.Logf("the replies of %d clients holding partial lines of 64 KiB: %v", hogs, kinds)
	t.Logf("%d clients holding partial lines of 64 KiB: %d refused; link list and capture served within %v", hogs, len(refused), took.Round(time.Millisecond))
	if len(refused) == 0 {
		t.Errorf("%d clients held partial lines at once and none was refused: want those beyond a connection limit of a few dozen refused with a one-line error", hogs)
	} else if !strings.Contains(refused[0], "connections") {
		t.Errorf("a refused client read %q: want an error that says why (the connections open, the limit)", refused[0])
	}
	ordinary("after 64 clients holding partial lines of 64 KiB closed")
	d.interrupt()
	// Counted, and said at the end.
	if m := regexp.MustCompile(`connections closed unserved"? busy=(\d+) evicted=(\d+)`).FindStringSubmatch(d.stderr.String()); m == nil || m[1] == "0" {
		t.Errorf("the daemon's log does not count the connections it refused (busy=N evicted=N):\n%s", d.stderr.String())
	} else {
		t.Logf("the daemon counted busy=%s evicted=%s", m[1], m[2])
	}
}

// dialHogs opens n connections to the control socket.
func dialHogs(t *testing.T, path string, n int) []net.Conn {
	t.Helper()
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout("unix", path, 5*time.Second)
		if err != nil {
			t.Fatalf("connection %d of %d to %s: %v", len(conns)+1, n, path, err)
		}
		conns = append(conns, c)
	}
	return conns
}

// procStatus reads a size field (VmRSS, VmHWM) of /proc/PID/status, in
// bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("%s %q: %v", field, rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// resetPeak sets the peak VmRSS (VmHWM) of pid to its VmRSS now
// (proc(5): clear_refs 5).
func resetPeak(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak VmRSS of %d: %v", pid, err)
	}
}
