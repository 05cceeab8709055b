package fwd

import (
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Link facts as lookupLinks reports them, for resolve without root.
func vethLink(name string, queues int) linkInfo {
	return linkInfo{name: name, veth: true, driver: "veth", zc: xsk.ZeroCopyFeatures{Known: true},
		mtu: 1500, rxQueues: queues, txQueues: queues}
}

func nicLink(name, driver string, mtu, queues int, maxSegs int) linkInfo {
	return linkInfo{name: name, driver: driver,
		zc:  xsk.ZeroCopyFeatures{Known: true, ZeroCopy: true, MaxSegs: maxSegs},
		mtu: mtu, rxQueues: queues, txQueues: queues}
}

var twoCPUs = hostFacts{cpus: []int{0, 1}}

func twoLinks(l func(string) linkInfo) []linkInfo { return []linkInfo{l("a"), l("b")} }

// TestResolveZeroValues: every zero value of Config resolves to the default
// its doc names, against two one-queue veths on a host of two CPUs.
func TestResolveZeroValues(t *testing.T) {
	links := twoLinks(func(n string) linkInfo { return vethLink(n, 1) })
	p, err := resolve(Config{Links: []string{"a", "b"}}, links, twoCPUs)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field     string
		got, want any
	}{
		{"Queues (0: the CPUs, at most the links' queues)", p.Queues, 1},
		{"RingSize (0: 2048 with one socket per link and worker)", p.RingSize, uint32(2048)},
		{"Batch (0: 64)", p.Batch, 64},
		{"FrameSize (0: 2048)", p.FrameSize, 2048},
		{"ZeroCopy", p.ZeroCopy, xsk.ZeroCopyAuto},
		{"MultiBuffer (auto: MTU 1500 fits a frame)", p.MultiBuffer, false},
		{"Checksums (auto: finished on veths)", p.completesChecksums(links[0]), true},
		{"Promiscuous (auto: on without a handler)", p.Promiscuous, true},
		{"CPUs (one worker: unpinned)", len(p.CPUs), 0},
		{"InlineMax (0: 256)", p.InlineMax, 256},
		{"FragOrder (0: 4, but no zone without multi-buffer or handler)", p.FragOrder, FragOff},
		{"MaxTxFrags (0: 4)", p.MaxTxFrags, 4},
		{"FlowTableSize (0: xps.DefaultSize)", p.FlowTableSize, xps.DefaultSize},
		{"Spin (0: adaptive, kept 0)", p.Spin, 0},
		{"XPS", p.XPS, xps.ModeSticky},
		{"HandoffSize (one worker: none)", p.HandoffSize, 0},
		{"LinkQueues", p.LinkQueues, []int{1, 1}},
		{"UMEM inline slots", p.UMEM.InlineSlots > 0, true},
		{"Logger (nil: discard)", p.Logger != nil, true},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: %v, want %v", c.field, c.got, c.want)
		}
	}
}

