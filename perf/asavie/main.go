// Command asavie-fwd is the contender perf runs for users who would build a
// forwarder on github.com/asavie/xdp, the Go AF_XDP library they would most
// likely pick instead of xdpfwd. It lives in its own module so the library is
// built with the dependency versions it pins (cilium/ebpf v0.4.0, netlink
// v1.1.0, a 2021 x/sys), not the main module's.
//
// It forwards both ways between two links, as fairly as the library allows:
// one socket per link and queue, each with its own UMEM, since the library
// has no shared UMEM; like xdpfwd, worker q owns queue q of both links; a frame received on one link is copied into a free
// frame of the other socket's UMEM and transmitted from there (the library's
// own l2fwd example does the same). Like xdpfwd's workers it spins on empty
// rings for a while before it sleeps in poll(2), kicks a TX ring the kernel
// left unfinished, and runs on one locked OS thread.
//
//	asavie-fwd --link A --link B [--queues N] [--frames N] [--ring N] [--summary FILE]
//
// It forwards until SIGINT or SIGTERM, then unregisters its sockets, detaches
// its XDP programs (attached through netlink: they would outlive a killed
// process, so perf also checks the links afterwards) and writes the summary.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asavie/xdp"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// side is one link: its XDP program and one socket per queue.
type side struct {
	name    string
	ifindex int
	prog    *xdp.Program
	socks   []*xdp.Socket
	stats   []*counters // per queue, written by that queue's worker only
}

type counters struct {
	rx, tx  uint64 // frames received from / transmitted on this link
	txFail  uint64 // sendto failures the library turned into a panic
	dropped uint64 // frames received but not transmitted
}

// port is one socket of a side, as a worker sees it.
type port struct {
	sock *xdp.Socket
	c    *counters
}

// Summary is written to --summary on exit.
type Summary struct {
	Links     map[string]LinkSummary `json:"links"`
	DurationS float64                `json:"duration_s"`
	Options   xdp.SocketOptions      `json:"options"`
	Queues    int                    `json:"queues"`
}

