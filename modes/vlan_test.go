package modes_test

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// The ports of the VLAN tests' switch.
var vlanPorts = []struct {
	name string
	v    modes.VLANs
}{
	{"up", modes.VLANs{}},                            // 0: every VLAN (an uplink)
	{"a100", modes.VLANs{Access: 100}},               // 1
	{"b100", modes.VLANs{Access: 100}},               // 2
	{"a200", modes.VLANs{Access: 200}},               // 3
	{"t0-100", modes.VLANs{Trunk: []uint16{100, 0}}}, // 4
	{"t200", modes.VLANs{Trunk: []uint16{200, 200}}}, // 5
}

func vlanSwitch(t *testing.T) *modes.Switch {
	t.Helper()
	sw := modes.NewSwitch(0, 64, time.Minute)
	for i, p := range vlanPorts {
		if err := sw.SetVLANs(p.name, p.v); err != nil {
			t.Fatalf("SetVLANs(%s, %+v): %v", p.name, p.v, err)
		}
		sw.LinkAddedAs(i, p.name)
	}
	return sw
}

// tagged is frame dst ← src (IPv4, 64 bytes) with the tags given, each
// a TPID and a TCI, outermost first.
func tagged(dst, src net.HardwareAddr, tags ...uint16) []byte {
	f := slices.Concat([]byte(dst), []byte(src))
	for _, x := range tags {
		f = append(f, byte(x>>8), byte(x))
	}
	f = append(f, 0x08, 0x00)
	return append(f, make([]byte, 64-len(f))...)
}

func links(l ...int) fwd.LinkSet {
	var s fwd.LinkSet
	for _, i := range l {
		s = s.Add(i)
	}
	return s
}

// TestVLANModel is the table of every case of the VLAN model (vlan.go,
// docs/vlans.md): a broadcast frame of each encapsulation a port can send
// (untagged; an 802.1Q priority tag; 802.1Q tags of VLANs 100, 200 and
// 300; an 802.1ad tag outermost; a priority tag around a VLAN 200 tag; a
// VLAN 200 tag inside a VLAN 100 tag; the reserved VID 4095), sent by each kind of port: one of
// every VLAN, access ports of 100 and 200, a trunk of 0 and 100, a trunk
// of 200. Each is dropped (spoofed_vlan) or flooded to its VLAN's ports
// alone, those that take it untagged told.
func TestVLANModel(t *testing.T) {
	bcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	src := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x10}
	encaps := []struct {
		name string
		tags []uint16
	}{
		{"untagged", nil},
		{"priority", []uint16{0x8100, 0xa000}},
		{"vlan100", []uint16{0x8100, 100}},
		{"vlan200", []uint16{0x8100, 0x2000 | 200}},
		{"vlan300", []uint16{0x8100, 300}},
		{"802.1ad-100", []uint16{0x88a8, 100}},
		{"priority+vlan200", []uint16{0x8100, 0, 0x8100, 200}},
		{"vlan100+vlan200", []uint16{0x8100, 100, 0x8100, 200}},
		{"vlan4095", []uint16{0x8100, 4095}}, // reserved, and in a frame all the same
	}
	type want struct {
		vid      uint16      // 0: VLAN 0, or dropped
		out      fwd.LinkSet // 0: dropped, spoofed_vlan
		untagged fwd.LinkSet
	}
	var (
		x    = want{}
		v0   = want{0, links(0, 4), 0}
		v100 = want{100, links(0, 1, 2, 4), links(1, 2)}
		v200 = want{200, links(0, 3, 5), links(3)}
		v300 = want{300, links(0), 0}
		v4k  = want{4095, links(0), 0}
	)
	//                     untagged priority vlan100 vlan200 vlan300 802.1ad prio+200 100+200 vlan4095
	table := [][]want{
		0: {v0, v0, v100, v200, v300, v0, v0, v100, v4k},
		1: {v100, v100, x, x, x, x, x, x, x},
		2: {v100, v100, x, x, x, x, x, x, x},
		3: {v200, v200, x, x, x, x, x, x, x},
		4: {v0, v0, v100, x, x, x, x, v100, x},
		5: {x, x, x, v200, x, x, x, x, x},
	}
	sw := vlanSwitch(t)
	for in, row := range table {
		for e, w := range row {
			f := tagged(bcast, src, encaps[e].tags...)
			pkts := []fwd.Packet{{Data: f, Len: len(f), Link: in}}
			sw.Handle(pkts)
			p := &pkts[0]
			v, out := p.Verdict()
			vid := p.VLAN()
			untagged := sw.Untagged(vid)
			name := vlanPorts[in].name + " sends " + encaps[e].name
			if w.out == 0 {
				if v != fwd.VerdictDrop || p.Cause() != fwd.CauseSpoofedVLAN {
					t.Errorf("%s: verdict %d to %b (cause %d), want dropped, spoofed_vlan", name, v, out, p.Cause())
				}
				continue
			}
			if v != fwd.VerdictFlood || out != w.out || vid != w.vid || vid != 0 && untagged != w.untagged {
				t.Errorf("%s: verdict %d to %06b, VLAN %d untagged on %06b; want a flood to %06b, VLAN %d untagged on %06b", name, v, out, vid, untagged, w.out, w.vid, w.untagged)
			}
		}
	}
	if n := sw.Len(); n == 0 {
		t.Error("nothing learned")
	}
}

