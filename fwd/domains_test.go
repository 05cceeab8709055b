package fwd_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/modes"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// UMEM domains (domain.go) on the fake environment: NIC links that report
// zero-copy bind in one UMEM, veths in another, and frames crossing
// between them are copied.

// zcNIC is a fake NIC link that reports AF_XDP zero-copy, of queues
// queues and the given MTU (0: 1500).
func zcNIC(queues, mtu int) fwdtest.LinkOptions {
	return fwdtest.LinkOptions{Queues: queues, MTU: mtu, Driver: "ice",
		ZeroCopy: xsk.ZeroCopyFeatures{Known: true, ZeroCopy: true}}
}

// fakeVeth is a fake veth link: no zero-copy.
func fakeVeth(queues, mtu int) fwdtest.LinkOptions {
	return fwdtest.LinkOptions{Queues: queues, MTU: mtu, Driver: "veth", Veth: true,
		ZeroCopy: xsk.ZeroCopyFeatures{Known: true}}
}

// TestDomainsPlanned: which links share a UMEM, as the plan decides it.
func TestDomainsPlanned(t *testing.T) {
	sw := modes.NewSwitch(4, 1024, time.Minute)
	for _, tc := range []struct {
		name  string
		cfg   fwd.Config
		links []fwdtest.LinkOptions
		want  []fwd.Domain // Name, Links and Added only
		zc    []string     // the links bound in zero-copy mode
	}{
		{"NICs and veths", fwd.Config{Handler: sw}, []fwdtest.LinkOptions{zcNIC(1, 0), zcNIC(1, 0), fakeVeth(1, 0)},
			[]fwd.Domain{{Name: "zerocopy", Links: []string{"l0", "l1"}}, {Name: "copy", Links: []string{"l2"}, Added: true}}, []string{"l0", "l1"}},
		{"NICs, links to come", fwd.Config{Handler: sw, MaxLinks: 8}, []fwdtest.LinkOptions{zcNIC(1, 0), zcNIC(1, 0)},
			[]fwd.Domain{{Name: "zerocopy", Links: []string{"l0", "l1"}}, {Name: "copy", Links: []string{}, Added: true}}, []string{"l0", "l1"}},
		{"NICs alone", fwd.Config{Handler: sw}, []fwdtest.LinkOptions{zcNIC(1, 0), zcNIC(1, 0)},
			[]fwd.Domain{{Links: []string{"l0", "l1"}, Added: true}}, []string{"l0", "l1"}},
		{"zero-copy off", fwd.Config{Handler: sw, MaxLinks: 8, ZeroCopy: xsk.ZeroCopyOff}, []fwdtest.LinkOptions{zcNIC(1, 0), fakeVeth(1, 0)},
			[]fwd.Domain{{Links: []string{"l0", "l1"}, Added: true}}, nil},
		{"veths alone", fwd.Config{Handler: sw, MaxLinks: 8}, []fwdtest.LinkOptions{fakeVeth(1, 0), fakeVeth(1, 0)},
			[]fwd.Domain{{Links: []string{"l0", "l1"}, Added: true}}, nil},
		{"support unknown", fwd.Config{Handler: sw, MaxLinks: 8}, []fwdtest.LinkOptions{{}, fakeVeth(1, 0)},
			[]fwd.Domain{{Links: []string{"l0", "l1"}, Added: true}}, nil},
		{"on, NICs, links to come", fwd.Config{Handler: sw, MaxLinks: 8, ZeroCopy: xsk.ZeroCopyOn}, []fwdtest.LinkOptions{zcNIC(1, 0), zcNIC(1, 0)},
			[]fwd.Domain{{Name: "zerocopy", Links: []string{"l0", "l1"}}, {Name: "copy", Links: []string{}, Added: true}}, []string{"l0", "l1"}},
		{"xconnect NIC to veth", fwd.Config{}, []fwdtest.LinkOptions{zcNIC(1, 0), fakeVeth(1, 0)},
			[]fwd.Domain{{Name: "zerocopy", Links: []string{"l0"}}, {Name: "copy", Links: []string{"l1"}, Added: true}}, []string{"l0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startFake(t, tc.cfg, tc.links...)
			p := r.f.Plan()
			if len(p.Domains) != len(tc.want) {
				t.Fatalf("%d domains %+v, want %d", len(p.Domains), p.Domains, len(tc.want))
			}
			total := 0
			for d, want := range tc.want {
				got := p.Domains[d]
				if got.Name != want.Name || fmt.Sprint(got.Links) != fmt.Sprint(want.Links) || got.Added != want.Added {
					t.Errorf("domain %d: %q links %v added %v; want %q %v %v", d, got.Name, got.Links, got.Added, want.Name, want.Links, want.Added)
				}
				if reg := r.f.Regions()[d]; reg.Size() != got.UMEM.Size() {
					t.Errorf("domain %d maps %d bytes, its plan %d", d, reg.Size(), got.UMEM.Size())
				}
				total += got.UMEM.Size()
			}
			if total != p.UMEMSize() {
				t.Errorf("domains map %d bytes together, UMEMSize %d", total, p.UMEMSize())
			}
			if len(p.Domains) == 2 && p.Domains[0].UMEM.Size() >= p.Domains[1].UMEM.Size() && tc.cfg.MaxLinks > 2 {
				t.Errorf("the zero-copy domain (%d bytes) holds the links to come: not below the copy domain's %d", p.Domains[0].UMEM.Size(), p.Domains[1].UMEM.Size())
			}
			for i, name := range r.f.Links() {
				ls := r.f.LinkStats(i)
				wantBind := "copy"
				if slices.Contains(tc.zc, name) {
					wantBind = "zerocopy"
				}
				if ls.BindMode != wantBind {
					t.Errorf("%s bound %s, want %s", name, ls.BindMode, wantBind)
				}
			}
		})
	}
}

