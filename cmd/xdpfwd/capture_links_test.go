package main

import (
	be "encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// Captures while links come and go: a switch started on one link
// (--max-links) takes the others at runtime with xdpfwd link add.

// newHosts builds n hosts the test owns and removes.
func newHosts(t *testing.T, n int) *topo.Hosts {
	t.Helper()
	topo.RequireRoot(t)
	h, err := topo.NewHosts(n, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("remove hosts: %v", err)
		}
	})
	return h
}

// switchOn starts a switch on h's first link that takes up to 8, with a
// control socket of the test's.
func switchOn(t *testing.T, h *topo.Hosts) (*proc, string) {
	t.Helper()
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--link", h.Links[0], "--max-links", "8", "--stats-interval", "0", "--control", ctl)
	waitSocket(t, d, ctl)
	return d, ctl
}

// linkOp runs xdpfwd link op name and fails the test unless it succeeds.
func linkOp(t *testing.T, ctl, op, name string) {
	t.Helper()
	if r := runBin(t, 10*time.Second, nil, "link", op, name, "--control", ctl); r.code != 0 {
		t.Fatalf("link %s %s: exit %d, stderr %q", op, name, r.code, r.stderr)
	}
}

// hostFrames builds count UDP frames from host from to host to, to port
// dport, each with its sequence number.
func hostFrames(t *testing.T, h *topo.Hosts, from, to int, dport uint16, count int) [][]byte {
	t.Helper()
	src, err := h.NS[from].HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := h.NS[to].HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return flowFrames(dst, src, h.V4[from], h.V4[to], dport, []uint16{uint16(4000 + from)}, count, []int{60, 200, 1000})
}

// pcapngPackets counts the Enhanced Packet Blocks of a pcapng file that
// may be in the middle of being written: the blocks written whole.
func pcapngPackets(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n := 0
	for len(b) >= 12 {
		typ, l := be.NativeEndian.Uint32(b), be.NativeEndian.Uint32(b[4:])
		if l < 12 || int(l) > len(b) {
			break
		}
		if typ == 6 {
			n++
		}
		b = b[l:]
	}
	return n
}

