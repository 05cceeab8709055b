package fwd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/promisc"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Env is what a Forwarder is built from and runs on: the links, their XDP
// programs and AF_XDP sockets, promiscuous membership, the capability
// check, the link monitor's events and the clock of the arrival stamps.
// Config.Env nil is the kernel (netlink, package xsk, package promisc);
// package fwdtest plays all of it in memory, so that whole forwarders run
// in ordinary tests without root.
//
// New calls the methods but Watch from its own goroutine; Run calls Watch
// from the monitor's goroutine, while the workers use the sockets; Now may
// be called from any goroutine.
type Env interface {
	// CheckCapabilities returns an InputError naming what the process
	// lacks to take the links.
	CheckCapabilities() error
	// Link looks a link up by name: an error wrapping ErrUnknownLink if
	// there is none.
	Link(name string) (LinkInfo, error)
	// Attach puts xdpfwd's program on the link as cfg says (cfg.Queues:
	// the link's RX queues). An error wrapping xsk.ErrForeignProgram: the
	// link carries a program that is not ours, and cfg.Force was not set.
	Attach(l LinkInfo, cfg xsk.AttachConfig) (Program, error)
	// Open binds a socket on the region as cfg says (cfg.Shared: the
	// socket that registered the region).
	Open(r *umem.Region, cfg xsk.Config) (*xsk.Socket, error)
	// Promiscuous holds the link in promiscuous mode until Close.
	Promiscuous(l LinkInfo) (io.Closer, error)
	// Watch reports what becomes of the links (in the order given) until
	// ctx is done, each event through event, one at a time; it returns
	// an error at once if it cannot follow them.
	Watch(ctx context.Context, links []LinkInfo, event func(LinkEvent)) error
	// Notify gives the environment, once per socket, what rouses the
	// worker that reads the socket while it sleeps, for a socket without
	// a file descriptor (xsk.NewMemSocket): the environment calls wake
	// after it publishes RX descriptors. Sockets that poll(2) waits on
	// need none.
	Notify(s *xsk.Socket, wake func())
	// Now reads the clock of the arrival stamps in the packets'
	// metadata, in ns (CLOCK_MONOTONIC, as bpf_ktime_get_ns).
	Now() int64
}

// LinkInfo is what an Env reports of a link.
type LinkInfo struct {
	Name   string
	Index  int
	Driver string // ethtool -i; "" if unknown
	// ZeroCopy is what the kernel reports of the link's AF_XDP zero-copy
	// support (xsk.LinkZeroCopy).
	ZeroCopy xsk.ZeroCopyFeatures
	MTU      int
	// RXQueues and TXQueues are the queues in use (ethtool channels).
	RXQueues, TXQueues int
	// Veth: the link is a veth, whose peer's stack may leave partial
	// checksums (Config.Checksums).
	Veth bool
	// RXRing is the descriptors of each RX queue's hardware ring (ethtool
	// -g), 0 if the link has none or will not say. A driver in
	// zero-copy mode keeps that many of a socket's frames posted on it,
	// beyond its fill ring: the plan counts them (umemConfig).
	RXRing int
}

// Program is xdpfwd's XDP program on one link and the map of sockets it
// redirects into: *xsk.Program in the kernel.
type Program interface {
	// Register points queue's packets at s; Unregister sends them to the
	// kernel's stack again.
	Register(queue int, s *xsk.Socket) error
	Unregister(queue int) error
	// Mode is "native" or "generic"; NativeRefused why native mode was
	// refused, if auto fell back.
	Mode() string
	NativeRefused() error
	// LastStamps is the newest arrival stamp per RX queue (native mode).
	LastStamps() *xsk.LastStamps
	// VLAN reports whether the program recovers VLAN tags kept out of the
	// frame, and why not.
	VLAN() (bool, error)
	// Passed is how many packets the program passed to the stack for want
	// of a socket.
	Passed() (uint64, error)
	// Commit makes the program's replacement of a foreign one final;
	// Close detaches it (putting back an uncommitted foreign one).
	Commit()
	Close() error
}