// domainSwitch runs a switch over two zero-copy NICs (A behind l0, B
// behind l1) that takes two veths while running (C behind c, D behind
// d), every host learned.
type domainSwitch struct {
	*fakeRun
	links map[string]*fwdtest.Link
	hosts map[string]net.HardwareAddr
	next  uint32
}

func startDomainSwitch(t *testing.T, workers, mtu int) *domainSwitch {
	t.Helper()
	sw := modes.NewSwitch(2, 1024, time.Minute)
	nic := zcNIC(workers, mtu)
	r := startFake(t, fwd.Config{Handler: sw, MaxLinks: 4, Queues: workers}, nic, nic)
	if workers > 1 {
		runClock(t, r.env)
	}
	s := &domainSwitch{fakeRun: r, links: map[string]*fwdtest.Link{"l0": r.links[0], "l1": r.links[1]},
		hosts: map[string]net.HardwareAddr{"l0": macA, "l1": macB, "c": macC, "d": {2, 0, 0, 0, 0, 0xd}}}
	for _, n := range []string{"c", "d"} {
		s.links[n] = r.env.AddLink(n, fakeVeth(workers, mtu))
		if err := r.f.AddLink(n); err != nil {
			t.Fatalf("AddLink(%s): %v", n, err)
		}
	}
	// Each host announces itself: a broadcast, seen by the three others.
	for _, from := range []string{"l0", "l1", "c", "d"} {
		s.flood(t, from, 64)
	}
	return s
}

// frame is a frame of size bytes from the host behind link from to the
// one behind to ("" broadcast), with a fresh sequence number.
func (s *domainSwitch) frame(from, to string, size int) []byte {
	dst := bcast
	if to != "" {
		dst = s.hosts[to]
	}
	s.next++
	return seqFrame(dst, s.hosts[from], 7, s.next, size)
}

