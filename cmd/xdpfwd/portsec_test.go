package main

import (
	be "encoding/binary"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/modes/portsectest"
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

// TestDaemonPortSecurityConformance runs the port-security conformance
// table (modes/portsectest) through a switch daemon on veths: pod 1,
// added by `xdpfwd link add --mac --ip --ip` as the CNI plugin adds a
// pod, sends every frame of the table out of its namespace's eth0, each
// with a marker behind its packet (Ethernet padding); the uplink's host
// hears exactly the frames the table passes, and the daemon's summary
// counts the others on pod 1's link under exactly the reasons the table
// names. A last frame of the pod's own, sent after all, bounds the wait:
// frames of one link and queue leave in order.
func TestDaemonPortSecurityConformance(t *testing.T) {
	h := newHosts(t, 3)
	dir := t.TempDir()
	ctl, summary := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "summary.json")
	d := startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl, "--summary", summary)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	hosts := make([]portsectest.Host, 3)
	for i := range hosts {
		mac, err := h.NS[i].HardwareAddr("eth0")
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = portsectest.Host{MAC: mac, IPv4: h.V4[i], IPv6: h.V6[i]}
		if i > 0 {
			if r := runBin(t, 10*time.Second, nil, "link", "add", h.Links[i], "--mac", mac.String(), "--ip", h.V4[i].String(), "--ip", h.V6[i].String(), "--control", ctl); r.code != 0 {
				t.Fatalf("link add %s: exit %d, %s", h.Links[i], r.code, r.stderr)
			}
		}
	}
	rx, err := topo.ListenRaw(h.NS[0])
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	cases := portsectest.Cases(hosts[1], hosts[2], bcast)
	const magic = 0x5ec0_7ab1
	marked := func(f []byte, i int) []byte {
		f = be.BigEndian.AppendUint32(append([]byte(nil), f...), magic)
		return be.BigEndian.AppendUint32(f, uint32(i))
	}
	frames := make([][]byte, 0, len(cases)+1)
	want := map[fwd.DropCause]uint64{}
	passes := 0
	for i, c := range cases {
		frames = append(frames, marked(c.Frame, i))
		if c.Want == 0 {
			passes++
		} else {
			want[c.Want]++
		}
	}
	// The last: the pod's own UDP, after all the others.
	last := len(cases)
	frames = append(frames, marked(topo.UDPFrame(bcast, hosts[1].MAC, h.V4[1], h.V4[0], 9, 9, 60), last))
	if err := topo.SendRaw(h.NS[1], frames, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	heard := map[int]bool{}
	for deadline := time.Now().Add(10 * time.Second); !heard[last]; {
		f, err := rx.Next(deadline)
		if err != nil {
			t.Fatalf("the uplink's host heard %d of the %d frames that pass, and not the last: %v", len(heard), passes+1, err)
		}
		if n := len(f); n >= 8 && be.BigEndian.Uint32(f[n-8:]) == magic {
			heard[int(be.BigEndian.Uint32(f[n-4:]))] = true
		}
	}
	for i, c := range cases {
		if heard[i] != (c.Want == 0) {
			t.Errorf("%s: heard on the uplink %v; want %v (cause %d)", c.Name(), heard[i], c.Want == 0, c.Want)
		}
	}
	d.interrupt()
	var sum fwd.Summary
	if b, err := os.ReadFile(summary); err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary: %v", err)
	}
	drops := sum.Links[h.Links[1]].Drops
	for c, reason := range map[fwd.DropCause]string{fwd.CauseSpoofedSource: fwd.DropSpoofedSource, fwd.CauseSpoofedIP: fwd.DropSpoofedIP,
		fwd.CauseSpoofedVLAN: fwd.DropSpoofedVLAN, fwd.CauseRogueServer: fwd.DropRogueServer, fwd.CauseUnverifiable: fwd.DropUnverifiable} {
		if drops[reason] != want[c] {
			t.Errorf("pod 1's %s: %d, want %d", reason, drops[reason], want[c])
		}
	}
	t.Logf("%d cases: %d heard on the uplink, drops %v", len(cases), len(heard)-1, drops)
}

