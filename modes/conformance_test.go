package modes_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/modes/portsectest"
)

var (
	confPod    = portsectest.Host{MAC: net.HardwareAddr{0x02, 0x39, 0, 0, 0, 0xa}, IPv4: netip.MustParseAddr("10.39.0.10"), IPv6: netip.MustParseAddr("2001:db8:39::a")}
	confVictim = portsectest.Host{MAC: net.HardwareAddr{0x02, 0x39, 0, 0, 0, 0xb}, IPv4: netip.MustParseAddr("10.39.0.11"), IPv6: netip.MustParseAddr("2001:db8:39::b")}
)

// conformanceSwitch is a switch of three links: 0 an uplink, 1 the pod's
// (secured to its MAC and both its addresses), 2 the victim's (secured).
func conformanceSwitch(t testing.TB) *modes.Switch {
	sw := modes.NewSwitch(1, 0, time.Minute)
	for i, h := range []portsectest.Host{confPod, confVictim} {
		name := fmt.Sprintf("conf%d", i)
		if err := sw.SecurePort(name, modes.Port{MAC: h.MAC, IPs: []netip.Addr{h.IPv4, h.IPv6}}); err != nil {
			t.Fatal(err)
		}
		sw.LinkAddedAs(i+1, name)
	}
	return sw
}

// TestPortSecurityConformance holds the switch's port security to the
// model's table (portsectest): every spoof a pod can send, in every
// encapsulation, is dropped under the counter the model names, and the
// pod's own traffic passes, flooded to the other links. With -v, or
// PORTSEC_MATRIX=FILE, it renders the verdicts as a table.
func TestPortSecurityConformance(t *testing.T) {
	sw := conformanceSwitch(t)
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	cases := portsectest.Cases(confPod, confVictim, bcast)
	got := make(map[string]fwd.DropCause, len(cases))
	for _, c := range cases {
		p := []fwd.Packet{{Data: c.Frame, Len: len(c.Frame), Link: 1}}
		sw.Handle(p)
		v, out := p[0].Verdict()
		cause := p[0].Cause()
		got[c.Name()] = cause
		switch {
		case c.Want == 0 && (v != fwd.VerdictFlood || out != fwd.AllLinks(3)):
			t.Errorf("%s: verdict %d links %b cause %d; want flooded to every link", c.Name(), v, out, cause)
		case c.Want != 0 && (v != fwd.VerdictDrop || cause != c.Want):
			t.Errorf("%s: verdict %d cause %d; want dropped, cause %d", c.Name(), v, cause, c.Want)
		}
	}
	m := portsectest.Matrix(cases, func(c portsectest.Case) string { return portsectest.Codes[got[c.Name()]] })
	names, v6 := portsectest.Encaps()
	var key string
	for i, n := range names {
		key += fmt.Sprintf("%d %s", i+1, n)
		if v6[i] {
			key += " (IPv6 only)"
		}
		key += "; "
	}
	t.Logf("%d cases\n%s\ncolumns: %s\n%s", len(cases), m, key, portsectest.Legend)
	if f := os.Getenv("PORTSEC_MATRIX"); f != "" {
		if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkDocTable(t, "../docs/portsecurity.md", m)
	// Nothing a pod sent moved or added an entry.
	if st := sw.Stats(); st.Learned != 0 || st.Moves != 0 {
		t.Errorf("fdb: %+v; want nothing learned from secured links", st)
	}
}

// BenchmarkGuard is the per-frame cost of the checks on a secured port,
// frame kind by frame kind (the pod's own, which pass every rule).
func BenchmarkGuard(b *testing.B) {
	sw := conformanceSwitch(b)
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for _, c := range portsectest.Cases(confPod, confVictim, bcast) {
		if c.Encap != "untagged" || c.Want != 0 {
			continue
		}
		b.Run(c.Row, func(b *testing.B) {
			pkts := make([]fwd.Packet, 64)
			b.ReportAllocs()
			for range b.N {
				for i := range pkts {
					pkts[i] = fwd.Packet{Data: c.Frame, Len: len(c.Frame), Link: 1}
				}
				sw.Handle(pkts)
			}
		})
	}
}

// FuzzGuard: whatever a secured port sends, the switch gives a verdict
// without a panic; a frame from another source MAC is spoofed_source,
// and a frame it lets through is flooded, never learned. The seeds are
// the conformance table's frames.
func FuzzGuard(f *testing.F) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for _, c := range portsectest.Cases(confPod, confVictim, bcast) {
		f.Add(c.Frame)
	}
	sw := conformanceSwitch(f)
	f.Fuzz(func(t *testing.T, frame []byte) {
		p := []fwd.Packet{{Data: frame, Len: len(frame), Link: 1}}
		sw.Handle(p)
		v, _ := p[0].Verdict()
		switch {
		case len(frame) >= 14 && string(frame[6:12]) != string(confPod.MAC) && p[0].Cause() != fwd.CauseSpoofedSource:
			t.Fatalf("a frame from %x: verdict %d cause %d, want spoofed_source", frame[6:12], v, p[0].Cause())
		case v != fwd.VerdictDrop && v != fwd.VerdictFlood && v != fwd.VerdictForward:
			t.Fatalf("verdict %d", v)
		}
		if st := sw.Stats(); st.Learned != 0 {
			t.Fatalf("a secured port's frame was learned: %+v", st)
		}
	})
}

// checkDocTable fails unless the conformance table of the doc at path,
// between its markers, is m; with PORTSEC_DOC=1 it writes m there.
func checkDocTable(t *testing.T, path, m string) {
	t.Helper()
	const begin, end = "<!-- conformance -->\n", "<!-- /conformance -->"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q markers", path, begin, end)
	}
	if doc[i+len(begin):j] == m {
		return
	}
	if os.Getenv("PORTSEC_DOC") == "1" {
		if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+m+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: its conformance table is not what the switch does (PORTSEC_DOC=1 go test -run TestPortSecurityConformance ./modes/ rewrites it)", path)
}