// LinkEventKind says what a LinkEvent reports.
type LinkEventKind int

const (
	// LinkState: the link's operational state and MTU, as now.
	LinkState LinkEventKind = iota
	// LinkGone: the link was deleted (or its namespace went away).
	LinkGone
	// LinkQueues: the link's RX and TX queue counts, as now; sent when
	// they may have changed (the kernel sends no event for a channel
	// change, so the kernel's Env polls them).
	LinkQueues
	// LinkWatchError: the watch met an error it goes on after (Err;
	// Link is -1), for the log.
	LinkWatchError
	// LinkRenamed: the link (the same ifindex, its sockets still bound)
	// has a new name, Name.
	LinkRenamed
)

// LinkEvent is what an Env's Watch reports of one link.
type LinkEvent struct {
	Link int // the link's place in the list given to Watch
	Kind LinkEventKind
	// LinkState: whether it is up, its state's name (for the log) and MTU.
	Up    bool
	State string
	MTU   int
	// LinkQueues: the counts.
	RXQueues, TXQueues int
	// LinkWatchError: what went wrong.
	Err error
	// LinkRenamed: the new name.
	Name string
}

// kernel is the Env of Config.Env nil: netlink, xsk and promisc.
type kernel struct{}

func (kernel) CheckCapabilities() error { return CheckCapabilities() }

func (kernel) Link(name string) (LinkInfo, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return LinkInfo{}, &InputError{fmt.Errorf("%w %q", ErrUnknownLink, name)}
		}
		return LinkInfo{}, fmt.Errorf("link %q: %w", name, err)
	}
	a := l.Attrs()
	rx, tx := realQueues(name)
	drv, zc := probeLink(name, a.Index)
	var ring int
	if r, err := ethtool.GetRings(name); err == nil {
		ring = int(r.RX)
	}
	return LinkInfo{Name: name, Index: a.Index, Driver: drv, ZeroCopy: zc, MTU: a.MTU,
		RXQueues: rx, TXQueues: tx, Veth: l.Type() == "veth", RXRing: ring}, nil
}

// probeLink names a link's driver and asks the kernel what it does of
// zero-copy; what it cannot learn stays zero (unknown). (Tests pose links
// as NICs through fwdtest's LinkOptions.)
func probeLink(name string, ifindex int) (string, xsk.ZeroCopyFeatures) {
	drv, _ := ethtool.Driver(name)
	zc, _ := xsk.LinkZeroCopy(ifindex)
	return drv, zc
}

func (kernel) Attach(l LinkInfo, cfg xsk.AttachConfig) (Program, error) {
	p, err := xsk.Attach(l.Name, l.Index, cfg)
	if err != nil {
		return nil, err // not a nil *xsk.Program in a non-nil Program
	}
	return p, nil
}

func (kernel) Open(r *umem.Region, cfg xsk.Config) (*xsk.Socket, error) { return xsk.Open(r, cfg) }

// ExportProgram implements HandoverEnv: the program's BPF link, XSKMAP,
// passed counter and, if it takes them, stamps map.
func (kernel) ExportProgram(p Program) ([]*os.File, error) {
	xp, ok := p.(*xsk.Program)
	if !ok {
		return nil, fmt.Errorf("program %T: not the kernel's", p)
	}
	pf := xp.Files()
	var files []*os.File
	for _, fd := range []int{pf.Link, pf.XSKs, pf.Passed, pf.Stamps} {
		if fd < 0 {
			break // stamps: none
		}
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("dup program fd: %w", err)
		}
		files = append(files, os.NewFile(uintptr(d), "xdp-program"))
	}
	if len(files) < 3 {
		return nil, fmt.Errorf("program: %d kernel objects, want its link, XSKMAP and counter", len(files))
	}
	return files, nil
}