// TestDaemonPortTakeover: a pod added with the MAC of the gateway behind
// the uplink (`xdpfwd link add --mac G`, as a CNI ADD with runtimeConfig
// mac would) is taken over provisionally, as a pod that moved would be,
// and said so; the gateway's next frame revokes it: the daemon logs it,
// link list says so, the other pods' traffic for the gateway reaches the
// gateway, and the thief hears none of it. Killed (kill -9) and started
// again, the daemon restores the thief's port revoked: a restart does
// not launder a stolen MAC.
func TestDaemonPortTakeover(t *testing.T) {
	h := newHosts(t, 3)
	ctl := filepath.Join(t.TempDir(), "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	gw, err := h.NS[0].HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	victim, err := h.NS[2].HardwareAddr("eth0")
	if err != nil {
		t.Fatal(err)
	}
	// The gateway sends nothing of its own until the test makes it speak:
	// no IPv6 (its DAD and MLD reports go out at random in its first
	// second) and no ARP probe of the victim (an entry left stale is
	// probed after 5 s). Either, from the gateway's MAC, would revoke the
	// thief's port before the test looks at it (a CI run saw "revoked"
	// 0.57 s into the test).
	for _, args := range [][]string{
		{"netns", "exec", h.NS[0].Name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"},
		{"-n", h.NS[0].Name, "neigh", "replace", h.V4[2].String(), "lladdr", victim.String(), "dev", "eth0", "nud", "permanent"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if r := runBin(t, 10*time.Second, nil, "link", "add", h.Links[2], "--mac", victim.String(), "--ip", h.V4[2].String(), "--control", ctl); r.code != 0 {
		t.Fatalf("link add the victim: exit %d, %s", r.code, r.stderr)
	}
	// The switch learns the gateway's MAC on the uplink.
	if res, err := topo.Ping(h.NS[2], h.V4[0], 1, 3*time.Second); err != nil || res.Received != 1 {
		t.Fatalf("ping victim → gateway: %+v, %v", res, err)
	}
	// The thief takes the gateway's MAC, on its interface and in its add.
	if out, err := exec.Command("ip", "-n", h.NS[1].Name, "link", "set", "eth0", "address", gw.String()).CombinedOutput(); err != nil {
		t.Fatalf("thief's MAC: %v: %s", err, out)
	}
	if r := runBin(t, 10*time.Second, nil, "link", "add", h.Links[1], "--mac", gw.String(), "--ip", h.V4[1].String(), "--control", ctl); r.code != 0 {
		t.Fatalf("link add the thief: exit %d, %s", r.code, r.stderr)
	}
	portState := func() string {
		r := runBin(t, 10*time.Second, nil, "link", "list", "--json", "--control", ctl)
		var l struct{ Links []linkop.Link }
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &l) != nil {
			t.Fatalf("link list: exit %d, %s %s", r.code, r.stdout, r.stderr)
		}
		for _, k := range l.Links {
			if k.Name == h.Links[1] {
				return k.PortState
			}
		}
		t.Fatalf("link list: no %s: %s", h.Links[1], r.stdout)
		return ""
	}
	if st := portState(); st != "provisional" {
		t.Errorf("the thief's port after its add: %q, want provisional", st)
	}
	waitLog(t, d, "taken over", 5*time.Second)
	// The gateway speaks: its echo request to the victim comes up the
	// uplink from its MAC.
	topo.Ping(h.NS[0], h.V4[2], 1, 3*time.Second)
	for deadline := time.Now().Add(5 * time.Second); portState() != "revoked"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway spoke; the thief's port is %q, want revoked", portState())
		}
	}
	waitLog(t, d, "port security revoked", 5*time.Second)
	thief, err := topo.ListenRaw(h.NS[1])
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Close()
	if res, err := topo.Ping(h.NS[2], h.V4[0], 3, 3*time.Second); err != nil || res.Received != 3 {
		t.Errorf("ping victim → gateway after the revocation: %+v, %v; want 3 of 3", res, err)
	}
	for deadline := time.Now().Add(200 * time.Millisecond); ; {
		f, err := thief.Next(deadline)
		if err != nil {
			break
		}
		if len(f) >= 34 && be.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 1 && netip.AddrFrom4([4]byte(f[30:34])) == h.V4[0] {
			t.Errorf("the thief heard an ICMP packet for the gateway: %x", f[:34])
		}
	}
	d.cmd.Process.Kill()
	<-d.done
	d = startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if st := portState(); st != "revoked" {
		t.Errorf("the thief's port after a restart: %q, want revoked", st)
	}
	if res, err := topo.Ping(h.NS[2], h.V4[0], 3, 3*time.Second); err != nil || res.Received != 3 {
		t.Errorf("ping victim → gateway after the restart: %+v, %v; want 3 of 3", res, err)
	}
	d.interrupt()
}
