package fwd

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Handing the datapath to a successor process (xdpfwd run --takeover).
// Everything that forwards is a kernel object or memory the kernel holds:
// the UMEM (a memfd: umem.MapSpace), the sockets and their rings, the XDP
// programs held by BPF links and the XSKMAPs they redirect into. A
// successor given their file descriptors forwards on the very rings,
// frames and programs: nothing is attached, registered or bound again,
// and what arrives meanwhile waits on the RX rings.
//
// The predecessor:
//
//   - Legacy: what the successor is built from, and the files, while it
//     forwards;
//   - Freeze: parks its workers at a round boundary with nothing held and
//     nothing in flight on its TX side, and says where every UMEM unit is
//     (Inheritance); from here it touches no ring;
//   - Thaw, if the successor failed: its workers go on where they were;
//   - Abdicate, once the successor took over: Run returns without
//     detaching anything, and Close releases only its own references.
//
// The successor: Adopt (built around the files, touching no ring), then
// Inherit (the units' places, the counters, the rings read where they
// stand), then Run. Between Freeze and Abdicate the predecessor holds
// linkOps.mu, so no link changes under either.

// HandoverVersion is the version of Legacy and Inheritance: a successor
// takes over only from a predecessor of its own version.
const HandoverVersion = 1

// Legacy is what a successor is built from: what fixes the memory and the
// rings (Layout), the links by index (a removed link's hole included),
// and the place, in the files that go with it, of each kernel object.
type Legacy struct {
	Version int           `json:"version"`
	Layout  Layout        `json:"layout"`
	Links   []LegacyLink  `json:"links"`
	UMEM    int           `json:"umem"` // the memfd's file
	Removed []LegacyTotal `json:"removed,omitempty"`
}

// LegacyLink is one link of a Legacy; Name "" is a hole.
type LegacyLink struct {
	Name string `json:"name"`
	Dom  int    `json:"domain"`
	// Ring is its sockets' ring size (RingSize, or AddedRingSize for one
	// added while running): their TX rings', and what their RX and fill
	// rings derive from (Plan.socketRings).
	Ring uint32 `json:"ring"`
	// Burst: its sockets' RX and fill rings are Layout.BurstRing's.
	Burst bool   `json:"burst_rings,omitempty"`
	Mode  string `json:"xdp_mode"`
	VLAN  bool   `json:"vlan"`
	// Program and Sockets are its files: the program's, and one socket's
	// per RX queue.
	Program []int `json:"program"`
	Sockets []int `json:"sockets"`
}

// LegacyTotal is a removed link's totals (Summary's).
type LegacyTotal struct {
	Name   string    `json:"name"` // "": those no longer kept by name
	Links  int       `json:"links,omitempty"`
	Totals LinkStats `json:"totals"`
}

// Layout is what a successor's Plan must share with its predecessor's:
// what sized the UMEM and the rings and set the workers' parts.
type Layout struct {
	MaxLinks         int      `json:"max_links"`
	Queues           int      `json:"queues"`
	RingSize         uint32   `json:"ring_size"`
	AddedRingSize    uint32   `json:"added_ring_size"`
	BurstRing        uint32   `json:"burst_ring"`
	FrameSize        int      `json:"frame_size"`
	MultiBuffer      bool     `json:"multi_buffer"`
	HandoffSize      int      `json:"handoff_size"`
	AddedHandoffSize int      `json:"added_handoff_size"`
	Handler          bool     `json:"handler"`
	Domains          []Domain `json:"domains"`
}

func (p *Plan) layout() Layout {
	return Layout{MaxLinks: p.MaxLinks, Queues: p.Queues, RingSize: p.RingSize, AddedRingSize: p.AddedRingSize, BurstRing: p.BurstRing,
		FrameSize: p.FrameSize, MultiBuffer: p.MultiBuffer, HandoffSize: p.HandoffSize, AddedHandoffSize: p.AddedHandoffSize,
		Handler: p.Handler != nil, Domains: p.Domains}
}