// TestVLANUnicast: addresses are learned and found per VLAN: a MAC
// learned on an access port of 100 is forwarded to from its VLAN (tagged
// from the uplink, untagged from the other access port), and unknown
// elsewhere, its frames flooded within the sender's VLAN; a secured
// access port's pin is in its VLAN; a port removed and added again
// without VLANs is a port of every VLAN again.
func TestVLANUnicast(t *testing.T) {
	sw := vlanSwitch(t)
	a := net.HardwareAddr{0x02, 0, 0, 0, 0, 0xa}
	b := net.HardwareAddr{0x02, 0, 0, 0, 0, 0xb}
	send := func(in int, f []byte) *fwd.Packet {
		pkts := []fwd.Packet{{Data: f, Len: len(f), Link: in}}
		sw.Handle(pkts)
		return &pkts[0]
	}
	send(1, tagged(b, a)) // a learned on 1, in VLAN 100
	for _, c := range []struct {
		name string
		in   int
		f    []byte
		v    fwd.Verdict
		out  fwd.LinkSet
	}{
		{"uplink, VLAN 100", 0, tagged(a, b, 0x8100, 100), fwd.VerdictForward, 1},
		{"access 100", 2, tagged(a, b), fwd.VerdictForward, 1},
		{"trunk, VLAN 100", 4, tagged(a, b, 0x8100, 100), fwd.VerdictForward, 1},
		{"uplink, untagged", 0, tagged(a, b), fwd.VerdictFlood, links(0, 4)},
		{"access 200", 3, tagged(a, b), fwd.VerdictFlood, links(0, 3, 5)},
		{"uplink, VLAN 200", 0, tagged(a, b, 0x8100, 200), fwd.VerdictFlood, links(0, 3, 5)},
	} {
		v, out := send(c.in, c.f).Verdict()
		if v != c.v || out != c.out {
			t.Errorf("%s to a: verdict %d to %b, want %d to %b", c.name, v, out, c.v, c.out)
		}
	}

	// A secured access port: pinned in VLAN 100, found there only.
	s := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x5}
	if err := sw.SetVLANs("pod", modes.VLANs{Access: 100}); err != nil {
		t.Fatal(err)
	}
	if err := sw.SecurePort("pod", modes.Port{MAC: s}); err != nil {
		t.Fatal(err)
	}
	sw.LinkAddedAs(6, "pod")
	if v, out := send(0, tagged(s, b, 0x8100, 100)).Verdict(); v != fwd.VerdictForward || out != 6 {
		t.Errorf("uplink VLAN 100 to the secured pod: verdict %d to %b, want forward to 6", v, out)
	}
	if v, out := send(0, tagged(s, b)).Verdict(); v != fwd.VerdictFlood || out.Has(6) {
		t.Errorf("uplink untagged to the secured pod: verdict %d to %b, want a flood of VLAN 0, not to 6", v, out)
	}
	own := tagged(b, s)
	own[12], own[13] = 0x88, 0xb5 // an EtherType the guard reads no further
	if p := send(6, own); p.Cause() != 0 {
		t.Errorf("the secured pod's own untagged frame: cause %d", p.Cause())
	}
	if p := send(6, tagged(b, s, 0x8100, 200)); p.Cause() != fwd.CauseSpoofedVLAN {
		t.Errorf("the secured pod tagging VLAN 200: cause %d, want spoofed_vlan", p.Cause())
	}

	// Removed, and added again as a port of every VLAN.
	sw.LinkRemoved(1)
	sw.ReleaseVLANs("a100")
	sw.LinkAddedAs(1, "a100")
	if v, out := send(1, tagged(bcast(), a, 0x8100, 300)).Verdict(); v != fwd.VerdictFlood || !out.Has(0) || !out.Has(1) || out.Has(2) {
		t.Errorf("a100 without VLANs sends VLAN 300: verdict %d to %b, want a flood to VLAN 300's ports (0, and 1, every VLAN's)", v, out)
	}
	if v, out := send(0, tagged(bcast(), b, 0x8100, 100)).Verdict(); v != fwd.VerdictFlood || out != links(0, 1, 2, 4, 6) {
		t.Errorf("uplink VLAN 100 broadcast after: %d to %b, want to %b", v, out, links(0, 1, 2, 4, 6))
	}
}

