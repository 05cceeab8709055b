// Package fwdtest plays, in memory, everything a fwd.Forwarder is built from
// and runs on (fwd.Env): links with RX and TX queues, xdpfwd's XDP program
// on each, AF_XDP sockets whose rings are ordinary memory (package
// xsktest), promiscuous membership, the capabilities, the link monitor's
// events and the clock of the arrival stamps. A test builds an Env, adds
// links, sets Config.Env and runs a whole forwarder without root, then
// drives the wire: Inject plays a frame arriving on a link's RX queue (the
// driver takes a fill address, copies the frame into the UMEM with the
// program's metadata in front, produces an RX descriptor and publishes it),
// Collect plays the link transmitting (takes the TX descriptors, copies
// the frames out, produces the completions). It is to fwd what
// wireguard-go's bindtest and tuntest are to its device.
//
// # Concurrency
//
// Every method of Env, Link and Program is safe for concurrent use. Each
// socket's kernel side — its fill and RX rings' consumer and producer, its
// TX and completion rings' — is guarded by a mutex of its own: Inject,
// Collect and a kick made by the forwarder's worker (which transmits on the
// spot while the link's need_wakeup is set, as copy mode's sendto does)
// take it in turn, while the worker uses the user side of the same rings
// concurrently, through the rings' atomic indices. The clock is the test's:
// it moves only by Advance.
package fwdtest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// Start is where the clock starts, in ns: far enough from 0 that no stamp
// passes for "none".
const Start = int64(10 * time.Second)

// Headroom is where the fake driver puts a received frame in its UMEM
// frame, as the kernel does in copy mode (XDP_PACKET_HEADROOM).
const Headroom = unix.XDP_PACKET_HEADROOM

// ringStart is every fake ring's first index: just short of 2^32, so that
// the indices wrap within a test.
const ringStart = 0xFFFFFFF0

// Env is a fake fwd.Env. The zero value is not usable: call New.
type Env struct {
	// Caps is what CheckCapabilities returns: nil, every capability.
	Caps error

	now atomic.Int64

	mu       sync.Mutex
	links    []*Link // by ifindex-1
	socks    map[*xsk.Socket]*sock
	watchers []*watcher
}

// New returns an environment without links, its clock at Start.
func New() *Env {
	e := &Env{socks: map[*xsk.Socket]*sock{}}
	e.now.Store(Start)
	return e
}

// LinkOptions describe a fake link. Zero values: 1 queue, MTU 1500, native
// mode with VLAN recovery.
type LinkOptions struct {
	// Queues sets the RX and TX queue counts both; RXQueues and TXQueues,
	// if set, each one.
	Queues, RXQueues, TXQueues int
	MTU                        int
	Driver                     string
	Veth                       bool
	// ZeroCopy is what the link reports of AF_XDP zero-copy. A socket
	// asking for zero-copy (auto or on) that registers its UMEM binds in
	// zero-copy mode on a link that reports it; one sharing a UMEM binds
	// in the mode of the socket it shares it with, and, as the kernel's
	// xp_assign_dev_shared, fails when that is zero-copy and the link
	// does not report it.
	ZeroCopy xsk.ZeroCopyFeatures
	// Generic: the program runs in generic mode (no last stamps, no VLAN
	// recovery); NativeRefused is what auto mode reports it fell back for.
	Generic       bool
	NativeRefused error
	// NoVLAN: the program recovers no VLAN tags (VLAN reports false).
	NoVLAN bool
	// Foreign: the link carries a program that is not xdpfwd's; Attach
	// refuses it unless forced.
	Foreign bool
}