// TestResolveSettings: each setting against the link facts that decide
// it, the frame size and zero-copy decisions of package zcbuf for igb,
// virtio and veth among them.
func TestResolveSettings(t *testing.T) {
	sink := notPromisc{HandlerFunc(func([]Packet) {})}
	drop := HandlerFunc(func([]Packet) {})
	igb := func(mtu int) func(string) linkInfo {
		return func(n string) linkInfo { return nicLink(n, "igb", mtu, 1, 1) }
	}
	virtio := func(mtu int) func(string) linkInfo {
		return func(n string) linkInfo { return nicLink(n, "virtio_net", mtu, 1, 1) }
	}
	veth := func(q int) func(string) linkInfo { return func(n string) linkInfo { return vethLink(n, q) } }
	nic := func(q int) func(string) linkInfo {
		return func(n string) linkInfo { return nicLink(n, "ice", 1500, q, 0) }
	}
	for _, tc := range []struct {
		name     string
		cfg      Config
		links    []linkInfo
		host     hostFacts
		check    func(Plan) bool
		want     string
		decision string // a Decisions entry's Msg, "" for none
	}{
		{"igb, frame size auto: 4096", Config{}, twoLinks(igb(1500)), twoCPUs,
			func(p Plan) bool { return p.FrameSize == 4096 && p.ZeroCopy == xsk.ZeroCopyAuto }, "4096, zero-copy auto", "frame size 4096"},
		{"igb, 2048 with zero-copy auto: copy mode", Config{FrameSize: 2048}, twoLinks(igb(1500)), twoCPUs,
			func(p Plan) bool { return p.FrameSize == 2048 && p.ZeroCopy == xsk.ZeroCopyOff }, "2048, zero-copy off", "zero-copy off"},
		{"igb, zero-copy off: nothing to fit", Config{ZeroCopy: xsk.ZeroCopyOff}, twoLinks(igb(1500)), twoCPUs,
			func(p Plan) bool { return p.FrameSize == 2048 && p.ZeroCopy == xsk.ZeroCopyOff }, "2048, zero-copy off", ""},
		{"virtio MTU 1500: 2048 fits", Config{}, twoLinks(virtio(1500)), twoCPUs,
			func(p Plan) bool { return p.FrameSize == 2048 && p.ZeroCopy == xsk.ZeroCopyAuto }, "2048, zero-copy auto", ""},
		{"virtio MTU 3000: 4096", Config{}, twoLinks(virtio(3000)), twoCPUs,
			func(p Plan) bool { return p.FrameSize == 4096 && !p.MultiBuffer }, "4096 without multi-buffer", "frame size 4096"},
		{"virtio MTU 9000: copy mode and multi-buffer", Config{}, twoLinks(virtio(9000)), twoCPUs,
			func(p Plan) bool { return p.ZeroCopy == xsk.ZeroCopyOff && p.MultiBuffer }, "zero-copy off, multi-buffer on", "zero-copy off"},
		{"veth: 2048, zero-copy auto", Config{FrameSize: 2048}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.FrameSize == 2048 && p.ZeroCopy == xsk.ZeroCopyAuto }, "2048, zero-copy auto", ""},
		{"queues 0: the CPUs, at most the links' queues", Config{}, twoLinks(nic(4)), hostFacts{cpus: []int{0, 1, 2}},
			func(p Plan) bool { return p.Queues == 3 }, "3 workers", ""},
		{"queues 0 on two-queue links", Config{}, twoLinks(nic(2)), hostFacts{cpus: []int{0, 1, 2}},
			func(p Plan) bool { return p.Queues == 2 }, "2 workers", ""},
		{"queues 0 on one CPU", Config{}, twoLinks(nic(4)), hostFacts{cpus: []int{3}},
			func(p Plan) bool { return p.Queues == 1 && len(p.CPUs) == 0 }, "1 worker, unpinned", ""},
		{"several workers pinned to the allowed CPUs", Config{Queues: 2}, twoLinks(nic(2)), hostFacts{cpus: []int{2, 5}},
			func(p Plan) bool { return slices.Equal(p.CPUs, []int{2, 5}) && p.HandoffSize > 0 }, "CPUs [2 5], handoff rings", ""},
		{"NoPin", Config{Queues: 2, NoPin: true}, twoLinks(nic(2)), twoCPUs,
			func(p Plan) bool { return len(p.CPUs) == 0 }, "unpinned", ""},
		{"ring auto: 64 queues per link on 2 workers", Config{Queues: 2}, twoLinks(nic(64)), twoCPUs,
			func(p Plan) bool { return p.RingSize == 64 && p.Batch == 64 }, "ring 64", ""},
		{"ring auto: 4 queues per link on 2 workers", Config{Queues: 2}, twoLinks(nic(4)), twoCPUs,
			func(p Plan) bool { return p.RingSize == 1024 }, "ring 1024", ""},
		{"ring given", Config{RingSize: 256}, twoLinks(nic(4)), twoCPUs,
			func(p Plan) bool { return p.RingSize == 256 }, "ring 256", ""},
		{"checksums auto on a NIC: off", Config{}, twoLinks(nic(1)), twoCPUs,
			func(p Plan) bool { return !p.completesChecksums(nic(1)("a")) && p.completesChecksums(veth(1)("c")) }, "off on the NIC, on on a veth added", ""},
		{"checksums on", Config{Checksums: ChecksumsOn}, twoLinks(nic(1)), twoCPUs,
			func(p Plan) bool { return p.completesChecksums(nic(1)("a")) }, "on", ""},
		{"checksums off on veth", Config{Checksums: ChecksumsOff}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return !p.completesChecksums(veth(1)("a")) }, "off", ""},
		{"promisc auto, sink handler: off", Config{Handler: sink}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return !p.Promiscuous }, "off", ""},
		{"promisc off", Config{Promisc: PromiscOff}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return !p.Promiscuous }, "off", ""},
		{"multi-buffer auto, MTU 9000", Config{}, twoLinks(func(n string) linkInfo { l := vethLink(n, 1); l.mtu = 9000; return l }), twoCPUs,
			func(p Plan) bool { return p.MultiBuffer && p.FragOrder == 4 }, "on, frag zone of order 4", "multi-buffer on"},
		{"multi-buffer on", Config{MultiBufferMode: MultiBufferOn, FragOrder: 3}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.MultiBuffer && p.FragOrder == 3 }, "on, order 3", "multi-buffer on"},
		{"frag order 0 with a handler: 4", Config{Handler: drop}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.FragOrder == 4 && p.UMEM.FragOrder == 4 }, "4", ""},
		{"frag order off: no zone", Config{Handler: drop, FragOrder: FragOff}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.FragOrder == FragOff && p.UMEM.FragOrder == 0 }, "no zone", ""},
		{"frag order negative: off", Config{Handler: drop, FragOrder: -2}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.FragOrder == FragOff && p.UMEM.FragOrder == 0 }, "FragOff, no zone", ""},
		{"inline off: no inline zone", Config{InlineMax: InlineOff}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.InlineMax == InlineOff && p.inlineBytes() == 0 && p.UMEM.InlineSlots == 0 }, "off, 0 bytes, no slots", ""},
		{"inline 100", Config{InlineMax: 100}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.InlineMax == 100 && p.UMEM.InlineSlots > 0 }, "100 bytes", ""},
		{"spin negative: coalesce off", Config{Spin: -1, Coalesce: time.Microsecond}, twoLinks(veth(1)), twoCPUs,
			func(p Plan) bool { return p.Spin == -1 && p.Coalesce == 0 }, "never spin, no coalescing", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Links = []string{"a", "b"}
			p, err := resolve(cfg, tc.links, tc.host)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(p) {
				t.Errorf("plan %+v; want %s", p, tc.want)
			}
			var msgs []string
			for _, d := range p.Decisions {
				msgs = append(msgs, d.Msg)
			}
			if tc.decision != "" && !slices.Contains(msgs, tc.decision) {
				t.Errorf("decisions %q lack %q", msgs, tc.decision)
			}
			if tc.decision == "" && slices.ContainsFunc(msgs, func(m string) bool { return m == "zero-copy off" || strings.HasPrefix(m, "frame size") }) {
				t.Errorf("decisions %q: want no frame size or zero-copy change", msgs)
			}
		})
	}
}