// waitPackets waits up to within for file to hold at least n packets and
// returns how many it holds.
func waitPackets(file string, n int, within time.Duration) int {
	deadline := time.Now().Add(within)
	for {
		got := pcapngPackets(file)
		if got >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCaptureAddedLinks: a capture of every link started on a switch of
// one link records the links added after it started, each packet under
// its own link's name (a pcapng interface written when the link first
// shows), received on the link it entered and sent on the one it left.
func TestCaptureAddedLinks(t *testing.T) {
	h := newHosts(t, 3)
	d, ctl := switchOn(t, h)
	file := filepath.Join(t.TempDir(), "added.pcapng")
	c := startCapture(t, "--control", ctl, "-w", file, "udp port 7301")

	linkOp(t, ctl, "add", h.Links[1])
	from1 := hostFrames(t, h, 1, 0, 7301, 20)
	if err := topo.SendRaw(h.NS[1], from1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	linkOp(t, ctl, "add", h.Links[2])
	from2 := hostFrames(t, h, 2, 1, 7301, 20)
	if err := topo.SendRaw(h.NS[2], from2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// Each frame is received once and sent at least once (flooded while
	// the switch has not learnt its destination).
	want := 2 * (len(from1) + len(from2))
	if got := waitPackets(file, want, 10*time.Second); got < want {
		t.Errorf("the capture holds %d packets after 10 s, want at least %d\ncapture stderr:\n%s", got, want, c.stderr.String())
	}
	endCapture(t, c)
	pkts := readCapture(t, file)
	checkSeen(t, pkts, from1, h.Links[1], h.Links[0])
	checkSeen(t, pkts, from2, h.Links[2], h.Links[1])
	d.interrupt()
}

// TestCaptureRemovedLink: a capture of one link ends when the link goes,
// by xdpfwd link del or with its interface, saying so with exit code 1 as
// tcpdump does for an interface that disappeared, after writing what the
// link received until then; a link added next, which takes the removed
// one's index, is not recorded under the removed one's name.
func TestCaptureRemovedLink(t *testing.T) {
	tests := []struct {
		name   string
		remove func(t *testing.T, ctl, link string)
	}{
		{"link del", func(t *testing.T, ctl, link string) { linkOp(t, ctl, "del", link) }},
		{"interface deleted", func(t *testing.T, ctl, link string) {
			if out, err := exec.Command("ip", "link", "del", link).CombinedOutput(); err != nil {
				t.Fatalf("ip link del %s: %v: %s", link, err, out)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			h := newHosts(t, 3)
			d, ctl := switchOn(t, h)
			linkOp(t, ctl, "add", h.Links[1])
			file := filepath.Join(t.TempDir(), "removed.pcapng")
			c := startCapture(t, "--control", ctl, "-w", file, "--link", h.Links[1], "udp port 7302")
			from1 := hostFrames(t, h, 1, 0, 7302, 20)
			if err := topo.SendRaw(h.NS[1], from1, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if got := waitPackets(file, len(from1), 10*time.Second); got != len(from1) {
				t.Fatalf("the capture of %s holds %d packets, want the %d it received", h.Links[1], got, len(from1))
			}

			tc.remove(t, ctl, h.Links[1])
			deadline := time.Now().Add(10 * time.Second)
			for !c.exited() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			ended := c.exited()
			if !ended {
				t.Errorf("the capture of %s still runs 10 s after the link went", h.Links[1])
			}
			// The next link takes the removed one's index: none of its
			// packets may be recorded (under the removed one's name).
			linkOp(t, ctl, "add", h.Links[2])
			from2 := hostFrames(t, h, 2, 0, 7302, 20)
			if err := topo.SendRaw(h.NS[2], from2, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if !ended {
				if got := waitPackets(file, len(from1)+len(from2), 3*time.Second); got > len(from1) {
					t.Errorf("the capture of %s went on with %d packets of %s, the link that took its index", h.Links[1], got-len(from1), h.Links[2])
				}
				c.signal(os.Interrupt)
			}
			code := c.wait(20 * time.Second)
			stderr := c.stderr.String()
			checkNoPanic(t, "capture stderr", stderr)
			wantMsg := fmt.Sprintf("link %s was removed", h.Links[1])
			if !ended || code != exitFailure || !strings.Contains(stderr, wantMsg) {
				t.Errorf("capture: ended by itself %v, exit %d, stderr:\n%s\nwant it to end by itself with exit %d and %q", ended, code, stderr, exitFailure, wantMsg)
			}
			if !capturedRE.MatchString(stderr) {
				t.Errorf("the capture did not report what it captured and lost:\n%s", stderr)
			}
			pkts := readCapture(t, file)
			rx, other, of2 := 0, 0, 0
			for _, p := range pkts {
				if p.iface != h.Links[1] || p.dir != 1 {
					other++
				}
				if slicesContainsBytes(from2, p.data) {
					of2++
				}
				if slicesContainsBytes(from1, p.data) {
					rx++
				}
			}
			if other > 0 || of2 > 0 {
				t.Errorf("%d packets not received on %s, %d of them sent by %s; want only what %s received", other, h.Links[1], of2, h.Links[2], h.Links[1])
			}
			if rx != len(from1) {
				t.Errorf("%d of the %d frames %s received are in the file", rx, len(from1), h.Links[1])
			}
			d.interrupt()
		})
	}
}

func slicesContainsBytes(s [][]byte, b []byte) bool {
	for _, f := range s {
		if string(f) == string(b) {
			return true
		}
	}
	return false
}

// linkNames is what xdpfwd link list says the daemon forwards.
func linkNames(t *testing.T, ctl string) []string {
	t.Helper()
	r := runBin(t, 10*time.Second, nil, "link", "list", "--json", "--control", ctl)
	var got struct {
		Links []struct {
			Name string `json:"name"`
		} `json:"links"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil {
		t.Fatalf("link list: exit %d, %v\nstdout %s\nstderr %s", r.code, err, r.stdout, r.stderr)
	}
	var names []string
	for _, l := range got.Links {
		names = append(names, l.Name)
	}
	return names
}

// TestCaptureRenamedLink: a link renamed while captured (ip link set A
// name A2) is the same link to xdpfwd, which follows it by its ifindex:
// link list names it A2 at once, and stays so after the next link change
// (it was taken for deleted then, and removed); a capture of it, of every
// link or of --link A, goes on recording it under the name it started
// with, as tcpdump goes on capturing an interface renamed under it.
func TestCaptureRenamedLink(t *testing.T) {
	h := newHosts(t, 3)
	d, ctl := switchOn(t, h)
	linkOp(t, ctl, "add", h.Links[1])
	fileAll := filepath.Join(t.TempDir(), "all.pcapng")
	fileOne := filepath.Join(t.TempDir(), "one.pcapng")
	all := startCapture(t, "--control", ctl, "-w", fileAll, "--direction", "rx", "udp port 7303")
	one := startCapture(t, "--control", ctl, "-w", fileOne, "--link", h.Links[1], "udp port 7303")

	renamed := h.Links[1] + "r"
	t.Cleanup(func() { exec.Command("ip", "link", "del", renamed).Run() })
	for _, args := range [][]string{
		{"link", "set", h.Links[1], "down"}, // a rename takes a link that is down
		{"link", "set", h.Links[1], "name", renamed},
		{"link", "set", renamed, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	waitLog(t, d, "link renamed while forwarding", 10*time.Second)
	linkOp(t, ctl, "add", h.Links[2]) // the daemon watches its links again
	if known := linkNames(t, ctl); !slices.Equal(known, []string{h.Links[0], renamed, h.Links[2]}) {
		t.Fatalf("link list %q after the rename and a link add, want %s as %s", known, h.Links[1], renamed)
	}
	// Sent until the renamed link is up again and forwarding.
	from1 := hostFrames(t, h, 1, 0, 7303, 200)
	sent := 0
	for deadline := time.Now().Add(10 * time.Second); pcapngPackets(fileOne) == 0 && time.Now().Before(deadline); sent++ {
		if sent == len(from1) {
			t.Fatalf("%d frames sent on the renamed link, none captured", sent)
		}
		if err := topo.SendRaw(h.NS[1], from1[sent:sent+1], 5*time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if one.exited() {
		t.Fatalf("the capture of the renamed link ended:\n%s", one.stderr.String())
	}
	endCapture(t, one)
	endCapture(t, all)
	for _, f := range []string{fileAll, fileOne} {
		n := 0
		for _, p := range readCapture(t, f) {
			if slicesContainsBytes(from1[:sent], p.data) {
				n++
				if p.iface != h.Links[1] {
					t.Errorf("%s: a frame of the renamed link recorded on %q, want %q (its name when the capture started)", filepath.Base(f), p.iface, h.Links[1])
				}
			}
		}
		if n == 0 {
			t.Errorf("%s: none of the %d frames sent on the renamed link", filepath.Base(f), sent)
		}
	}
	d.interrupt()
}