// AddLink adds a link, up, with the next ifindex.
func (e *Env) AddLink(name string, o LinkOptions) *Link {
	rx, tx := max(o.Queues, 1), max(o.Queues, 1)
	if o.RXQueues > 0 {
		rx = o.RXQueues
	}
	if o.TXQueues > 0 {
		tx = o.TXQueues
	}
	if o.MTU == 0 {
		o.MTU = 1500
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	l := &Link{env: e, name: name, index: len(e.links) + 1, opt: o, rxq: rx, txq: tx, mtu: o.MTU, up: true}
	e.links = append(e.links, l)
	return l
}

// LinkNamed returns the link named name, nil if there is none.
func (e *Env) LinkNamed(name string) *Link {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.byName(name)
}

func (e *Env) byName(name string) *Link {
	for _, l := range e.links {
		if l.name == name && !l.gone {
			return l
		}
	}
	return nil
}

func (e *Env) byIndex(i int) *Link {
	if i < 1 || i > len(e.links) || e.links[i-1].gone {
		return nil
	}
	return e.links[i-1]
}

// Now is the fake clock, in ns; Advance moves it.
func (e *Env) Now() int64 { return e.now.Load() }

// Advance moves the clock on by d.
func (e *Env) Advance(d time.Duration) { e.now.Add(int64(d)) }

// CheckCapabilities returns Caps.
func (e *Env) CheckCapabilities() error { return e.Caps }

// Link implements fwd.Env.
func (e *Env) Link(name string) (fwd.LinkInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.byName(name)
	if l == nil {
		return fwd.LinkInfo{}, &fwd.InputError{Err: fmt.Errorf("%w %q", fwd.ErrUnknownLink, name)}
	}
	return l.infoLocked(), nil
}

// Attach implements fwd.Env.
func (e *Env) Attach(li fwd.LinkInfo, cfg xsk.AttachConfig) (fwd.Program, error) {
	mode, force := cfg.Mode, cfg.Force
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.byIndex(li.Index)
	if l == nil {
		return nil, fmt.Errorf("xdp %s: attach: %w", li.Name, unix.ENODEV)
	}
	if l.opt.Foreign && !force {
		return nil, fmt.Errorf("xdp %s: %w", li.Name, xsk.ErrForeignProgram)
	}
	if l.prog != nil && !l.prog.closed {
		return nil, fmt.Errorf("xdp %s: %w (xdpfwd's, attached already)", li.Name, xsk.ErrForeignProgram)
	}
	p := &Program{link: l, mode: "native", regs: make([]*xsk.Socket, l.rxq), noStamps: cfg.NoStamps}
	switch {
	case mode == xsk.XDPGeneric || l.opt.Generic && mode != xsk.XDPNative:
		p.mode = "generic"
		p.nativeErr = l.opt.NativeRefused
	case l.opt.Generic:
		return nil, fmt.Errorf("xdp %s: attach: native: %w", li.Name, unix.EOPNOTSUPP)
	case !cfg.NoStamps:
		p.stamps = xsk.NewMemLastStamps(l.rxq)
	}
	l.prog = p
	return p, nil
}

// Open implements fwd.Env: a socket whose rings are xsktest's, its kicks
// and fill wake-ups played by the link.
func (e *Env) Open(r *umem.Region, cfg xsk.Config) (*xsk.Socket, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.byIndex(cfg.Ifindex)
	switch {
	case l == nil:
		return nil, fmt.Errorf("xsk %s queue %d: bind: %w", cfg.Ifname, cfg.Queue, unix.ENODEV)
	case cfg.Queue < 0 || cfg.Queue >= l.rxq:
		return nil, fmt.Errorf("xsk %s queue %d: bind: %w", cfg.Ifname, cfg.Queue, unix.EINVAL)
	}
	zcLink := l.opt.ZeroCopy.Known && l.opt.ZeroCopy.ZeroCopy
	zc := zcLink && cfg.ZeroCopy != xsk.ZeroCopyOff
	if cfg.Shared != nil {
		zc = cfg.Shared.ZeroCopy()
	}
	switch {
	case cfg.Shared == nil && cfg.ZeroCopy == xsk.ZeroCopyOn && !zcLink:
		return nil, fmt.Errorf("xsk %s queue %d: %w", cfg.Ifname, cfg.Queue, xsk.ErrZeroCopyUnsupported)
	case zc && !zcLink:
		return nil, fmt.Errorf("xsk %s queue %d: bind sharing a zero-copy UMEM: %w", cfg.Ifname, cfg.Queue, unix.EOPNOTSUPP)
	}
	fill := cfg.FillSize
	if fill == 0 {
		fill = 2 * cfg.RingSize
	}
	ks := &sock{link: l, queue: cfg.Queue, region: r, mem: r.Bytes(), rings: xsktest.NewRings(cfg.RXSize, cfg.RingSize, fill, ringStart), sg: cfg.SG}
	ks.rings.Socket.SetMemBinding(r.Base(), zc)
	if cfg.Shared != nil {
		if owner, ok := e.socks[cfg.Shared]; ok {
			ks.sg = owner.sg
		}
	}
	ks.rings.Socket.SetMemHooks(xsk.MemHooks{Kick: ks.kick, WakeRX: ks.wakeRX})
	for len(l.socks) <= cfg.Queue {
		l.socks = append(l.socks, nil)
	}
	l.socks[cfg.Queue] = ks
	e.socks[ks.rings.Socket] = ks
	return ks.rings.Socket, nil
}

// Promiscuous implements fwd.Env; Link.Promiscuous reports it.
func (e *Env) Promiscuous(li fwd.LinkInfo) (io.Closer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.byIndex(li.Index)
	if l == nil {
		return nil, fmt.Errorf("promiscuous mode on %s: %w", li.Name, unix.ENODEV)
	}
	l.promisc++
	return closerFunc(func() error {
		e.mu.Lock()
		defer e.mu.Unlock()
		l.promisc--
		return nil
	}), nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// Notify implements fwd.Env: Inject calls wake after it publishes.
func (e *Env) Notify(s *xsk.Socket, wake func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ks, ok := e.socks[s]; ok {
		ks.mu.Lock()
		ks.wake = wake
		ks.mu.Unlock()
	}
}

// watcher is one Watch call: the links it follows, by ifindex, and its
// queue of events.
type watcher struct {
	pos map[int]int // ifindex → place in Watch's list
	ch  chan fwd.LinkEvent
}

// Watch implements fwd.Env: first each link's state and queue counts (or
// LinkGone), then what SetUp, SetMTU, Delete and SetQueues do, until ctx
// is done.
func (e *Env) Watch(ctx context.Context, links []fwd.LinkInfo, event func(fwd.LinkEvent)) error {
	w := &watcher{pos: map[int]int{}, ch: make(chan fwd.LinkEvent, 1024)}
	e.mu.Lock()
	for i, li := range links {
		w.pos[li.Index] = i
		l := e.byIndex(li.Index)
		if l == nil {
			w.ch <- fwd.LinkEvent{Link: i, Kind: fwd.LinkGone}
			continue
		}
		if l.name != li.Name {
			w.ch <- fwd.LinkEvent{Link: i, Kind: fwd.LinkRenamed, Name: l.name}
		}
		w.ch <- l.stateLocked(i)
		// A change made before the watch began shows, as the kernel
		// Env's poll of the counts would show it.
		w.ch <- fwd.LinkEvent{Link: i, Kind: fwd.LinkQueues, RXQueues: l.rxq, TXQueues: l.txq}
	}
	e.watchers = append(e.watchers, w)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		for k, o := range e.watchers {
			if o == w {
				e.watchers = append(e.watchers[:k], e.watchers[k+1:]...)
				break
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-w.ch:
			event(ev)
		}
	}
}

// send queues what happened to l for every watcher following it; e.mu is
// held.
func (e *Env) send(l *Link, ev func(pos int) fwd.LinkEvent) {
	for _, w := range e.watchers {
		if i, ok := w.pos[l.index]; ok {
			select {
			case w.ch <- ev(i):
			default:
				panic("fwdtest: a watcher's queue of link events is full")
			}
		}
	}
}

// Link is a fake link.
type Link struct {
	env   *Env
	name  string
	index int
	opt   LinkOptions

	// Guarded by env.mu.
	rxq, txq int
	mtu      int
	up, gone bool
	prog     *Program
	socks    []*sock // by RX queue
	promisc  int

	// Counted by the fake driver.
	fillEmpty, ringFull, passed, down, dropped atomic.Uint64
	kicks, kickErrs, wakeups                   atomic.Uint64
	needWakeup                                 atomic.Bool
}

// Name and Index are the link's.
func (l *Link) Name() string { return l.name }
func (l *Link) Index() int   { return l.index }

func (l *Link) infoLocked() fwd.LinkInfo {
	return fwd.LinkInfo{Name: l.name, Index: l.index, Driver: l.opt.Driver, ZeroCopy: l.opt.ZeroCopy, MTU: l.mtu,
		RXQueues: l.rxq, TXQueues: l.txq, Veth: l.opt.Veth}
}

func (l *Link) stateLocked(pos int) fwd.LinkEvent {
	st := "down"
	if l.up {
		st = "up"
	}
	return fwd.LinkEvent{Link: pos, Kind: fwd.LinkState, Up: l.up, State: st, MTU: l.mtu}
}

// SetUp brings the link up or down: down, it neither receives nor
// transmits, and a kick fails with ENETDOWN.
func (l *Link) SetUp(up bool) {
	e := l.env
	e.mu.Lock()
	defer e.mu.Unlock()
	l.up = up
	e.send(l, l.stateLocked)
}

// SetMTU changes the link's MTU, as ip link set mtu would.
func (l *Link) SetMTU(mtu int) {
	e := l.env
	e.mu.Lock()
	defer e.mu.Unlock()
	l.mtu = mtu
	e.send(l, l.stateLocked)
}

// Delete deletes the link.
func (l *Link) Delete() {
	e := l.env
	e.mu.Lock()
	defer e.mu.Unlock()
	l.gone, l.up = true, false
	e.send(l, func(pos int) fwd.LinkEvent { return fwd.LinkEvent{Link: pos, Kind: fwd.LinkGone} })
}

// Rename gives the link another name, as ip link set name would: the same
// ifindex, its sockets bound as they were.
func (l *Link) Rename(name string) {
	e := l.env
	e.mu.Lock()
	defer e.mu.Unlock()
	l.name = name
	e.send(l, func(pos int) fwd.LinkEvent { return fwd.LinkEvent{Link: pos, Kind: fwd.LinkRenamed, Name: name} })
}

// SetQueues changes the link's queue counts, as ethtool -L would.
func (l *Link) SetQueues(rx, tx int) {
	e := l.env
	e.mu.Lock()
	defer e.mu.Unlock()
	l.rxq, l.txq = rx, tx
	e.send(l, func(pos int) fwd.LinkEvent {
		return fwd.LinkEvent{Link: pos, Kind: fwd.LinkQueues, RXQueues: rx, TXQueues: tx}
	})
}

// SetNeedWakeup sets or clears need_wakeup on every socket's fill and TX
// rings, now and for sockets opened later. Set, the forwarder kicks TX
// (sendto) and the fake transmits what a kick finds on the spot, as copy
// mode does; clear, the driver needs no kick and transmits when Collect
// asks. Either way Collect takes what is left on the TX rings.
func (l *Link) SetNeedWakeup(on bool) {
	l.needWakeup.Store(on)
	for _, ks := range l.sockets() {
		ks.mu.Lock()
		ks.rings.TX.SetNeedWakeup(on)
		ks.rings.Fill.SetNeedWakeup(on)
		ks.mu.Unlock()
	}
}

// Promiscuous reports how many promiscuous memberships the link has.
func (l *Link) Promiscuous() int {
	l.env.mu.Lock()
	defer l.env.mu.Unlock()
	return l.promisc
}

// Program returns the program last attached to the link, nil if none.
func (l *Link) Program() *Program {
	l.env.mu.Lock()
	defer l.env.mu.Unlock()
	return l.prog
}

// Counters are the fake driver's counts for a link.
type Counters struct {
	// FillEmpty: frames injected while the queue's fill ring had no
	// address (rx_fill_ring_empty_descs); RingFull: while its RX ring was
	// full (rx_ring_full); Passed: while no socket was registered for
	// the queue (the program passed them to the stack); Down: while the
	// link was down; Dropped: longer than a frame on a socket bound
	// without multi-buffer (rx_dropped).
	FillEmpty, RingFull, Passed, Down, Dropped uint64
	// Kicks are the forwarder's sendto calls on the link's sockets,
	// KickErrors those that failed (link down); Wakeups its fill-ring
	// wake-ups (recvfrom).
	Kicks, KickErrors, Wakeups uint64
}

// Counters returns the link's counts.
func (l *Link) Counters() Counters {
	return Counters{FillEmpty: l.fillEmpty.Load(), RingFull: l.ringFull.Load(), Passed: l.passed.Load(), Down: l.down.Load(), Dropped: l.dropped.Load(),
		Kicks: l.kicks.Load(), KickErrors: l.kickErrs.Load(), Wakeups: l.wakeups.Load()}
}

func (l *Link) sockets() []*sock {
	l.env.mu.Lock()
	defer l.env.mu.Unlock()
	return append([]*sock(nil), l.socks...)
}

func (l *Link) isUp() bool {
	l.env.mu.Lock()
	defer l.env.mu.Unlock()
	return l.up
}

// Frame is one frame on the wire.
type Frame struct {
	Queue int
	Data  []byte
}

// RX describes how a frame arrives (Inject).
type RX struct {
	// Stamp is the arrival stamp the program writes in front of the
	// frame: 0, the clock's Now; always 0 when the program takes no
	// stamps (xsk.AttachConfig.NoStamps).
	Stamp int64
	// VLAN, if set, is a tag the program recovered from the receive
	// metadata, kept out of the frame (as a veth peer's TX VLAN offload or
	// a NIC's RX VLAN offload keep it): TPID and TCI.
	VLAN         bool
	TPID, TCI    uint16
	NoMetadata   bool // no room for metadata: neither stamp nor VLAN
	DescOptions  uint32
	SplitAtBytes int // multi-buffer: bytes per descriptor (0: as many as a frame holds)
}

// Inject plays frame arriving on RX queue q: the fake driver takes a fill
// address, copies the frame behind the program's metadata, produces an RX
// descriptor (several for a multi-buffer frame) and publishes it, then
// wakes the worker. It reports false, counted, when the frame was dropped
// (link down, no socket registered, fill ring empty, RX ring full).
func (l *Link) Inject(q int, frame []byte, o RX) bool {
	e := l.env
	e.mu.Lock()
	up := l.up
	var ks *sock
	if q < len(l.socks) {
		ks = l.socks[q]
	}
	prog := l.prog
	registered := prog != nil && !prog.closed && q < len(prog.regs) && prog.regs[q] != nil && ks != nil && prog.regs[q] == ks.rings.Socket
	e.mu.Unlock()
	switch {
	case !up:
		l.down.Add(1)
		return false
	case !registered:
		l.passed.Add(1)
		return false
	}
	switch {
	case prog.noStamps:
		o.Stamp = 0
	case o.Stamp == 0:
		o.Stamp = e.Now()
	}
	ks.mu.Lock()
	ok := ks.receive(frame, o, prog)
	wake := ks.wake
	ks.mu.Unlock()
	if ok && wake != nil {
		wake()
	}
	return ok
}

// Collect plays the link transmitting: it takes every TX descriptor its
// sockets' rings hold, copies the frames out, produces their completions,
// and returns the frames (with those a kick transmitted since the last
// Collect), in the order each queue sent them. A link that is down
// transmits nothing.
func (l *Link) Collect() []Frame {
	var out []Frame
	if !l.isUp() {
		return nil
	}
	for _, ks := range l.sockets() {
		if ks == nil {
			continue
		}
		ks.mu.Lock()
		ks.transmit()
		out = append(out, ks.sent...)
		ks.sent = nil
		ks.mu.Unlock()
	}
	return out
}

// CollectN collects until n frames came out or d passed, and returns what
// came.
func (l *Link) CollectN(n int, d time.Duration) []Frame {
	deadline := time.Now().Add(d)
	var out []Frame
	for {
		out = append(out, l.Collect()...)
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// sock is the kernel's side of one fake socket.
type sock struct {
	link   *Link
	queue  int
	region *umem.Region
	mem    []byte // the region's own: the rings hold offsets into it
	sg     bool

	mu    sync.Mutex
	rings *xsktest.Socket
	wake  func()
	sent  []Frame // transmitted by kicks, for Collect
	descs [64]xsk.Desc
	pkt   []byte // the frame being gathered from its descriptors
}

// receive is Inject's work on the socket; ks.mu is held.
func (ks *sock) receive(frame []byte, o RX, prog *Program) bool {
	l := ks.link
	chunk := ks.region.ChunkSize()
	per := chunk - Headroom
	if o.SplitAtBytes > 0 {
		per = min(per, o.SplitAtBytes)
	}
	n := max((len(frame)+per-1)/per, 1)
	if n > 1 && !ks.sg {
		l.dropped.Add(1) // longer than a frame on a socket without SG: the kernel's rx_dropped
		return false
	}
	rx, fill := ks.rings.RX, ks.rings.Fill
	if room := int(rx.Size()) - rx.Ready(); room < n {
		l.ringFull.Add(1)
		return false
	}
	if fill.Ready() < n {
		l.fillEmpty.Add(1)
		return false
	}
	addrs := fill.TakeAddrs(n)
	for k, a := range addrs {
		a = xsk.Flat(a)
		if a+uint64(chunk) > uint64(len(ks.mem)) {
			// The kernel refuses it (xp_check_unaligned): a frame of
			// another UMEM domain on this socket's fill ring.
			panic(fmt.Sprintf("fwdtest: %s queue %d: fill address %#x outside the socket's UMEM (%d bytes)", l.name, ks.queue, a, len(ks.mem)))
		}
		seg := frame[min(k*per, len(frame)):min((k+1)*per, len(frame))]
		at := a + Headroom // a is the frame's start: the fill ring lends whole frames
		copy(ks.mem[at:], seg)
		d := xsk.Desc{Addr: at, Len: uint32(len(seg)), Options: o.DescOptions}
		if k+1 < n {
			d.Options |= xsk.PktContd
		}
		if k == 0 && !o.NoMetadata {
			meta := ks.mem[at-xsk.MetaLen : at]
			clear(meta)
			binary.NativeEndian.PutUint64(meta[xsk.MetaLen-xsk.MetaStampOff:], uint64(o.Stamp))
			if o.VLAN && !prog.noVLAN() {
				v := meta[xsk.MetaLen-xsk.MetaVLANOff:]
				binary.BigEndian.PutUint16(v, o.TPID)
				binary.NativeEndian.PutUint16(v[2:], o.TCI)
				binary.NativeEndian.PutUint32(v[4:], xsk.MetaVLANValid)
			}
		}
		rx.Produce(d)
	}
	if st := prog.stamps; st != nil && !o.NoMetadata {
		st.Store(ks.queue, o.Stamp) // before the packet shows in the ring, as the program does
	}
	rx.Publish()
	return true
}

// transmit takes what the TX ring holds, copies each packet out into
// sent and completes its descriptors; ks.mu is held. As the kernel does,
// it takes no more than the completion ring has room for: the rest stays
// on the TX ring until the owner reaps.
func (ks *sock) transmit() {
	tx, comp := ks.rings.TX, ks.rings.Comp
	for {
		n := tx.TakeInto(ks.descs[:min(len(ks.descs), comp.Room())])
		for _, d := range ks.descs[:n] {
			a := xsk.Flat(d.Addr)
			if a+uint64(d.Len) > uint64(len(ks.mem)) {
				// The kernel counts it invalid (xp_validate_desc) and
				// loses it: a descriptor of another UMEM domain.
				panic(fmt.Sprintf("fwdtest: %s queue %d: TX descriptor %#x+%d outside the socket's UMEM (%d bytes)", ks.link.name, ks.queue, a, d.Len, len(ks.mem)))
			}
			ks.pkt = append(ks.pkt, ks.mem[a:a+uint64(d.Len)]...)
			if d.Options&xsk.PktContd == 0 {
				ks.sent = append(ks.sent, Frame{Queue: ks.queue, Data: ks.pkt})
				ks.pkt = nil
			}
			if comp.ProduceAddrs(d.Addr) == 0 {
				panic("fwdtest: completion ring full: more in flight than the fill size")
			}
		}
		comp.Publish()
		if n == 0 || n < len(ks.descs) {
			return
		}
	}
}

// kick plays sendto on the socket: ENETDOWN while the link is down; with
// need_wakeup set, it transmits what the TX ring holds.
func (ks *sock) kick() error {
	l := ks.link
	l.kicks.Add(1)
	if !l.isUp() {
		l.kickErrs.Add(1)
		return unix.ENETDOWN
	}
	if l.needWakeup.Load() {
		ks.mu.Lock()
		ks.transmit()
		ks.mu.Unlock()
	}
	return nil
}

func (ks *sock) wakeRX() { ks.link.wakeups.Add(1) }

// Program is the fake XDP program of a link: it records which socket is
// registered on each queue.
type Program struct {
	link *Link
	mode string
	// Guarded by link.env.mu.
	regs      []*xsk.Socket
	stamps    *xsk.LastStamps
	noStamps  bool // the program writes 0 for every stamp
	nativeErr error
	committed bool
	closed    bool
}

func (p *Program) noVLAN() bool { return p.mode != "native" || p.link.opt.NoVLAN }

// Register implements fwd.Program.
func (p *Program) Register(q int, s *xsk.Socket) error {
	p.link.env.mu.Lock()
	defer p.link.env.mu.Unlock()
	if q < 0 || q >= len(p.regs) {
		return fmt.Errorf("xdp %s: register queue %d: %w", p.link.name, q, unix.E2BIG)
	}
	p.regs[q] = s
	return nil
}

// Unregister implements fwd.Program.
func (p *Program) Unregister(q int) error {
	p.link.env.mu.Lock()
	defer p.link.env.mu.Unlock()
	if q >= 0 && q < len(p.regs) {
		p.regs[q] = nil
	}
	return nil
}

// Registered reports how many queues have a socket registered.
func (p *Program) Registered() int {
	p.link.env.mu.Lock()
	defer p.link.env.mu.Unlock()
	n := 0
	for _, s := range p.regs {
		if s != nil {
			n++
		}
	}
	return n
}

// Committed and Closed report what the forwarder did with the program.
func (p *Program) Committed() bool {
	p.link.env.mu.Lock()
	defer p.link.env.mu.Unlock()
	return p.committed
}

func (p *Program) Closed() bool {
	p.link.env.mu.Lock()
	defer p.link.env.mu.Unlock()
	return p.closed
}

// Mode implements fwd.Program.
func (p *Program) Mode() string { return p.mode }

// NativeRefused implements fwd.Program.
func (p *Program) NativeRefused() error { return p.nativeErr }

// Stamps reports whether the program stamps arrivals (not attached with
// xsk.AttachConfig.NoStamps).
func (p *Program) Stamps() bool { return !p.noStamps }

// LastStamps implements fwd.Program: in native mode, the newest stamp per
// queue Inject wrote.
func (p *Program) LastStamps() *xsk.LastStamps { return p.stamps }

// VLAN implements fwd.Program.
func (p *Program) VLAN() (bool, error) {
	if p.noVLAN() {
		return false, errors.New("fwdtest: the program recovers no VLAN tags")
	}
	return true, nil
}

// Passed implements fwd.Program: frames injected while no socket was
// registered for their queue.
func (p *Program) Passed() (uint64, error) { return p.link.passed.Load(), nil }

// Commit implements fwd.Program.
func (p *Program) Commit() {
	p.link.env.mu.Lock()
	defer p.link.env.mu.Unlock()
	p.committed = true
}

// Close implements fwd.Program.
func (p *Program) Close() error {
	p.link.env.mu.Lock()
	defer p.link.env.mu.Unlock()
	p.closed = true
	clear(p.regs)
	return nil
}