// send injects a frame of size from → to and checks that to, and only
// to, sent it, byte for byte.
func (s *domainSwitch) send(t *testing.T, from, to string, size int) {
	t.Helper()
	f := s.frame(from, to, size)
	injectOn(t, s.links[from], f)
	got := s.links[to].CollectN(1, 5*time.Second)
	if len(got) != 1 || !bytes.Equal(got[0].Data, f) {
		t.Fatalf("%s → %s, %d B: %d frames out of %s, want the one sent byte for byte", from, to, size, len(got), to)
	}
	for n, l := range s.links {
		if n != to && n != from {
			if extra := l.Collect(); len(extra) > 0 {
				t.Fatalf("%s → %s: %d frames out of %s too", from, to, len(extra), n)
			}
		}
	}
}

// flood injects a broadcast from from and checks that every other link
// sent it, byte for byte.
func (s *domainSwitch) flood(t *testing.T, from string, size int) {
	t.Helper()
	f := s.frame(from, "", size)
	injectOn(t, s.links[from], f)
	for n, l := range s.links {
		if n == from {
			continue
		}
		if got := l.CollectN(1, 5*time.Second); len(got) != 1 || !bytes.Equal(got[0].Data, f) {
			t.Fatalf("broadcast from %s, %d B: %d frames out of %s, want the one sent byte for byte", from, size, len(got), n)
		}
	}
}

// TestDomainsForward: a switch over two zero-copy NICs with two veths
// added while running: the NICs stay zero-copy, the veths bind in copy
// mode; frames of every size cross between the domains byte for byte
// (copied, counted by TX path) and move within one without a copy; every
// UMEM address of both domains comes back (fakeRun.close).
func TestDomainsForward(t *testing.T) { forWorkers(t, testDomainsForward) }

func testDomainsForward(t *testing.T, workers int) {
	s := startDomainSwitch(t, workers, 0)
	for i, name := range s.f.Links() {
		want := map[string]string{"l0": "zerocopy", "l1": "zerocopy", "c": "copy", "d": "copy"}[name]
		if ls := s.f.LinkStats(i); ls.BindMode != want || ls.Domain != want {
			t.Errorf("%s: bound %s in domain %q, want %s in %q", name, ls.BindMode, ls.Domain, want, want)
		}
	}
	before := s.f.Summary()
	// 60 and 200 B go inline; 300, 1000 and 1514 B into frag blocks.
	sizes := []int{60, 200, 300, 1000, 1514}
	for _, size := range sizes {
		s.send(t, "l0", "c", size) // zero-copy → copy
		s.send(t, "c", "l1", size) // copy → zero-copy
		s.send(t, "c", "d", size)  // within the copy domain
		s.send(t, "l1", "l0", size)
		s.flood(t, "l0", size) // one copy per link, across and within
	}
	after := s.f.Summary()
	copies := func(link string) (inline, frag uint64) {
		a, b := after.Links[link], before.Links[link]
		return a.DomainCopiesInline - b.DomainCopiesInline, a.DomainCopiesFrag - b.DomainCopiesFrag
	}
	// c got 5 sends and 5 floods from l0, l1 5 sends from c: all copies.
	// d got 5 sends from c (within its domain) and 5 floods from l0; l0
	// got nothing across.
	for _, w := range []struct {
		link          string
		inline, frags uint64
	}{{"c", 4, 6}, {"d", 2, 3}, {"l1", 2, 3}, {"l0", 0, 0}} {
		if in, fr := copies(w.link); in != w.inline || fr != w.frags {
			t.Errorf("%s: %d inline and %d frag-block copies across domains, want %d and %d", w.link, in, fr, w.inline, w.frags)
		}
	}
	var bytesAcross uint64
	for _, size := range sizes {
		bytesAcross += uint64(4 * size) // c twice, d, l1
	}
	if got := after.DomainCopyBytes - before.DomainCopyBytes; got != bytesAcross {
		t.Errorf("%d bytes copied across domains, want %d", got, bytesAcross)
	}
	if len(after.Domains) != 2 || after.Domains[0].BindMode != "zerocopy" || after.Domains[1].BindMode != "copy" {
		t.Errorf("summary domains %+v, want zerocopy then copy", after.Domains)
	}
}

