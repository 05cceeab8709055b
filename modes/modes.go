// Package modes holds xdpfwd's built-in forwarding modes, each a
// fwd.Handler like any a user writes: Reflect (send every frame back with
// its MAC addresses swapped), FiveTupleSwap (back with MAC and IP
// addresses and TCP/UDP ports swapped), MAC (out with the link's and a
// peer's MAC addresses), Sink (count and drop) and Switch (a learning L2
// switch over any number of links). Cross-connect, the default, is the
// engine's own path (a nil Handler).
//
// Handlers are called by several workers at once; the ones here keep no
// per-call state, and Switch's table and FiveTupleSwap's counters are
// safe for concurrent use. None
// allocates per packet.
package modes

import (
	"fmt"
	"iter"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/enum"
)

// Reflect sends every frame back out of the link and queue it came in on,
// with its destination and source MAC addresses swapped: the reflector a
// traffic generator points at (DPDK testpmd's macswap, xdpsock's l2fwd).
var Reflect fwd.Handler = fwd.HandlerFunc(func(pkts []fwd.Packet) {
	for i := range pkts {
		fwd.SwapMACs(pkts[i].Data)
		pkts[i].Reflect()
	}
})

// Sink drops every frame; the forwarder's per-queue RX counters are what
// it reports (testpmd's rxonly, xdpsock's rxdrop). It needs no
// promiscuous mode (fwd.PromiscHandler): what it counts is what reaches
// the link's own MAC, as on a receiver.
var Sink fwd.Handler = sink{}

type sink struct{}

func (sink) Handle(pkts []fwd.Packet) {
	for i := range pkts {
		pkts[i].Drop()
	}
}

// Promiscuous is false: a sink counts what is addressed to its link.
func (sink) Promiscuous() bool { return false }

// Switch is a learning L2 switch across the forwarder's links: it learns
// which link each source MAC address (per VLAN) lives behind, forwards a
// frame to the one link its destination is known on, and floods
// broadcast, multicast and unknown unicast frames to every other link.
// Like a bridge without STP, it needs a loop-free topology: a loop would
// flood frames round it for ever. An address that shows up on another link
// is relearned there and counted (Stats().Moves: MAC flaps). A link given
// port security (SecurePort) sends only from its own address, which no
// other link takes over (portsec.go); one given bandwidth limits
// (LimitPort) is policed to them both ways (bandwidth.go).
type Switch struct {
	Table *fdb.Table
	// links is how many links it floods to: as many as it was made
	// for, more once links are added (LinkAdded). The forwarder leaves
	// out of a flood the links it no longer has.
	links atomic.Int32
	now   func() int64

	// guards are the links' port security (portsec.go), nil for a link
	// without: read per frame, written when a link is added or secured.
	guards [fwd.MaxLinks]atomic.Pointer[guard]
	// limiters are the links' bandwidth limits (bandwidth.go), nil for
	// a link without: read per frame, written as guards are (s.mu held);
	// policed counts those not nil, read per batch, and ingress is the
	// set (a fwd.LinkSet) of those with an ingress limit, which a flood
	// charges, read per batch when policed.
	limiters [fwd.MaxLinks]atomic.Pointer[policer]
	policed  atomic.Int32
	ingress  atomic.Uint64
	// mu guards ports, the port security given by link name, holds,
	// what became of their addresses (portsec.go), limits, the bandwidth
	// limits given by link name, and names, the names of the links added
	// (LinkAddedAs) by index.
	mu     sync.Mutex
	ports  map[string]Port
	holds  map[string]hold
	limits map[string]Limits
	names  [fwd.MaxLinks]string
	// provisional is, per link, until when (s.now) its port's pin of an
	// address it took over is provisional (portsec.go), 0 for none:
	// read per conflicting frame, written under mu. age is the table's
	// entry age, the time a takeover stays provisional.
	provisional [fwd.MaxLinks]atomic.Int64
	age         int64
	events      chan PortEvent

	// VLAN networks (vlan.go): vports are the links' VLANs, nil for a
	// port of every VLAN, read per frame; vlanned is the set of links
	// with VLANs, read per batch; vmembers, per VLAN, the set of them in
	// it, and vuntagged those that receive it untagged (its access
	// ports), read per flood and per forward. All written under mu, as
	// vlans, the VLANs given by link name.
	vports    [fwd.MaxLinks]atomic.Pointer[vlanPort]
	vlanned   atomic.Uint64
	vmembers  [vlanIDs]atomic.Uint64
	vuntagged [vlanIDs]atomic.Uint64
	vlans     map[string]VLANs
}