// TestResolveRefusals: every setting resolve refuses, with an InputError
// whose message names it (xdpfwd's flags spell it the same way).
func TestResolveRefusals(t *testing.T) {
	veth := twoLinks(func(n string) linkInfo { return vethLink(n, 1) })
	mtu := func(m int) []linkInfo {
		return twoLinks(func(n string) linkInfo { l := vethLink(n, 1); l.mtu = m; return l })
	}
	igb := twoLinks(func(n string) linkInfo { return nicLink(n, "igb", 1500, 1, 1) })
	ab := []string{"a", "b"}
	for _, tc := range []struct {
		name  string
		cfg   Config
		links []linkInfo
		want  string
	}{
		{"one link without a handler", Config{Links: []string{"a"}}, veth[:1], "need exactly two links"},
		{"no link with a handler", Config{Handler: HandlerFunc(func([]Packet) {})}, nil, "need 1..64 links (--link flags), got 0"},
		{"a link twice", Config{Links: []string{"a", "a"}}, veth, `link "a" given twice`},
		{"frame size 3000", Config{Links: ab, FrameSize: 3000}, veth, "--frame-size 3000: want 2048 or 4096"},
		{"negative queues", Config{Links: ab, Queues: -1}, veth, "--queues -1: want 0 (auto"},
		{"queues beyond the links'", Config{Links: ab, Queues: 2}, veth, `--queues 2: each worker transmits on a queue of its own, and link "a" has 1 RX and 1 TX queues`},
		{"ring size not a power of two", Config{Links: ab, RingSize: 1000}, veth, "--ring-size 1000: want a power of two, 64..16384"},
		{"ring size too large", Config{Links: ab, RingSize: 32768}, veth, "--ring-size 32768"},
		{"ring size too small", Config{Links: ab, RingSize: 32}, veth, "--ring-size 32"},
		{"batch below a packet's descriptors", Config{Links: ab, Batch: 10}, veth, "batch 10: want 18..ring size"},
		{"batch beyond the ring", Config{Links: ab, Batch: 128, RingSize: 64}, veth, "batch 128"},
		{"frag order 5", Config{Links: ab, FragOrder: 5}, veth, "--frag-order 5: want 3 (32 KiB), 4 (64 KiB), 0 (the default, 4) or off"},
		{"a CPU the process may not use", Config{Links: ab, CPUs: []int{7}}, veth, "cpus [7]"},
		{"max TX frags 19", Config{Links: ab, MaxTxFrags: 19}, veth, "--max-tx-frags 19: want 1..18"},
		{"inline limit 300", Config{Links: ab, InlineMax: 300}, veth, "inline limit 300"},
		{"promisc mode 7", Config{Links: ab, Promisc: 7}, veth, "promisc PromiscMode(7)"},
		{"multi-buffer off, MTU 3000", Config{Links: ab, MultiBufferMode: MultiBufferOff}, mtu(3000), `link "a" MTU 3000 needs frames of at least 3274 bytes`},
		{"MTU beyond 18 frames", Config{Links: ab}, mtu(40000), "needs 23 frames of 2048 bytes per packet; the kernel takes at most 18"},
		{"igb 2048 with zero-copy on", Config{Links: ab, FrameSize: 2048, ZeroCopy: xsk.ZeroCopyOn}, igb, "--frame-size 2048 with --zerocopy on"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := resolve(tc.cfg, tc.links, twoCPUs)
			if err == nil || !IsInputError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("resolve: %v; want an input error containing %q", err, tc.want)
			}
		})
	}
}