// TestDomainsJumbo: multi-buffer frames of MTU 9000 links cross between
// the domains whole (repacked into frag blocks), byte for byte.
func TestDomainsJumbo(t *testing.T) {
	s := startDomainSwitch(t, 1, 9000)
	for _, size := range []int{3000, 9014} {
		s.send(t, "l0", "c", size)
		s.send(t, "c", "l1", size)
		s.flood(t, "d", size)
	}
	if fr := s.f.Summary().Links["c"].DomainCopiesFrag; fr < 2 {
		t.Errorf("c: %d frag-block copies across domains, want the 2 jumbo frames", fr)
	}
}

// TestDomainsChurn: veths added and removed over and over while
// broadcasts from a zero-copy NIC flood to every link (crossing into the
// copy domain) and stats are read: the other NIC sends every frame in
// order but those dropped on it, counted (a flood may find no room for
// its copy while the fake wire is slow to complete), and every address
// of both domains comes back (with -race: the shared tables are touched
// by every worker and the caller).
func TestDomainsChurn(t *testing.T) { forWorkers(t, testDomainsChurn) }

func testDomainsChurn(t *testing.T, workers int) {
	s := startDomainSwitch(t, workers, 0)
	var sent atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			f := seqFrame(bcast, macA, 8, uint32(i), 64+i%1400)
			deadline := time.Now().Add(10 * time.Second)
			for !s.links["l0"].Inject(i%workers, f, rxInOrder(s.env, i)) {
				if stop.Load() || time.Now().After(deadline) {
					return
				}
				time.Sleep(20 * time.Microsecond)
			}
			sent.Add(1)
		}
	})
	var got []uint32
	var readers sync.WaitGroup
	readers.Go(func() {
		for !stop.Load() {
			for _, f := range s.links["l1"].Collect() {
				got = append(got, seqOf(f.Data))
			}
			for _, n := range []string{"c", "d"} {
				s.links[n].Collect()
			}
			s.f.Summary()
			s.f.Zones()
			time.Sleep(50 * time.Microsecond)
		}
	})
	for range 20 {
		linkSteps(t, s.f, "-d", "-c", "+c", "+d")
	}
	stop.Store(true)
	wg.Wait()
	readers.Wait()
	total := int(sent.Load())
	dropped := func() int { return int(s.f.LinkStats(1).TotalDrops()) }
	deadline := time.Now().Add(10 * time.Second)
	for len(got)+dropped() < total && time.Now().Before(deadline) {
		for _, f := range s.links["l1"].Collect() {
			got = append(got, seqOf(f.Data))
		}
		// The veths too: their full TX rings would push back into l0's
		// RX ring.
		for _, n := range []string{"c", "d"} {
			s.links[n].Collect()
		}
	}
	if len(got)+dropped() != total {
		t.Fatalf("l1 sent %d of the %d broadcasts; drops l0 %v, l1 %v; l0 rx %d, l1 tx %d, fake l0 %+v", len(got), total, nonZero(s.f.LinkStats(0).Drops), nonZero(s.f.LinkStats(1).Drops), s.f.LinkStats(0).RXPackets, s.f.LinkStats(1).TXPackets, s.links["l0"].Counters())
	}
	late := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			late++
		}
	}
	if timeouts := s.f.LinkStats(1).OrderHoldTimeouts; uint64(late) > timeouts {
		t.Fatalf("%d broadcasts out of order on l1, %d sent past their turn counted", late, timeouts)
	}
	sum := s.f.Summary()
	t.Logf("%d broadcasts during 20 remove/add cycles of two veths, %d dropped on l1, counted (%v); copies across domains: %v, %d bytes",
		total, dropped(), nonZero(s.f.LinkStats(1).Drops), sum.DomainCopies, sum.DomainCopyBytes)
}