// NewSwitch returns a switch over links links whose table holds size
// entries (0: fdb.DefaultSize; at most fdb.MaxSize) that expire age after
// last seen (0: 300 s).
func NewSwitch(links, size int, age time.Duration) *Switch {
	if size <= 0 {
		size = fdb.DefaultSize
	}
	if age <= 0 {
		age = 300 * time.Second
	}
	s := &Switch{Table: fdb.New(size, age), now: monotonic, age: int64(age), events: make(chan PortEvent, 64),
		ports: map[string]Port{}, holds: map[string]hold{}, vlans: map[string]VLANs{}}
	s.links.Store(int32(links))
	return s
}

// LinkAdded implements fwd.LinkObserver: link i is flooded to.
func (s *Switch) LinkAdded(i int) {
	for {
		n := s.links.Load()
		if int(n) > i || s.links.CompareAndSwap(n, int32(i+1)) {
			return
		}
	}
}

// LinkRemoved implements fwd.LinkObserver: the addresses learned (or
// pinned) on link i are forgotten, so that frames for them are flooded
// until they are learned again where they went, and none is sent to a
// link given index i later.
//
// A secured link's guard goes with it: the index is unsecured until a
// link added at it says otherwise (LinkAddedAs).
func (s *Switch) LinkRemoved(i int) {
	s.mu.Lock()
	s.guards[i].Store(nil)
	s.provisional[i].Store(0)
	s.setLimiter(i, nil)
	s.names[i] = ""
	s.applyVLANs(i, "")
	s.mu.Unlock()
	s.Table.Forget(i)
}

// Every link a frame arrives on fits in a table entry.
var _ [fdb.MaxLinks - fwd.MaxLinks]struct{}

var start = time.Now()

// monotonic is a monotonic clock in ns, from the process's start.
func monotonic() int64 { return int64(time.Since(start)) }

// Now is the switch's clock, for fdb.Table.Entries.
func (s *Switch) Now() int64 { return s.now() }

// Entries lists the table's live entries, by VLAN and MAC.
func (s *Switch) Entries() []fdb.Entry { return s.Table.Entries(s.now()) }

// All yields the table's live entries in table order (fdb.Table.All).
func (s *Switch) All() iter.Seq[fdb.Entry] { return s.Table.All(s.now()) }

// Len is the number of live entries, counted without listing them.
func (s *Switch) Len() int { return s.Table.Len(s.now()) }

// Stats returns the table's counters.
func (s *Switch) Stats() fdb.Stats { return s.Table.Stats() }

