package main

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestLinkBadInput: wrong `xdpfwd link` command lines exit 2 with a
// message, before any socket is dialled.
func TestLinkBadInput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"link"}, "want list, add NAME or del NAME"},
		{[]string{"link", "frob"}, `unknown subcommand "frob"`},
		{[]string{"link", "add"}, "exactly one link NAME"},
		{[]string{"link", "del", "a", "b"}, "exactly one link NAME"},
		{[]string{"link", "add", "a/b"}, "not an interface name"},
		{[]string{"link", "add", "0123456789abcdef"}, "longer than 15 bytes"},
		{[]string{"link", "list", "x"}, `unexpected "x"`},
		{[]string{"link", "list", "--bogus"}, "flag provided but not defined"},
	}
	for _, tt := range tests {
		r := runBin(t, 10*time.Second, nil, append(tt.args, "--control", "/nonexistent/x.sock")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("xdpfwd %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), r.code, r.stderr, exitUsage, tt.want)
		}
	}
}

// TestLinkListDaemon: a running switch answers `link list` on its
// control socket with its links and mode, and refuses `link add` and
// `link del` with an error naming the capability its forwarder lacks (no
// success pretended); a capture still works on the same socket.
func TestLinkListDaemon(t *testing.T) {
	p := newPair(t, topo.Options{})
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--link", p.LinkA, "--link", p.LinkB, "--stats-interval", "0", "--control", ctl)
	waitAttached(t, d, p, 10*time.Second)
	waitSocket(t, d, ctl)

	r := runBin(t, 10*time.Second, nil, "link", "list", "--json", "--control", ctl)
	var got struct {
		Mode  string        `json:"mode"`
		Links []linkop.Link `json:"links"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil {
		t.Fatalf("link list: exit %d, %v\nstdout %s\nstderr %s", r.code, err, r.stdout, r.stderr)
	}
	if got.Mode != "switch" || len(got.Links) != 2 || got.Links[0].Name != p.LinkA || got.Links[1].Name != p.LinkB {
		t.Errorf("link list: %+v; want switch with %s, %s", got, p.LinkA, p.LinkB)
	}
	r = runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl)
	if r.code != 0 || !strings.Contains(r.stdout, p.LinkA) || !strings.Contains(r.stdout, "RX PACKETS") {
		t.Errorf("link list (table): exit %d, stdout %q", r.code, r.stdout)
	}

	for _, op := range []string{"add", "del"} {
		r = runBin(t, 10*time.Second, nil, "link", op, "vethnew0", "--control", ctl)
		if r.code != exitFailure || !strings.Contains(r.stderr, "no AddLink/RemoveLink") {
			t.Errorf("link %s: exit %d, stderr %q; want exit %d naming AddLink/RemoveLink", op, r.code, r.stderr, exitFailure)
		}
	}
	c, err := linkop.Dial(ctl)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AddLink("vethnew0"); !errors.Is(err, linkop.ErrUnsupported) {
		t.Errorf("AddLink: %v; want ErrUnsupported", err)
	}
	if l, err := c.ListLinks(); err != nil || l.Has("vethnew0") {
		t.Errorf("list after the refused add: %+v, %v", l, err)
	}

	file := filepath.Join(t.TempDir(), "c.pcapng")
	cp := startCapture(t, "--control", ctl, "-w", file, "--count", "1")
	cp.interrupt()
	d.interrupt()
}