// AdoptProgram implements HandoverEnv.
func (kernel) AdoptProgram(l LinkInfo, queues int, mode string, vlan bool, files []*os.File) (Program, error) {
	pf := xsk.ProgramFiles{Link: -1, XSKs: -1, Passed: -1, Stamps: -1}
	for i, p := range []*int{&pf.Link, &pf.XSKs, &pf.Passed, &pf.Stamps} {
		if i < len(files) {
			*p = releaseFD(files[i])
		}
	}
	p, err := xsk.AdoptProgram(l.Name, l.Index, queues, mode, vlan, pf)
	if err != nil {
		return nil, err // not a nil *xsk.Program in a non-nil Program
	}
	return p, nil
}

// ExportSocket implements HandoverEnv.
func (kernel) ExportSocket(s *xsk.Socket) (*os.File, error) {
	d, err := unix.FcntlInt(uintptr(s.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup socket %s queue %d: %w", s.Ifname(), s.Queue(), err)
	}
	return os.NewFile(uintptr(d), "xsk"), nil
}

// AdoptSocket implements HandoverEnv.
func (kernel) AdoptSocket(r *umem.Region, f *os.File, cfg xsk.Config) (*xsk.Socket, error) {
	return xsk.Adopt(r, releaseFD(f), cfg)
}

// releaseFD is a duplicate of f's descriptor, which the caller owns from
// then on; f is closed. It does not call f.Fd, which would put the open
// file description the predecessor still uses in blocking mode.
func releaseFD(f *os.File) int {
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	rc.Control(func(d uintptr) {
		fd, err = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err != nil {
		return -1
	}
	return fd
}

func (kernel) Promiscuous(l LinkInfo) (io.Closer, error) {
	m, err := promisc.Join(l.Name, l.Index)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (kernel) Notify(*xsk.Socket, func()) {}

func (kernel) Now() int64 { return monoNow() }

// Watch follows the links through netlink, and polls their queue counts
// every queueCheckInterval: a channel change sends no netlink event.
func (kernel) Watch(ctx context.Context, links []LinkInfo, event func(LinkEvent)) error {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	// The subscription's errors come from its goroutine: events are
	// reported from this one, one at a time.
	errs := make(chan error, 16)
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			if ctx.Err() == nil { // closing the subscription at stop also reports an error
				select {
				case errs <- err:
				default: // the log has enough of them
				}
			}
		},
	})
	if err != nil {
		return err
	}
	state := func(i int, l netlink.Link) {
		a := l.Attrs()
		up := a.OperState == netlink.OperUp || a.OperState == netlink.OperUnknown && a.Flags&unixFlagUp != 0
		event(LinkEvent{Link: i, Kind: LinkState, Up: up, State: a.OperState.String(), MTU: a.MTU})
	}
	// The links may have changed between New and the subscription. A
	// link is its ifindex (its sockets are bound to it): one renamed is
	// the same link under another name, followed by that name.
	names := make([]string, len(links))
	renamed := func(i int, name string) {
		if name != "" && name != names[i] {
			names[i] = name
			event(LinkEvent{Link: i, Kind: LinkRenamed, Name: name})
		}
	}
	for i, l := range links {
		names[i] = l.Name
		nl, err := netlink.LinkByIndex(l.Index)
		if err != nil {
			event(LinkEvent{Link: i, Kind: LinkGone})
			continue
		}
		renamed(i, nl.Attrs().Name)
		state(i, nl)
	}
	tick := time.NewTicker(queueCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			for i := range links {
				rx, tx := realQueues(names[i])
				event(LinkEvent{Link: i, Kind: LinkQueues, RXQueues: rx, TXQueues: tx})
			}
		case err := <-errs:
			event(LinkEvent{Link: -1, Kind: LinkWatchError, Err: err})
		case u, ok := <-updates:
			if !ok {
				// The subscription ended on an error, sent before it
				// closed the channel.
				select {
				case err := <-errs:
					return err
				default:
					return errors.New("netlink subscription closed")
				}
			}
			for i, l := range links {
				if int(u.Index) != l.Index {
					continue
				}
				if u.Header.Type == unix.RTM_DELLINK {
					event(LinkEvent{Link: i, Kind: LinkGone})
					continue
				}
				renamed(i, u.Link.Attrs().Name)
				state(i, u.Link)
			}
		}
	}
}