func bcast() net.HardwareAddr { return net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff} }

// TestSetVLANsRefusals: what SetVLANs and SecurePort refuse, each
// changing nothing.
func TestSetVLANsRefusals(t *testing.T) {
	sw := vlanSwitch(t)
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x7}
	if err := sw.SecurePort("sec", modes.Port{MAC: mac}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		v    modes.VLANs
		want string
	}{
		{"a100", modes.VLANs{Access: 4095}, "want 1 to 4094"},
		{"a100", modes.VLANs{Access: 5, Trunk: []uint16{6}}, "not both"},
		{"a100", modes.VLANs{Trunk: []uint16{1, 5000}}, "want 0 to 4094"},
		{"", modes.VLANs{Access: 5}, "name is required"},
		{"sec", modes.VLANs{Trunk: []uint16{5}}, "access port's"},
	} {
		before := sw.PortVLANs()
		err := sw.SetVLANs(c.name, c.v)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetVLANs(%q, %+v): %v, want an error saying %q", c.name, c.v, err, c.want)
		}
		if after := sw.PortVLANs(); len(after) != len(before) || !after[c.name].Equal(before[c.name]) {
			t.Errorf("SetVLANs(%q, %+v) refused changed %v to %v", c.name, c.v, before, after)
		}
	}
	sw.LinkAddedAs(7, "sec")
	if err := sw.SetVLANs("sec", modes.VLANs{Access: 9}); err == nil {
		t.Error("a forwarded secured port's VLAN changed")
	}
	if err := sw.SecurePort("t200", modes.Port{MAC: net.HardwareAddr{0x02, 0, 0, 0, 0, 8}}); err == nil || !strings.Contains(err.Error(), "trunk") {
		t.Errorf("SecurePort on a trunk: %v, want refused", err)
	}
}