// LinkSummary are one link's counters.
type LinkSummary struct {
	RXPackets   uint64 `json:"rx_packets"`
	TXPackets   uint64 `json:"tx_packets"`
	TXFailures  uint64 `json:"tx_failures"`
	NotSent     uint64 `json:"rx_not_transmitted"` // received here, no room to transmit on the other link
	KernelDrops uint64 `json:"kernel_rx_dropped"`
	RingFull    uint64 `json:"kernel_rx_ring_full"`
	FillEmpty   uint64 `json:"kernel_rx_fill_ring_empty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "asavie-fwd: %v\n", err)
		os.Exit(1)
	}
}

func run() (err error) {
	var links listFlag
	flag.Var(&links, "link", "a link to forward between (give exactly two)")
	queues := flag.Int("queues", 1, "queues per link: one socket per queue, one worker per queue index")
	frames := flag.Int("frames", 4096, "UMEM frames per socket")
	ring := flag.Int("ring", 2048, "entries of each of the four rings (power of two)")
	spin := flag.Int("spin", 64, "empty rounds before sleeping in poll(2)")
	summary := flag.String("summary", "", "write a JSON summary here on exit")
	flag.Parse()
	if len(links) != 2 || links[0] == links[1] {
		return errors.New("need two different --link flags")
	}
	if *queues < 1 {
		return errors.New("--queues must be at least 1")
	}
	if *ring <= 0 || *ring&(*ring-1) != 0 || *frames < 2**ring {
		return fmt.Errorf("--ring %d must be a power of two and --frames %d at least twice it", *ring, *frames)
	}
	opts := xdp.SocketOptions{
		NumFrames:              *frames,
		FrameSize:              2048,
		FillRingNumDescs:       *ring,
		CompletionRingNumDescs: *ring,
		RxRingNumDescs:         *ring,
		TxRingNumDescs:         *ring,
	}

	var sides [2]*side
	defer func() {
		for _, s := range sides {
			if s != nil {
				err = errors.Join(err, s.close())
			}
		}
	}()
	for i, name := range links {
		s, err := open(name, *queues, &opts)
		if err != nil {
			return err
		}
		sides[i] = s
	}

	var stop atomic.Bool
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sigc; stop.Store(true) }()

	fmt.Fprintf(os.Stderr, "asavie-fwd: forwarding %s <-> %s on %d queue(s)\n", links[0], links[1], *queues)
	start := time.Now()
	var wg sync.WaitGroup
	for q := range *queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := port{sides[0].socks[q], sides[0].stats[q]}
			b := port{sides[1].socks[q], sides[1].stats[q]}
			forward(a, b, *spin, &stop)
		}()
	}
	wg.Wait()
	dur := time.Since(start)

	if *summary != "" {
		s := Summary{Links: map[string]LinkSummary{}, DurationS: dur.Seconds(), Options: opts, Queues: *queues}
		for _, sd := range sides {
			var ls LinkSummary
			for q, sock := range sd.socks {
				c := sd.stats[q]
				ls.RXPackets += c.rx
				ls.TXPackets += c.tx
				ls.TXFailures += c.txFail
				ls.NotSent += c.dropped
				if st, err := sock.Stats(); err == nil {
					ls.KernelDrops += st.KernelStats.Rx_dropped
					ls.RingFull += st.KernelStats.Rx_ring_full
					ls.FillEmpty += st.KernelStats.Rx_fill_ring_empty_descs
				}
			}
			s.Links[sd.name] = ls
		}
		b, _ := json.MarshalIndent(s, "", "  ")
		if werr := os.WriteFile(*summary, append(b, '\n'), 0o644); werr != nil {
			return werr
		}
	}
	return nil
}

// open attaches the library's XDP program to the link and binds a socket
// to each queue, exactly as the library's documentation shows.
func open(name string, queues int, opts *xdp.SocketOptions) (_ *side, err error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	s := &side{name: name, ifindex: l.Attrs().Index}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.prog, err = xdp.NewProgram(queues); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err = s.prog.Attach(s.ifindex); err != nil {
		return nil, fmt.Errorf("%s: attach: %w", name, err)
	}
	for q := range queues {
		sock, err := xdp.NewSocket(s.ifindex, q, opts)
		if err != nil {
			return nil, fmt.Errorf("%s queue %d: socket: %w", name, q, err)
		}
		s.socks = append(s.socks, sock)
		s.stats = append(s.stats, &counters{})
		if err = s.prog.Register(q, sock.FD()); err != nil {
			return nil, fmt.Errorf("%s queue %d: register: %w", name, q, err)
		}
	}
	return s, nil
}

func (s *side) close() error {
	var errs []error
	if s.prog != nil {
		for q := range s.socks {
			s.prog.Unregister(q)
		}
		errs = append(errs, s.prog.Detach(s.ifindex), s.prog.Close())
	}
	for _, sock := range s.socks {
		errs = append(errs, sock.Close())
	}
	return errors.Join(errs...)
}

// forward is one worker: it owns queue q of both links.
func forward(a, b port, spin int, stop *atomic.Bool) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ports := [2]port{a, b}
	pfds := []unix.PollFd{
		{Fd: int32(a.sock.FD()), Events: unix.POLLIN},
		{Fd: int32(b.sock.FD()), Events: unix.POLLIN},
	}
	idle := 0
	for !stop.Load() {
		for _, p := range ports {
			p.sock.Fill(p.sock.GetDescs(p.sock.NumFreeFillSlots()))
		}
		n := move(a, b) + move(b, a)
		for _, p := range ports {
			if c := p.sock.NumCompleted(); c > 0 {
				p.sock.Complete(c)
			}
		}
		if n > 0 {
			idle = 0
			continue
		}
		if idle++; idle < spin {
			continue
		}
		idle = 0
		for _, p := range ports {
			// Copy mode sends a bounded budget per sendto; an empty
			// Transmit is the library's only way to kick the rest.
			if p.sock.NumTransmitted() > 0 {
				transmit(p, nil)
			}
		}
		unix.Poll(pfds, 20)
	}
}

// move copies what in received into free frames of out's UMEM and
// transmits them. It takes no more than out can send now, so a full TX ring
// pushes back into in's RX ring as in xdpfwd.
func move(in, out port) int {
	k := min(in.sock.NumReceived(), out.sock.NumFreeTxSlots())
	if k == 0 {
		return 0
	}
	txd := out.sock.GetDescs(k)
	k = min(k, len(txd))
	if k == 0 {
		return 0
	}
	rxd := in.sock.Receive(k)
	for i, d := range rxd {
		txd[i].Len = uint32(copy(out.sock.GetFrame(txd[i]), in.sock.GetFrame(d)))
	}
	in.c.rx += uint64(len(rxd))
	sent := transmit(out, txd[:len(rxd)])
	out.c.tx += uint64(sent)
	in.c.dropped += uint64(len(rxd) - sent)
	return len(rxd)
}

// transmit calls the library's Transmit, which panics on any sendto error
// other than EAGAIN and EBUSY (e.g. ENETDOWN while a link is removed).
func transmit(p port, d []xdp.Desc) (n int) {
	defer func() {
		if r := recover(); r != nil {
			p.c.txFail++
		}
	}()
	return p.sock.Transmit(d)
}
