package main

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestPortSecurityBadInput: wrong port security settings exit 2 with a
// message: link add's flags before any socket is dialled, run's
// --port-security before any link is touched.
func TestPortSecurityBadInput(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"link", "add", "s28x", "--mac", "zz"}, `--mac "zz": not an Ethernet address`},
		{[]string{"link", "add", "s28x", "--mac", "02:00:00:00:00:01", "--ip", "10.1.2"}, `--ip "10.1.2": not an IP address`},
		{[]string{"link", "add", "s28x", "--port-security", "maybe"}, `--port-security "maybe": want on or off`},
		{[]string{"link", "add", "s28x", "--port-security", "on"}, "--port-security on needs --mac"},
		{[]string{"link", "del", "s28x", "--mac", "02:00:00:00:00:01"}, "are for add"},
		{[]string{"run", "--mode", "switch", "--link", "s28nolink0", "--link", "s28nolink1", "--port-security", "maybe"}, `--port-security "maybe": want on or off`},
	} {
		args := tt.args
		if args[0] == "link" {
			args = append(args, "--control", "/nonexistent/x.sock")
		}
		r := runBin(t, 10*time.Second, nil, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("xdpfwd %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tt.args, " "), r.code, r.stderr, exitUsage, tt.want)
		}
	}
}

// TestPortFor: which adds get port security, with which port, and
// which are refused: the daemon's default (--port-security) for an add
// with a MAC, the add's own choice over it, nothing without a MAC (an
// older plugin), no port security outside switch mode unless asked for
// (refused then).
func TestPortFor(t *testing.T) {
	on, off := true, false
	mac := "02:28:00:00:00:0a"
	for _, tt := range []struct {
		name    string
		mode    string
		deflt   bool
		opts    linkop.AddOptions
		secure  bool
		ips     int
		wantErr string
	}{
		{"CNI add, default on", "switch", true, linkop.AddOptions{MAC: mac, IPs: []string{"10.99.0.2", "2001:db8::2/64"}}, true, 2, ""},
		{"CNI add, default off", "switch", false, linkop.AddOptions{MAC: mac}, false, 0, ""},
		{"add turns it on over off", "switch", false, linkop.AddOptions{MAC: mac, PortSecurity: &on}, true, 0, ""},
		{"add turns it off", "switch", true, linkop.AddOptions{MAC: mac, PortSecurity: &off}, false, 0, ""},
		{"no MAC: an older plugin", "switch", true, linkop.AddOptions{}, false, 0, ""},
		{"on without a MAC", "switch", true, linkop.AddOptions{PortSecurity: &on}, false, 0, "needs the pod's MAC"},
		{"a bad MAC", "switch", true, linkop.AddOptions{MAC: "02:28"}, false, 0, "not an Ethernet address"},
		{"a bad IP", "switch", true, linkop.AddOptions{MAC: mac, IPs: []string{"10.99.0"}}, false, 0, "not an IP address"},
		{"a sink's link with a MAC", "sink", true, linkop.AddOptions{MAC: mac}, false, 0, ""},
		{"a sink's link asked to be secured", "sink", true, linkop.AddOptions{MAC: mac, PortSecurity: &on}, false, 0, "is a switch's"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := &controlSocket{mode: tt.mode, portSecurity: tt.deflt}
			if tt.mode == "switch" {
				cs.sw = modes.NewSwitch(2, 0, 0)
			}
			p, secure, err := cs.portFor(tt.opts)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || secure != tt.secure || secure && (p.MAC.String() != mac || len(p.IPs) != tt.ips) {
				t.Errorf("port %+v secure %v, %v; want secure %v with %s and %d IPs", p, secure, err, tt.secure, mac, tt.ips)
			}
		})
	}
}