// differs names the fields of l that m does not share.
func (l Layout) differs(m Layout) []string {
	var out []string
	a, b := reflect.ValueOf(l), reflect.ValueOf(m)
	for i := range a.NumField() {
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			out = append(out, a.Type().Field(i).Tag.Get("json"))
		}
	}
	return out
}

// Inheritance is where the predecessor left the datapath at Freeze:
// every unit's place, by domain and zone, and the counters so far, by
// link and queue (the kernel's own go on in its sockets).
type Inheritance struct {
	Units  [][][]umem.State `json:"units"`
	Counts [][]LinkStats    `json:"counts"`
}

// ErrHandover: the forwarder cannot hand over, or take over, as asked.
var ErrHandover = errors.New("handover")

// HandoverEnv is what an Env implements to hand its kernel objects to a
// successor process and to take them over: the kernel's does, as file
// descriptors. A forwarder on an Env without it cannot hand over.
type HandoverEnv interface {
	// ExportProgram is p's kernel objects as files, copies the caller
	// closes, and what else a successor must know of it.
	ExportProgram(p Program) ([]*os.File, error)
	// AdoptProgram takes over the program of link l from files (it owns
	// them from then on), redirecting into its XSKMAP of queues entries,
	// attached in mode, recovering VLAN tags if vlan.
	AdoptProgram(l LinkInfo, queues int, mode string, vlan bool, files []*os.File) (Program, error)
	// ExportSocket is s as a file, a copy the caller closes.
	ExportSocket(s *xsk.Socket) (*os.File, error)
	// AdoptSocket takes over the socket of file f (it owns it from then
	// on), bound on r as cfg says.
	AdoptSocket(r *umem.Region, f *os.File, cfg xsk.Config) (*xsk.Socket, error)
}

// Legacy is what a successor is built from (Adopt), and the files that go
// with it: copies of the forwarder's own, which the caller closes. Call
// it while the forwarder runs, then Freeze; links must not change in
// between (the caller holds them: Freeze refuses if they did).
func (f *Forwarder) Legacy() (Legacy, []*os.File, error) {
	he, ok := f.env.(HandoverEnv)
	if !ok {
		return Legacy{}, nil, fmt.Errorf("%w: this forwarder's environment cannot hand its sockets over", ErrHandover)
	}
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	if f.teardown.torn {
		return Legacy{}, nil, fmt.Errorf("%w: the forwarder is closed", ErrHandover)
	}
	var files []*os.File
	fail := func(err error) (Legacy, []*os.File, error) {
		for _, fl := range files {
			fl.Close()
		}
		return Legacy{}, nil, fmt.Errorf("%w: %w", ErrHandover, err)
	}
	add := func(fl *os.File) int {
		files = append(files, fl)
		return len(files) - 1
	}
	mem, err := dupFile(f.doms[0].region.File())
	if err != nil {
		return fail(err)
	}
	lg := Legacy{Version: HandoverVersion, Layout: f.plan.layout(), UMEM: add(mem)}
	for i, l := range f.links {
		ll := LegacyLink{Name: l.name, Dom: l.dom}
		if l.name != "" {
			pf, err := he.ExportProgram(f.progs[i])
			if err != nil {
				return fail(fmt.Errorf("link %s: %w", l.name, err))
			}
			for _, fl := range pf {
				ll.Program = append(ll.Program, add(fl))
			}
			ll.Mode = f.progs[i].Mode()
			ll.VLAN, _ = f.progs[i].VLAN()
			for _, s := range f.socks[i] {
				fl, err := he.ExportSocket(s)
				if err != nil {
					return fail(fmt.Errorf("link %s: %w", l.name, err))
				}
				ll.Sockets = append(ll.Sockets, add(fl))
			}
			ll.Ring = f.ports[i][0].sock.TX.Size()
			for q, p := range f.ports[i] {
				ll.Burst = ll.Burst || p.sock.Fill.Size() != fillSizeOf(ll.Ring, f.plan.Queues, q)
			}
		}
		lg.Links = append(lg.Links, ll)
	}
	for _, n := range f.linkOps.removed.order {
		lg.Removed = append(lg.Removed, LegacyTotal{Name: n, Totals: f.linkOps.removed.byName[n]})
	}
	if f.linkOps.removed.olderLinks > 0 {
		lg.Removed = append(lg.Removed, LegacyTotal{Links: f.linkOps.removed.olderLinks, Totals: f.linkOps.removed.older})
	}
	return lg, files, nil
}

