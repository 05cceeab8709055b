// Command udpfilter is a small network function built on xdpfwd's engine:
// it joins two links like `xdpfwd run`, and drops the UDP datagrams sent to
// one port (IPv4 and IPv6, VLAN-tagged or not) while everything else
// crosses. The decision is a fwd.Handler; the UMEM, the rings, inline
// copies, TX queue choice, checksum completion and the counters are the
// engine's.
//
//	udpfilter --link eth1 --link eth2 --drop-port 9
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// Filter drops UDP datagrams to Port and sends everything else out of the
// other of two links. It keeps no state, so any number of workers may call
// it at once.
type Filter struct{ Port uint16 }

// Handle implements fwd.Handler.
func (f Filter) Handle(pkts []fwd.Packet) {
	for i := range pkts {
		p := &pkts[i]
		if port, ok := udpDstPort(p.Data); ok && port == f.Port {
			p.Drop()
			continue
		}
		p.Forward(1 - p.Link)
	}
}

// udpDstPort finds the UDP destination port of an Ethernet frame, after up
// to two VLAN tags; ok is false for anything else, including IPv4
// fragments after the first and IPv6 with extension headers.
func udpDstPort(b []byte) (port uint16, ok bool) {
	off := 12
	et := uint16(0)
	for range 3 {
		if len(b) < off+2 {
			return 0, false
		}
		et = binary.BigEndian.Uint16(b[off:])
		if et != 0x8100 && et != 0x88a8 {
			break
		}
		off += 4
	}
	off += 2
	switch et {
	case 0x0800:
		if len(b) < off+20 || b[off+9] != 17 || binary.BigEndian.Uint16(b[off+6:])&0x1fff != 0 {
			return 0, false
		}
		off += int(b[off]&0x0f) * 4
	case 0x86dd:
		if len(b) < off+40 || b[off+6] != 17 {
			return 0, false
		}
		off += 40
	default:
		return 0, false
	}
	if len(b) < off+4 {
		return 0, false
	}
	return binary.BigEndian.Uint16(b[off+2:]), true
}

type links []string

func (l *links) String() string     { return strings.Join(*l, ",") }
func (l *links) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var ls links
	flag.Var(&ls, "link", "a link to forward between (give exactly two)")
	port := flag.Uint("drop-port", 9, "UDP destination port to drop")
	flag.Parse()
	if len(ls) != 2 || *port == 0 || *port > 65535 {
		fmt.Fprintln(os.Stderr, "usage: udpfilter --link A --link B [--drop-port N]")
		os.Exit(2)
	}
	f, err := fwd.New(fwd.Config{Links: ls, Handler: Filter{Port: uint16(*port)}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "udpfilter:", err)
		if fwd.IsInputError(err) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	runErr := f.Run(ctx)
	sum, err := f.Shutdown()
	for _, l := range ls {
		s := sum.Links[l]
		fmt.Printf("%s: rx %d, tx %d, filtered %d\n", l, s.RXPackets, s.TXPackets, s.Drops[fwd.DropHandler])
	}
	if runErr != nil || err != nil {
		fmt.Fprintln(os.Stderr, "udpfilter:", runErr, err)
		os.Exit(1)
	}
}