// Handle implements fwd.Handler.
func (s *Switch) Handle(pkts []fwd.Packet) {
	now := s.now() // one clock read per batch
	all := fwd.AllLinks(int(s.links.Load()))
	policed := s.policed.Load() != 0 // any link limited (bandwidth.go)
	var limited fwd.LinkSet          // the links a flood is charged to
	if policed {
		limited = fwd.LinkSet(s.ingress.Load())
	}
	vlanned := fwd.LinkSet(s.vlanned.Load()) // the links with VLANs (vlan.go)
	for i := range pkts {
		p := &pkts[i]
		f := p.Data
		if len(f) < 14 {
			p.Drop()
			continue
		}
		vlan := vlanOf(f)
		in := uint(p.Link) % fwd.MaxLinks
		if vlanned != 0 {
			if vp := s.vports[in].Load(); vp != nil {
				var c fwd.DropCause
				if vlan, c = vp.classify(f); c != 0 {
					p.DropFor(c)
					continue
				}
			}
		}
		src := fdb.Key(f[6:12], vlan)
		if g := s.guards[in].Load(); g != nil {
			// A secured port: its own address, pinned, and nothing
			// else (portsec.go).
			if c := g.verdict(f, src); c != 0 {
				p.DropFor(c)
				continue
			}
		} else if f[6]&1 == 0 && s.Table.Learn(src, p.Link, now) == fdb.Conflict {
			// (A multicast source is invalid: never learned.) An
			// address static elsewhere: a port's that took it over?
			s.heardElsewhere(src, p.Link, now)
		}
		// The pod's egress (bandwidth.go): charged once its frame is
		// known to be its own.
		if policed && !s.admitOut(in, p.Len, now) {
			p.DropFor(fwd.CauseRateLimited)
			continue
		}
		out := all // the links of its VLAN
		if vlanned != 0 {
			out = s.inVLAN(p, vlan, all, vlanned)
		}
		if f[0]&1 != 0 { // broadcast and multicast
			if limited == 0 {
				p.Flood(out)
			} else {
				s.flood(p, out, limited, now)
			}
			continue
		}
		link, ok := s.Table.Lookup(fdb.Key(f[0:6], vlan), now)
		switch {
		case !ok, vlanned != 0 && !out.Has(link): // (a static entry outside its VLAN: unknown there)
			s.flood(p, out, limited, now) // unknown unicast
		case link == p.Link:
			p.Drop() // for the segment it came from: a bridge filters it
		default:
			// The output pod's ingress (bandwidth.go).
			if policed && !s.admitIn(uint(link)%fwd.MaxLinks, p.Len, now) {
				p.DropOut(fwd.CauseRateLimited, link)
				continue
			}
			p.Forward(link)
		}
	}
}

// flood floods p to the links of all, charged first to the ingress of
// each link of limited it goes to (bandwidth.go): those over their rate
// are left out, the drop counted on each (tx_rate_limited).
func (s *Switch) flood(p *fwd.Packet, all, limited fwd.LinkSet, now int64) {
	var over fwd.LinkSet
	for l := limited & all &^ (1 << (uint(p.Link) % fwd.MaxLinks)); l != 0; l &= l - 1 {
		i := uint(bits.TrailingZeros64(uint64(l)))
		if !s.admitIn(i, p.Len, now) {
			over |= 1 << i
		}
	}
	if over != 0 {
		p.FloodDropOut(all, fwd.CauseRateLimited, over)
		return
	}
	p.Flood(all)
}

// inVLAN is the links of all in VLAN vlan, with VLANs given to some
// (vlanned): those without, and those with that VLAN; and p is put in it
// (fwd.Packet.SetVLAN), for the forwarder to tag it per link. A unicast frame's link, learned in
// its VLAN, is one of them.
func (s *Switch) inVLAN(p *fwd.Packet, vlan uint16, all, vlanned fwd.LinkSet) fwd.LinkSet {
	p.SetVLAN(vlan) // (0: none)
	return all&^vlanned | all&fwd.LinkSet(s.vmembers[vlan].Load())
}

// Mode names a built-in mode.
type Mode int

const (
	XConnect Mode = iota // the default: two links, each frame out of the other
	SwitchMode
	ReflectMode
	SinkMode
	FiveTupleSwapMode // testpmd's 5tswap: addresses and ports swapped, back out
	MACMode           // testpmd's mac: MACs set to the link's and the peer's
	// TxOnlyMode is the traffic generator (package gen): no Handler, it
	// receives nothing.
	TxOnlyMode
)

var modeNames = enum.New[Mode]("mode", "xconnect", "switch", "reflect", "sink", "5tswap", "mac", "txonly")

func (m Mode) String() string { return modeNames.String(m) }

// ParseMode parses a mode's name: "xconnect", "switch", "reflect",
// "sink", "5tswap", "mac" or "txonly".
func ParseMode(s string) (Mode, error) {
	if m, ok := modeNames.Parse(s); ok {
		return m, nil
	}
	return 0, fmt.Errorf("mode %q: want %s", s, modeNames.Want())
}

// Links says how many links a mode takes: the least and the most.
func (m Mode) Links() (min, max int) {
	switch m {
	case XConnect:
		return 2, 2
	case SwitchMode:
		return 2, fwd.MaxLinks
	}
	return 1, fwd.MaxLinks
}