// TestResolveLeavesConfig: resolve writes nothing into the Config it is
// given, nor into its slices: the same Config resolves the same way twice.
func TestResolveLeavesConfig(t *testing.T) {
	links := twoLinks(func(n string) linkInfo { return nicLink(n, "igb", 1500, 2, 1) })
	cfg := Config{Links: []string{"a", "b"}, CPUs: []int{1, 0}, Handler: HandlerFunc(func([]Packet) {})}
	before := cfg
	before.Links, before.CPUs = slices.Clone(cfg.Links), slices.Clone(cfg.CPUs)
	p1, err := resolve(cfg, links, twoCPUs)
	if err != nil {
		t.Fatal(err)
	}
	p1.Links[0], p1.CPUs[0] = "x", 9
	p2, err := resolve(cfg, links, twoCPUs)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FrameSize != 0 || cfg.Queues != 0 || cfg.RingSize != 0 || cfg.Batch != 0 ||
		!slices.Equal(cfg.Links, before.Links) || !slices.Equal(cfg.CPUs, before.CPUs) {
		t.Errorf("Config after resolve: %+v, before %+v", cfg, before)
	}
	if p2.FrameSize != 4096 || p2.Queues != 2 || p2.Links[0] != "a" || p2.CPUs[0] != 1 {
		t.Errorf("second resolve: frame %d, queues %d, links %v, CPUs %v; want 4096, 2, [a b], [1 0]", p2.FrameSize, p2.Queues, p2.Links, p2.CPUs)
	}
}