func TestParseTrunk(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []uint16
		out  string
	}{
		{"100", []uint16{100}, "100"},
		{"0,100-102, 7,101", []uint16{0, 7, 100, 101, 102}, "0,7,100-102"},
		{"4094", []uint16{4094}, "4094"},
	} {
		got, err := modes.ParseTrunk(c.in)
		if err != nil || !slices.Equal(got, c.want) || modes.FormatTrunk(got) != c.out {
			t.Errorf("ParseTrunk(%q) = %v, %v (formatted %q); want %v, %q", c.in, got, err, modes.FormatTrunk(got), c.want, c.out)
		}
	}
	for _, bad := range []string{"", "4095", "5-3", "a", "1,,2", "-1", "1-"} {
		if got, err := modes.ParseTrunk(bad); err == nil {
			t.Errorf("ParseTrunk(%q) = %v, want an error", bad, got)
		}
	}
	if s := (modes.VLANs{Access: 100}).String() + "; " + (modes.VLANs{Trunk: []uint16{0, 5, 6}}).String() + "; " + (modes.VLANs{}).String(); s != "access 100; trunk 0,5-6; all" {
		t.Errorf("VLANs strings: %q", s)
	}
}

// TestVLANExportImport: a successor's switch takes its predecessor's
// VLANs with its ports (fwd's handover), a secured access port's pin in
// its VLAN among them: it classifies, floods and forwards as the
// predecessor did.
func TestVLANExportImport(t *testing.T) {
	old := vlanSwitch(t)
	s := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x5}
	if err := old.SetVLANs("pod", modes.VLANs{Access: 200}); err != nil {
		t.Fatal(err)
	}
	if err := old.SecurePort("pod", modes.Port{MAC: s}); err != nil {
		t.Fatal(err)
	}
	old.LinkAddedAs(len(vlanPorts), "pod")
	b, _ := json.Marshal(old.Export())
	var st modes.SwitchState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	next := modes.NewSwitch(0, 64, time.Minute)
	for i, p := range vlanPorts {
		next.LinkAddedAs(i, p.name)
	}
	next.LinkAddedAs(len(vlanPorts), "pod")
	if err := next.Import(st); err != nil {
		t.Fatal(err)
	}
	if got, want := next.PortVLANs(), old.PortVLANs(); len(got) != len(want) || !got["pod"].Equal(want["pod"]) || !got["t0-100"].Equal(want["t0-100"]) {
		t.Errorf("VLANs imported %v, want %v", got, want)
	}
	f := tagged(s, net.HardwareAddr{0x02, 0, 0, 0, 0, 1}, 0x8100, 200)
	pkts := []fwd.Packet{{Data: f, Len: len(f), Link: 0}, {Data: tagged(bcast(), s), Len: 64, Link: 3}, {Data: tagged(bcast(), s, 0x8100, 100), Len: 64, Link: 4}}
	next.Handle(pkts)
	if v, out := pkts[0].Verdict(); v != fwd.VerdictForward || int(out) != len(vlanPorts) {
		t.Errorf("uplink VLAN 200 to the secured pod after the import: verdict %d to %d", v, out)
	}
	if v, out := pkts[1].Verdict(); v != fwd.VerdictFlood || out != links(0, 3, 5, len(vlanPorts)) {
		t.Errorf("a200's broadcast after the import: verdict %d to %b", v, out)
	}
	if v, out := pkts[2].Verdict(); v != fwd.VerdictFlood || out != links(0, 1, 2, 4) {
		t.Errorf("the trunk's VLAN 100 broadcast after the import: verdict %d to %b", v, out)
	}
}