// TestDaemonPortSecurity: a switch daemon with pods added by `xdpfwd
// link add --mac --ip` (as the CNI plugin adds them): pod 2 sends a
// broadcast with pod 1's MAC, and an ARP claiming pod 1's IP from its own
// MAC; pod 0 (behind the --link uplink) still reaches pod 1, every ping.
// Killed (kill -9) and started again, the daemon adds the pods back
// secured (its link state file keeps their ports): the same spoof fails
// again. Its summary counts spoofed_source and spoofed_ip on pod 2's link.
func TestDaemonPortSecurity(t *testing.T) {
	h := newHosts(t, 3)
	dir := t.TempDir()
	ctl, summary := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "summary.json")
	args := []string{"run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl, "--summary", summary}
	macs := make([]net.HardwareAddr, 3)
	for i := range macs {
		m, err := h.NS[i].HardwareAddr("eth0")
		if err != nil {
			t.Fatal(err)
		}
		macs[i] = m
	}
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	for i := 1; i < 3; i++ {
		if r := runBin(t, 10*time.Second, nil, "link", "add", h.Links[i], "--mac", macs[i].String(), "--ip", h.V4[i].String(), "--control", ctl); r.code != 0 {
			t.Fatalf("link add %s --mac: exit %d, %s", h.Links[i], r.code, r.stderr)
		}
	}
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	spoofs := func(when string) {
		t.Helper()
		if res, err := topo.Ping(h.NS[0], h.V4[1], 1, 3*time.Second); err != nil || res.Received != 1 {
			t.Fatalf("%s: ping 0→1 before the spoof: %+v, %v", when, res, err)
		}
		frames := [][]byte{
			topo.UDPFrame(bcast, macs[1], h.V4[1], h.V4[0], 9, 9, 60),
			arpFrame(macs[2], h.V4[1], h.V4[0]),
		}
		if err := topo.SendRaw(h.NS[2], frames, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// After the spoof: the frames of pod 2's own that follow it
		// (an answered ping) went through after it.
		if res, err := topo.Ping(h.NS[2], h.V4[0], 1, 3*time.Second); err != nil || res.Received != 1 {
			t.Fatalf("%s: ping 2→0 after the spoof: %+v, %v", when, res, err)
		}
		if res, err := topo.Ping(h.NS[0], h.V4[1], 3, 3*time.Second); err != nil || res.Received != 3 {
			t.Errorf("%s: pod 2 claimed pod 1's MAC: pod 1 answered %+v, %v; want 3 of 3", when, res, err)
		}
	}
	spoofs("first start")
	d.cmd.Process.Kill()
	<-d.done
	b, err := os.ReadFile(ctl + ".links")
	var doc linkStateDoc
	if err != nil || json.Unmarshal(b, &doc) != nil || doc.Ports[h.Links[1]].MAC != macs[1].String() || len(doc.Ports[h.Links[2]].IPs) != 1 {
		t.Fatalf("link state file: %s, %v; want the ports of %s and %s", b, err, h.Links[1], h.Links[2])
	}
	d = startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	spoofs("restarted")
	d.interrupt()
	var sum fwd.Summary
	if b, err := os.ReadFile(summary); err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary: %v", err)
	}
	st := sum.Links[h.Links[2]]
	if st.Drops[fwd.DropSpoofedSource] != 1 || st.Drops[fwd.DropSpoofedIP] != 1 {
		t.Errorf("summary of the restarted daemon: %s's drops %v; want spoofed_source 1 and spoofed_ip 1", h.Links[2], st.Drops)
	}
	if !strings.Contains(d.stderr.String(), "spoofed_source=1") {
		t.Errorf("the exit log's drops by reason do not name spoofed_source:\n%s", d.stderr.String())
	}
}

// arpFrame is a broadcast ARP request from mac claiming IP spa, asking
// for tpa.
func arpFrame(mac net.HardwareAddr, spa, tpa netip.Addr) []byte {
	f := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, mac...)
	f = append(f, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1)
	f = append(f, mac...)
	f = append(f, spa.AsSlice()...)
	f = append(f, make([]byte, 6)...)
	f = append(f, tpa.AsSlice()...)
	return append(f, make([]byte, 60-len(f))...)
}