// nonZero is m without its zeros.
func nonZero(m map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// TestDomainsZeroCopyLinkFixed: a link bound in zero-copy mode cannot be
// removed (its driver holds frames the rings do not show), and says so;
// the veths can.
func TestDomainsZeroCopyLinkFixed(t *testing.T) {
	s := startDomainSwitch(t, 1, 0)
	if err := s.f.RemoveLink("l0"); !errors.Is(err, linkop.ErrUnsupported) {
		t.Fatalf("RemoveLink(l0), zero-copy: %v, want linkop.ErrUnsupported", err)
	}
	if err := s.f.RemoveLink("c"); err != nil {
		t.Fatalf("RemoveLink(c), copy mode: %v", err)
	}
	if err := s.f.LinksChangeable(); err != nil {
		t.Fatalf("LinksChangeable: %v, want nil: veths come and go", err)
	}
	s.send(t, "l0", "l1", 100)
}

// TestDomainsZeroCopyOnRefusesVeth: --zerocopy on asks every link given
// to bind in zero-copy mode; a veth among them fails it, as before
// domains, rather than binding in copy mode.
func TestDomainsZeroCopyOnRefusesVeth(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("nic", zcNIC(1, 0))
	env.AddLink("veth", fakeVeth(1, 0))
	f, err := fwd.New(fwd.Config{Links: []string{"nic", "veth"}, Handler: modes.NewSwitch(2, 1024, time.Minute),
		ZeroCopy: xsk.ZeroCopyOn, Env: env, HugePages: umem.HugePagesOff})
	if err == nil {
		f.Close()
		t.Fatal("New with a veth and --zerocopy on: no error, want the veth's bind refused")
	}
	t.Logf("refused: %v", err)
}

// TestChecksumsOfAddedVeth: a veth added while running (a pod's) gets the
// TCP/UDP checksums its sender left partial finished under
// --complete-checksums auto, though the links given at start were NICs,
// in one domain or two. Without it a pod's TCP reached the hosts behind
// the NICs with the pseudo-header sum in place and was dropped there
// (internal/vmtest, pods): auto was decided on the links given alone.
func TestChecksumsOfAddedVeth(t *testing.T) {
	for _, zc := range []xsk.ZeroCopy{xsk.ZeroCopyAuto, xsk.ZeroCopyOff} {
		for _, proto := range []uint8{6, 17} {
			t.Run(fmt.Sprintf("zerocopy-%s/proto-%d", map[xsk.ZeroCopy]string{xsk.ZeroCopyAuto: "auto", xsk.ZeroCopyOff: "off"}[zc], proto), func(t *testing.T) {
				sw := modes.NewSwitch(2, 1024, time.Minute)
				r := startFake(t, fwd.Config{Handler: sw, MaxLinks: 3, ZeroCopy: zc}, zcNIC(1, 0), zcNIC(1, 0))
				c := r.env.AddLink("c", fakeVeth(1, 0))
				if err := r.f.AddLink("c"); err != nil {
					t.Fatal(err)
				}
				// A learns where it is; then C's frame to A, partial.
				injectOn(t, r.links[0], seqFrame(bcast, macA, 7, 1, 64))
				c.CollectN(1, 5*time.Second)
				r.links[1].CollectN(1, 5*time.Second)
				correct, partial := l4v4(proto, 200)
				for _, f := range [][]byte{correct, partial} {
					copy(f, macA)
					copy(f[6:], macC)
				}
				injectOn(t, c, partial)
				got := r.links[0].CollectN(1, 5*time.Second)
				if len(got) != 1 || !bytes.Equal(got[0].Data, correct) {
					t.Fatalf("C → A, partial checksum: %d frames out of A; want the frame with its checksum finished", len(got))
				}
				if n := r.f.LinkStats(2).ChecksumsCompleted; n != 1 {
					t.Errorf("checksums completed on c: %d, want 1", n)
				}
			})
		}
	}
}