// dupFile is a copy of f of its own.
func dupFile(f *os.File) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := sc.Control(func(raw uintptr) { fd, derr = unix.FcntlInt(raw, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("dup %s: %w", f.Name(), derr)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// frozen is a forwarder between Freeze and Thaw or Abdicate: its workers
// parked, linkOps.mu held.
type frozen struct {
	resume []func()
}

// freezeSettle bounds how long Freeze waits for the kernel to complete
// what the TX rings hold (a down link never does: the freeze fails).
const freezeSettle = 200 * time.Millisecond

// Freeze parks the workers with nothing held and nothing in flight on the
// TX side, and returns where every unit is and the counters: from here
// the forwarder touches no ring until Thaw (the handover failed) or
// Abdicate (it is done). A forwarder that cannot get there in time (a
// link down holds TX descriptors) is thawed, and says why.
func (f *Forwarder) Freeze(names []string) (Inheritance, error) {
	f.linkOps.mu.Lock()
	if f.handover.freeze != nil {
		f.linkOps.mu.Unlock()
		return Inheritance{}, fmt.Errorf("%w: frozen already", ErrHandover)
	}
	if got := f.Links(); !slices.Equal(got, names) {
		f.linkOps.mu.Unlock()
		return Inheritance{}, fmt.Errorf("%w: the links changed since the legacy was taken (%q, now %q)", ErrHandover, names, got)
	}
	z := &frozen{}
	for _, w := range f.workers {
		z.resume = append(z.resume, w.park())
	}
	f.handover.freeze = z
	// Each worker parked, the caller is it: what is held for ordering
	// and what its lanes hold goes out, and nothing more comes in.
	deadline := time.Now().Add(freezeSettle)
	for _, w := range f.workers {
		w.quiesce(deadline)
	}
	var in Inheritance
	var busy []string
	for _, dm := range f.doms {
		var zones [][]umem.State
		for _, z := range dm.region.Zones() {
			c := z.Counts()
			if c[umem.Held]+c[umem.KernelTX] > 0 {
				busy = append(busy, fmt.Sprintf("%s %s: %d held, %d in flight on TX", dm, z.Name(), c[umem.Held], c[umem.KernelTX]))
			}
			zones = append(zones, z.States())
		}
		in.Units = append(in.Units, zones)
	}
	if len(busy) > 0 {
		f.Thaw()
		return Inheritance{}, fmt.Errorf("%w: the workers did not settle within %v: %v", ErrHandover, freezeSettle, busy)
	}
	in.Counts = f.countsByQueue()
	return in, nil
}

// InheritanceShape is an Inheritance shaped as Freeze's will be (every
// unit Free, the counters as they stand), without freezing: what a
// caller encodes before it freezes (handover.Conn.Prepare) so that
// encoding the real one, frozen, touches no fresh memory.
func (f *Forwarder) InheritanceShape() Inheritance {
	var in Inheritance
	for _, dm := range f.doms {
		var zones [][]umem.State
		for _, z := range dm.region.Zones() {
			zones = append(zones, make([]umem.State, z.Len()))
		}
		in.Units = append(in.Units, zones)
	}
	in.Counts = f.countsByQueue()
	return in
}

// countsByQueue is each link's counters by RX queue, as a successor
// takes them on (Inheritance.Counts).
func (f *Forwarder) countsByQueue() [][]LinkStats {
	f.teardown.mu.RLock()
	defer f.teardown.mu.RUnlock()
	var counts [][]LinkStats
	for i := range f.ports {
		var qs []LinkStats
		for q := range f.ports[i] {
			qs = append(qs, f.userStats(i, q))
		}
		counts = append(counts, qs)
	}
	return counts
}

// Thaw lets a frozen forwarder go on: the handover failed.
func (f *Forwarder) Thaw() {
	z := f.handover.freeze
	if z == nil {
		return
	}
	f.handover.freeze = nil
	for _, r := range z.resume {
		r()
	}
	f.linkOps.mu.Unlock()
}

// Abdicate ends a frozen forwarder whose successor took over: its workers
// stop without reading another packet, Run returns, and Close releases
// this process's references and nothing of the kernel's (no program
// detached, no socket taken out of its XSKMAP: they are the successor's).
func (f *Forwarder) Abdicate() error {
	z := f.handover.freeze
	if z == nil {
		return fmt.Errorf("%w: not frozen", ErrHandover)
	}
	f.handover.handedOver.Store(true)
	f.stop.Store(true)
	f.handover.freeze = nil
	for _, r := range z.resume {
		r()
	}
	close(f.handover.abdicated)
	f.linkOps.mu.Unlock()
	return nil
}

// InheritedWaiting is how many frames waited on the RX rings when Inherit
// took them: those that arrived while the predecessor was frozen, which
// the successor forwards first.
func (f *Forwarder) InheritedWaiting() uint64 { return f.handover.inheritedWaiting }

// HandedOver reports whether the forwarder abdicated to a successor.
func (f *Forwarder) HandedOver() bool { return f.handover.handedOver.Load() }

// quiesce sends what w holds for ordering and waits, up to deadline, for
// the kernel to complete what its lanes hold; it reads no RX ring. The
// caller is w: w is parked.
func (w *worker) quiesce(deadline time.Time) {
	was := w.flows.draining
	w.flows.draining = true
	var more func() bool
	if w.flows.order != nil {
		more = func() bool {
			m, held := w.merge()
			return m > 0 || held > 0
		}
	}
	w.settle(w.lanes.own, more, deadline, 200*time.Microsecond)
	w.flows.draining = was
	w.umems.publish()
}

// userStats is link i queue q's counters this process keeps (queueStats
// without the kernel's, which its socket keeps). teardown.mu is held.
func (f *Forwarder) userStats(i, q int) LinkStats {
	l := f.queueStats(i, q)
	for _, k := range KernelDrops {
		delete(l.Drops, k)
	}
	return l
}

// seed adds l, a predecessor's counters of p (userStats), to p's.
func (p *port) seed(l LinkStats) {
	for c, fn := range linkCounts {
		if fn != nil {
			p.stats.n[c].Add(*fn(&l))
		}
	}
	for r, d := range drops {
		if d.name != "" {
			p.stats.n[cDrops+count(r)].Add(l.Drops[d.name])
		}
	}
	// rx_bad_descs is the RX ring's and the completions'; the sum is
	// what shows.
	p.stats.n[cBadCompletions].Add(l.Drops[DropRXBadDesc])
	p.rx.TooLong.Add(l.Drops[DropRXTooLong])
	p.rx.FillShort.Add(l.Drops[DropUMEMExhausted])
	p.rx.FillWakeups.Add(l.FillWakeups)
	p.rx.LendGrew.Add(l.RXLendGrowths)
	if p.tx != nil {
		p.tx.seedKicks(l.TXKicks, l.KickErrors)
	}
	for b, name := range BatchBucketNames {
		p.stats.batchHist[b].Add(l.RXBatchPackets[name])
	}
	for path := range linearize.NumPaths {
		p.stats.txPaths[path].Add(l.TXPaths[path.String()])
	}
	for k := 1; k < len(p.stats.descHist); k++ {
		p.stats.descHist[k].Add(l.DescsPerPacket[fmt.Sprint(k)])
	}
}

// adoption is what Adopt builds a forwarder from.
type adoption struct {
	legacy Legacy
	files  []*os.File
	env    HandoverEnv
}

// file takes file i out of the adoption: its taker owns it.
func (a *adoption) file(i int) (*os.File, error) {
	if i < 0 || i >= len(a.files) || a.files[i] == nil {
		return nil, fmt.Errorf("%w: file %d: none, or taken", ErrHandover, i)
	}
	fl := a.files[i]
	a.files[i] = nil
	return fl, nil
}

// close closes the files nothing took.
func (a *adoption) close() {
	for i, fl := range a.files {
		if fl != nil {
			fl.Close()
			a.files[i] = nil
		}
	}
}

// Adopt builds a forwarder around the kernel objects of a predecessor
// (Legacy, and its files, which Adopt owns from then on): config is the
// successor's own, which must resolve to the predecessor's layout (else
// ErrHandover, naming what differs). It touches no ring: the predecessor
// may still forward until it freezes. Then Inherit, then Run.
func Adopt(config Config, l Legacy, files []*os.File) (*Forwarder, error) {
	a := &adoption{legacy: l, files: files}
	defer a.close()
	if l.Version != HandoverVersion {
		return nil, fmt.Errorf("%w: the predecessor's version is %d, this forwarder's %d", ErrHandover, l.Version, HandoverVersion)
	}
	env := config.Env
	if env == nil {
		env = kernel{}
	}
	he, ok := env.(HandoverEnv)
	if !ok {
		return nil, fmt.Errorf("%w: this forwarder's environment cannot take sockets over", ErrHandover)
	}
	a.env = he
	return build(config, a)
}

// links are the predecessor's links, looked up, after a check that cfg,
// the successor's plan, shares its layout.
func (a *adoption) links(env Env, cfg *Plan) ([]linkInfo, error) {
	if d := a.legacy.Layout.differs(cfg.layout()); len(d) > 0 {
		return nil, fmt.Errorf("%w: the settings differ from the running forwarder's in %v: a restart, not a handover, changes them", ErrHandover, d)
	}
	var links []linkInfo
	for _, ll := range a.legacy.Links {
		if ll.Name == "" {
			links = append(links, linkInfo{})
			continue
		}
		found, err := lookupLinks(env, []string{ll.Name})
		if err != nil {
			return nil, fmt.Errorf("%w: link %s: %w", ErrHandover, ll.Name, err)
		}
		l := found[0]
		l.dom = ll.Dom
		if l.rxQueues != len(ll.Sockets) {
			return nil, fmt.Errorf("%w: link %s has %d RX queues, the predecessor's sockets %d", ErrHandover, ll.Name, l.rxQueues, len(ll.Sockets))
		}
		links = append(links, l)
	}
	return links, nil
}

// build maps the UMEM and takes over the programs and sockets (make's
// counterpart).
func (a *adoption) build(f *Forwarder) error {
	mem, err := a.file(a.legacy.UMEM)
	if err != nil {
		return err
	}
	cfgs := make([]umem.Config, len(f.plan.Domains))
	for d, dm := range f.plan.Domains {
		cfgs[d] = dm.UMEM
	}
	// A MiB at a time, 100 µs apart: a few ms of a CPU spread over ten
	// times that, while the predecessor forwards.
	regions, err := umem.MapSpace(mem, 100*time.Microsecond, cfgs...)
	if err != nil {
		mem.Close()
		return fmt.Errorf("%w: %w", ErrHandover, err)
	}
	for d, dm := range f.plan.Domains {
		f.doms = append(f.doms, &domain{Domain: dm, region: regions[d]})
	}
	for i, ll := range a.legacy.Links {
		if ll.Name == "" {
			continue
		}
		if err := a.adoptLink(f, i, ll); err != nil {
			return fmt.Errorf("%w: link %s: %w", ErrHandover, ll.Name, err)
		}
	}
	for d, dm := range f.doms {
		if owner := f.umemOwner(d); owner != nil {
			dm.zeroCopy = owner.ZeroCopy()
		}
	}
	for _, t := range a.legacy.Removed {
		if t.Name == "" {
			f.linkOps.removed.older, f.linkOps.removed.olderLinks = t.Totals, t.Links
			continue
		}
		f.linkOps.removed.add(t.Name, t.Totals)
	}
	return nil
}

// adoptLink takes over link i's program and sockets.
func (a *adoption) adoptLink(f *Forwarder, i int, ll LegacyLink) error {
	l := f.links[i]
	var pf []*os.File
	for _, k := range ll.Program {
		fl, err := a.file(k)
		if err != nil {
			return err
		}
		pf = append(pf, fl)
	}
	p, err := a.env.AdoptProgram(l.info(), l.rxQueues, ll.Mode, ll.VLAN, pf)
	if err != nil {
		return err
	}
	f.progs[i] = p
	region := f.doms[l.dom].region
	f.socks[i] = make([]*xsk.Socket, len(ll.Sockets))
	for q, k := range ll.Sockets {
		fl, err := a.file(k)
		if err != nil {
			return err
		}
		r := f.plan.socketRings(ll.Ring, q, ll.Burst)
		s, err := a.env.AdoptSocket(region, fl, xsk.Config{Ifname: l.name, Ifindex: l.index, Queue: q,
			RingSize: r.tx, RXSize: r.rx, FillSize: r.fill})
		if err != nil {
			return err
		}
		f.socks[i][q] = s
	}
	return nil
}

// observe tells the Handler of every link, as AddLink does of one: its
// per-link state (modes.Switch's port security, by name) is on before the
// first packet.
func (a *adoption) observe(f *Forwarder) {
	for i, l := range f.links {
		if l.name == "" {
			continue
		}
		if o, ok := f.handler.(LinkNameObserver); ok {
			o.LinkAddedAs(i, l.name)
		} else if o, ok := f.handler.(LinkObserver); ok {
			o.LinkAdded(i)
		}
	}
}

// Inherit takes the datapath as the predecessor left it at Freeze: every
// unit where it was, the counters so far, each ring read where it stands
// now. Call it once the predecessor froze, before Run; it only reads what
// is shared, so a handover that fails after it leaves the predecessor's
// rings as they were.
func (f *Forwarder) Inherit(in Inheritance) error {
	if len(in.Units) != len(f.doms) {
		return fmt.Errorf("%w: units of %d domains, this forwarder has %d", ErrHandover, len(in.Units), len(f.doms))
	}
	for d, dm := range f.doms {
		zs := dm.region.Zones()
		if len(in.Units[d]) != len(zs) {
			return fmt.Errorf("%w: %s: %d zones, want %d", ErrHandover, dm, len(in.Units[d]), len(zs))
		}
		for k, z := range zs {
			if err := z.Restore(in.Units[d][k]); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrHandover, dm, err)
			}
		}
	}
	f.handover.inheritedWaiting = 0
	for i := range f.ports {
		for q, p := range f.ports[i] {
			p.sock.Resync()
			f.handover.inheritedWaiting += uint64(p.sock.RX.Queued())
			if i < len(in.Counts) && q < len(in.Counts[i]) {
				p.seed(in.Counts[i][q])
			}
		}
	}
	// Nothing here writes what the kernel or the predecessor shares
	// (rings, UMEM, maps): until Run, the predecessor may still thaw.
	// Run's first round tops the fill rings up.
	return nil
}