// TestReconfigure: a Config that differs from the one a forwarder runs in
// its live settings (queues, xps, inline limit) is applied; any other
// difference is refused, naming the field, as needing a restart; a live
// change the forwarder cannot take is reported in Failed and changes
// nothing; a Config that does not resolve changes nothing. No root: the
// forwarder is its plan, links and a UMEM.
func TestReconfigure(t *testing.T) {
	links := twoLinks(func(n string) linkInfo { return vethLink(n, 2) })
	start := Config{Links: []string{"a", "b"}, Queues: 1, RingSize: 64, HugePages: umem.HugePagesOff,
		Logger: slog.New(slog.DiscardHandler)}
	host := hostFacts{cpus: []int{0, 1}}
	newFwd := func(t *testing.T, cfg Config) *Forwarder {
		p, err := resolve(cfg, links, host)
		if err != nil {
			t.Fatal(err)
		}
		r, err := umem.New(p.UMEM)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		f := &Forwarder{plan: p, links: links, host: host, doms: []*domain{{region: r}}}
		f.live.inlineMax.Store(int32(p.inlineBytes()))
		f.live.xpsMode.Store(uint32(p.XPS))
		return f
	}
	with := func(mod func(*Config)) Config {
		c := start
		mod(&c)
		return c
	}
	for _, tc := range []struct {
		name             string
		start            Config
		next             Config
		applied, restart []string // fields
		failed, err      string
		inline           int
	}{
		{"the same Config", start, start, nil, nil, "", "", 256},
		{"queues 0 is the default, as at start", start, with(func(c *Config) { c.Queues = 0 }), nil, nil, "", "", 256},
		{"inline limit and xps live", start, with(func(c *Config) { c.InlineMax = 128; c.XPS = xps.ModeHash }), []string{"XPS", "InlineMax"}, nil, "", "", 128},
		{"inline 0 is the default, 256", with(func(c *Config) { c.InlineMax = 100 }), start, []string{"InlineMax"}, nil, "", "", 256},
		{"more queues than workers", start, with(func(c *Config) { c.Queues = 2 }), nil, nil, "queues 2: want 1..1", "", 256},
		{"inline on, started off", with(func(c *Config) { c.InlineMax = InlineOff }), start, nil, nil, "no inline zone; restart", "", 0},
		{"frame size, spin, frag order need a restart", start, with(func(c *Config) {
			c.FrameSize = 4096
			c.Spin = 8
			c.Handler = HandlerFunc(func([]Packet) {})
		}), nil, []string{"Handler", "FrameSize", "Spin", "FragOrder"}, "", "", 256},
		{"a zero that stands for what runs is no change", with(func(c *Config) { c.FrameSize = 2048; c.Batch = 64; c.FragOrder = 4 }), start, nil, nil, "", "", 256},
		{"a Config that does not resolve", start, with(func(c *Config) { c.RingSize = 100; c.InlineMax = 128 }), nil, nil, "", "--ring-size 100", 256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFwd(t, tc.start)
			rc, err := f.Reconfigure(tc.next)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || len(rc.Applied) > 0 {
					t.Errorf("Reconfigure: %v, applied %v; want an error containing %q and nothing applied", err, rc.Applied, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			fields := func(cs []Change) []string {
				var s []string
				for _, c := range cs {
					s = append(s, c.Field)
				}
				return s
			}
			if got := fields(rc.Applied); !slices.Equal(got, tc.applied) {
				t.Errorf("applied %v, want %v", rc.Applied, tc.applied)
			}
			if got := fields(rc.Restart); !slices.Equal(got, tc.restart) {
				t.Errorf("restart %v, want %v", rc.Restart, tc.restart)
			}
			if len(tc.restart) > 0 && (rc.RestartError() == nil || !strings.Contains(rc.RestartError().Error(), tc.restart[0]+" ") || !strings.Contains(rc.RestartError().Error(), "restart")) {
				t.Errorf("RestartError %v: want it to name %s and say a restart is needed", rc.RestartError(), tc.restart[0])
			}
			if tc.failed == "" && rc.Failed != nil || tc.failed != "" && (rc.Failed == nil || !strings.Contains(rc.Failed.Error(), tc.failed)) {
				t.Errorf("failed %v, want %q", rc.Failed, tc.failed)
			}
			if f.InlineBytes() != tc.inline {
				t.Errorf("inline limit %d after, want %d", f.InlineBytes(), tc.inline)
			}
		})
	}
}

// TestBurstRings: with auto ring sizes, a worker's queue of a copy-mode
// link whose ring size gives a fill ring under burstRing gets RX and fill
// rings of burstRing, lending what its ring size gives, and the UMEM a
// burst per worker; a ring size set, a zero-copy NIC, an RX-only queue
// and rings already that large keep the rings of before. A copy-mode
// worker's queue lends its fill ring of what its ring size gives, down to
// lendBatches batches in a flood, and braces with it; a zero-copy one and an
// RX-only one lend their fill ring whole.
func TestBurstRings(t *testing.T) {
	veths := func(n, queues int) []linkInfo {
		var ls []linkInfo
		for i := range n {
			ls = append(ls, vethLink(string(rune('a'+i%26))+strings.Repeat("x", i/26), queues))
		}
		return ls
	}
	names := func(ls []linkInfo) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.name)
		}
		return out
	}
	nic := func(n string) linkInfo { return nicLink(n, "igb", 1500, 1, 1) }
	sw := HandlerFunc(func([]Packet) {}) // a switch: links come and go
	for _, tc := range []struct {
		name  string
		cfg   Config
		links []linkInfo
		q     int
		zc    xsk.ZeroCopy
		burst uint32      // Plan.BurstRing
		want  socketRings // link 0's queue q, opened asking zc
	}{
		{"2 veths alone: 2048-entry rings as before, 16 batches lent in a flood", Config{}, veths(2, 1), 0, xsk.ZeroCopyAuto, 0, socketRings{2048, 2048, 4096, 1024, 4096}},
		{"2 veths, a batch of 32", Config{Batch: 32}, veths(2, 1), 0, xsk.ZeroCopyAuto, 0, socketRings{2048, 2048, 4096, 512, 4096}},
		{"2 veths, a ring size set", Config{RingSize: 4096}, veths(2, 1), 0, xsk.ZeroCopyAuto, 0, socketRings{4096, 4096, 8192, 1024, 8192}},
		{"2 zero-copy NICs: the whole fill ring lent", Config{}, []linkInfo{nic("nic0"), nic("nic1")}, 0, xsk.ZeroCopyAuto, 0, socketRings{2048, 2048, 4096, 4096, 4096}},
		{"64 veths", Config{Handler: sw, MaxLinks: 64}, veths(64, 1), 0, xsk.ZeroCopyAuto, burstRing, socketRings{64, 2048, 2048, 128, 128}},
		{"2 veths of 64", Config{Handler: sw, MaxLinks: 64}, veths(2, 1), 0, xsk.ZeroCopyAuto, burstRing, socketRings{128, 2048, 2048, 256, 256}},
		{"64 veths, ring size set", Config{Handler: sw, MaxLinks: 64, RingSize: 64}, veths(64, 1), 0, xsk.ZeroCopyAuto, 0, socketRings{64, 64, 128, 128, 128}},
		{"an RX-only queue", Config{Handler: sw, MaxLinks: 64, Queues: 1}, veths(64, 2), 1, xsk.ZeroCopyAuto, burstRing, socketRings{64, 64, 64, 64, 64}},
		{"a zero-copy NIC", Config{Handler: sw, MaxLinks: 64}, append([]linkInfo{nic("nic0")}, veths(63, 1)...), 0, xsk.ZeroCopyAuto, burstRing, socketRings{64, 64, 128, 128, 128}},
		{"the NIC bound in copy mode", Config{Handler: sw, MaxLinks: 64}, append([]linkInfo{nic("nic0")}, veths(63, 1)...), 0, xsk.ZeroCopyOff, burstRing, socketRings{64, 2048, 2048, 128, 128}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Links = names(tc.links)
			cfg.HugePages = umem.HugePagesOff
			if cfg.Queues == 0 {
				cfg.Queues = 1
			}
			p, err := resolve(cfg, tc.links, twoCPUs)
			if err != nil {
				t.Fatal(err)
			}
			if p.BurstRing != tc.burst {
				t.Fatalf("BurstRing %d, want %d (ring %d, added %d)", p.BurstRing, tc.burst, p.RingSize, p.AddedRingSize)
			}
			got := p.socketRings(p.RingSize, tc.q, p.copyBound(tc.links[0], tc.zc))
			if got != tc.want {
				t.Errorf("socketRings = %+v, want %+v", got, tc.want)
			}
			// The UMEM sets a burst per worker aside only when a socket
			// gets burst rings.
			q := p
			q.BurstRing = 0
			spare := max(p.MaxLinks-len(tc.links), 0)
			extra := umemConfig(&p, tc.links).Frames - umemConfig(&q, tc.links).Frames
			if want := map[bool]int{true: p.Queues * burstRing}[p.burstsAny(tc.links, spare)]; extra != want {
				t.Errorf("UMEM: %d frames for bursts, want %d", extra, want)
			}
		})
	}
}
