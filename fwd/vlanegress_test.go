package fwd_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// vlanHandler is a VLANHandler whose link 1 takes every VLAN untagged.
type vlanHandler func(pkts []fwd.Packet)

func (h vlanHandler) Handle(pkts []fwd.Packet)      { h(pkts) }
func (vlanHandler) Untagged(vid uint16) fwd.LinkSet { return fwd.LinkSet(0).Add(1) }

// TestFakeVLANEgress: a handler's SetVLAN makes each link of a flood, and
// a forward's one link, get the frame with an outer 802.1Q tag of the
// VLAN or without one, whatever tag the frame came with: pushed, its VID
// rewritten (its priority kept) or popped, per link, byte for byte; a
// frame whose outer tag is 802.1ad gets a tag pushed in front of it.
// Small frames (inline copies) and large ones (the frame itself on the
// last link), with one queue and with two (the flow table reads the
// arrival stamp a push or pop moves).
func TestFakeVLANEgress(t *testing.T) {
	const vid = 100
	tag := func(tpid, tci uint16) []byte { return []byte{byte(tpid >> 8), byte(tpid), byte(tci >> 8), byte(tci)} }
	for _, queues := range []int{1, 2} {
		for _, size := range []int{120, 1400} {
			t.Run(fmt.Sprintf("queues=%d/size=%d", queues, size), func(t *testing.T) {
				// Link 0 floods to 1, 2 and 3, 1 untagged (an access
				// port); it forwards to 1 alone when the source port is
				// 9, to 2 alone when it is 10.
				h := vlanHandler(func(pkts []fwd.Packet) {
					for i := range pkts {
						p := &pkts[i]
						switch p.Data[len(p.Data)-1] {
						case 9:
							p.Forward(1)
						case 10:
							p.Forward(2)
						default:
							p.Flood(fwd.AllLinks(4))
						}
						p.SetVLAN(vid)
					}
				})
				opts := fwdtest.LinkOptions{Queues: queues}
				r := startFake(t, fwd.Config{Handler: h, Queues: queues}, opts, opts, opts, opts)
				base := seqFrame(macB, macA, 1, 0, size)
				macs, rest := base[:12], base[12:]
				untagged := slices.Concat(macs, rest)
				tagged := slices.Concat(macs, tag(0x8100, vid), rest)
				for _, c := range []struct {
					name string
					in   []byte
					last byte // 9: forward to 1, 10: to 2, else flood
					want map[int][]byte
				}{
					{"untagged flood", untagged, 0, map[int][]byte{1: untagged, 2: tagged, 3: tagged}},
					{"tagged flood", slices.Concat(macs, tag(0x8100, vid), rest), 0, map[int][]byte{1: untagged, 2: tagged, 3: tagged}},
					{"other VID rewritten", slices.Concat(macs, tag(0x8100, 0xa000|7), rest), 0,
						map[int][]byte{1: untagged, 2: slices.Concat(macs, tag(0x8100, 0xa000|vid), rest), 3: slices.Concat(macs, tag(0x8100, 0xa000|vid), rest)}},
					{"priority tag", slices.Concat(macs, tag(0x8100, 0x6000), rest), 0,
						map[int][]byte{1: untagged, 2: slices.Concat(macs, tag(0x8100, 0x6000|vid), rest), 3: slices.Concat(macs, tag(0x8100, 0x6000|vid), rest)}},
					{"802.1ad outer", slices.Concat(macs, tag(0x88a8, 5), rest), 0,
						map[int][]byte{1: slices.Concat(macs, tag(0x88a8, 5), rest), 2: slices.Concat(macs, tag(0x8100, vid), tag(0x88a8, 5), rest), 3: slices.Concat(macs, tag(0x8100, vid), tag(0x88a8, 5), rest)}},
					{"forward popped", tagged, 9, map[int][]byte{1: untagged}},
					{"forward pushed", untagged, 10, map[int][]byte{2: tagged}},
				} {
					f := slices.Clone(c.in)
					f[len(f)-1] = c.last
					r.inject(0, 0, f, fwdtest.RX{})
					r.env.Advance(time.Millisecond) // past the merge's watermark (two queues)
					for o := 1; o < 4; o++ {
						want, ok := c.want[o]
						n := 0
						if ok {
							n = 1
						}
						got := r.links[o].CollectN(n, 5*time.Second)
						if len(got) != n {
							t.Fatalf("%s: %d frames out of link %d, want %d", c.name, len(got), o, n)
						}
						if n == 0 {
							continue
						}
						want = slices.Clone(want)
						want[len(want)-1] = c.last
						if !bytes.Equal(got[0].Data, want) {
							t.Errorf("%s: link %d sent % x… (%d bytes), want % x… (%d bytes)", c.name, o, got[0].Data[:22], len(got[0].Data), want[:22], len(want))
						}
					}
				}
				if d := r.f.LinkStats(1).Drops; d[fwd.DropTXNoRoom] != 0 {
					t.Errorf("tx_no_layout drops: %v", d)
				}
			})
		}
	}
}