// TestVLANRace: workers switch frames of every kind (each port's, tagged
// and not, broadcast and unicast) while links with VLANs are removed and
// added again with other VLANs, over and over. Throughout, the access
// ports of VLANs 100 and 200 that stay never get a frame of each
// other's, nor the trunk of 100 one of 200's, and each access port's
// frames are in its VLAN. Run with -race.
func TestVLANRace(t *testing.T) {
	const workers, rounds = 3, 300
	sw := modes.NewSwitch(0, 1024, time.Hour)
	stable := []struct {
		name string
		v    modes.VLANs
	}{{"a100", modes.VLANs{Access: 100}}, {"a200", modes.VLANs{Access: 200}}, {"t100", modes.VLANs{Trunk: []uint16{100}}}}
	for i, p := range stable {
		if err := sw.SetVLANs(p.name, p.v); err != nil {
			t.Fatal(err)
		}
		sw.LinkAddedAs(i, p.name)
	}
	churn := []string{"c3", "c4", "c5"}
	for i, n := range churn {
		sw.LinkAddedAs(3+i, n)
	}
	mac := func(i int) net.HardwareAddr { return net.HardwareAddr{0x02, 0x41, 0, 0, 0, byte(i)} }
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad, batches atomic.Int64
	var first atomic.Pointer[string]
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 41))
			pkts := make([]fwd.Packet, 32)
			for !stop.Load() {
				for i := range pkts {
					dst := bcast()
					if rng.IntN(2) == 0 {
						dst = mac(rng.IntN(8))
					}
					var tags []uint16
					switch rng.IntN(3) {
					case 1:
						tags = []uint16{0x8100, uint16([]int{100, 200, 300}[rng.IntN(3)])}
					case 2:
						tags = []uint16{0x8100, 0}
					}
					f := tagged(dst, mac(rng.IntN(8)), tags...)
					f[12+2*len(tags)], f[13+2*len(tags)] = 0x88, 0xb5
					pkts[i] = fwd.Packet{Data: f, Len: len(f), Link: rng.IntN(6)}
				}
				sw.Handle(pkts)
				batches.Add(1)
				for i := range pkts {
					p := &pkts[i]
					v, out := p.Verdict()
					if v == fwd.VerdictForward {
						out = fwd.LinkSet(0).Add(int(out))
					} else if v != fwd.VerdictFlood {
						continue
					}
					var wrong string
					switch {
					case p.Link == 0 && (out.Has(1) || p.VLAN() != 100):
						wrong = "a100's frame to a200, or out of VLAN 100"
					case p.Link == 1 && (out.Has(0) || out.Has(2) || p.VLAN() != 200):
						wrong = "a200's frame to a100 or t100, or out of VLAN 200"
					case p.Link == 2 && out.Has(1):
						wrong = "t100's frame to a200"
					}
					if wrong != "" && bad.Add(1) == 1 {
						first.Store(&wrong)
					}
				}
			}
		})
	}
	rng := rand.New(rand.NewPCG(41, 41))
	choices := []modes.VLANs{{}, {Access: 100}, {Access: 200}, {Access: 300}, {Trunk: []uint16{0, 200}}, {Trunk: []uint16{100, 300}}}
	for range rounds {
		i := rng.IntN(len(churn))
		sw.LinkRemoved(3 + i)
		sw.ReleaseVLANs(churn[i])
		if err := sw.SetVLANs(churn[i], choices[rng.IntN(len(choices))]); err != nil {
			t.Fatal(err)
		}
		sw.LinkAddedAs(3+i, churn[i])
		// A few batches switched on each layout before the next.
		for at, deadline := batches.Load(), time.Now().Add(time.Second); batches.Load() < at+workers && time.Now().Before(deadline); {
			runtime.Gosched()
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d batches of 32 frames across %d changes of VLANs", batches.Load(), rounds)
	if n := bad.Load(); n != 0 {
		t.Errorf("%d frames crossed VLANs while links came and went; the first: %s", n, *first.Load())
	}
}

// BenchmarkSwitchVLAN is BenchmarkSwitch with every port in a VLAN: four
// access ports of VLAN 100, frames untagged, each classified and put in
// its VLAN; no allocation.
func BenchmarkSwitchVLAN(b *testing.B) {
	sw := modes.NewSwitch(0, 0, 0)
	for i := range 4 {
		name := "p" + string(rune('0'+i))
		if err := sw.SetVLANs(name, modes.VLANs{Access: 100}); err != nil {
			b.Fatal(err)
		}
		sw.LinkAddedAs(i, name)
	}
	benchSwitch(b, sw)
}
