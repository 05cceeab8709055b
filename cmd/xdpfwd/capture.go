// `xdpfwd capture`: a client of a running daemon's control socket that
// writes the packets it streams as pcapng. The daemon's side is control.go.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/cbpf"
	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/pcapng"
)

const captureUsage = `usage: xdpfwd capture -w FILE|- [--control PATH] [--link NAME]... [--direction rx|tx|drop|all]
                      [--count N] [--snaplen N] [--buffer BYTES] [FILTER EXPRESSION...]

Writes what a running xdpfwd receives, sends and drops as pcapng: each packet
on its link's interface, inbound or outbound, its queue (and for a drop the
reason, a counter's name) in the packet's comment. Without --link a forwarded
packet is there twice, rx on one link and tx on the other: --direction rx
keeps each once. The filter is tcpdump's
expression language, compiled by tcpdump (libpcap); the daemon runs it.
Ends at --count, or on SIGINT/SIGTERM; then prints to stderr how many packets
were captured and how many the capture lost (its buffer full: forwarding
never waits for a capture). A second SIGINT/SIGTERM ends it at once.

Without --link the capture follows the links as they come and go (xdpfwd
link add/del): a link added while it runs gets an interface of its own in
the file, from its first packet. With --link it ends when one of its links
is removed (link del, or its interface deleted), as tcpdump does when its
interface disappears: what was captured until then is written, and it exits
1 ("link NAME was removed"). A link renamed while captured is the same
link (xdpfwd follows it by its ifindex): the capture goes on recording it
under the name it had when the capture started, as tcpdump does.

Exit status: 0 at --count, a signal, or the daemon stopping; 1 when a link
asked for was removed, or on another failure; 2 for bad input.

`

// cmdCapture is `xdpfwd capture`: a client of a running daemon's control
// socket.
func cmdCapture(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("control", "", "the daemon's control socket (default: "+control.Dir+"/LINK.sock for a --link, else the only socket there)")
	out := fs.String("w", "", "write pcapng to this file, or - for standard output (required)")
	var links listFlag
	fs.Var(&links, "link", "capture on this link only (repeat; default: every link)")
	dir := fs.String("direction", "all", "rx|tx|drop|all")
	count := fs.Uint64("count", 0, "stop after this many packets (0: until interrupted)")
	snaplen := fs.Int("snaplen", capture.DefaultSnaplen, "bytes kept of each packet")
	buffer := fs.Int("buffer", capture.DefaultBuffer, "capture buffer per worker, in bytes: what does not fit is lost (and counted)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, captureUsage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return err
		}
		return usageError{fmt.Sprintf("capture: %v (see 'xdpfwd capture --help')", err)}
	}
	expr := strings.Join(fs.Args(), " ")
	switch {
	case *out == "":
		return usageError{"capture: -w FILE (or -w - for standard output) is required"}
	case *snaplen < 1 || *snaplen > capture.DefaultSnaplen:
		return usageError{fmt.Sprintf("capture: --snaplen %d: want 1..%d", *snaplen, capture.DefaultSnaplen)}
	case *buffer < 4096 || *buffer > capture.MaxBuffer:
		return usageError{fmt.Sprintf("capture: --buffer %d: want 4096..%d bytes", *buffer, capture.MaxBuffer)}
	}
	if _, err := capture.ParseDir(*dir); err != nil || *dir == "" {
		return usageError{fmt.Sprintf("capture: --direction %q: want rx, tx, drop or all", *dir)}
	}
	req := capture.Request{Links: links, Direction: *dir, Snaplen: *snaplen, Count: *count, Buffer: *buffer}
	if expr != "" {
		prog, err := cbpf.Compile(expr, *snaplen)
		if errors.Is(err, cbpf.ErrNoCompiler) {
			return err
		}
		if err != nil {
			return usageError{err.Error()}
		}
		req.Filter = prog.Instructions()
	}
	if *path == "" {
		p, err := control.Find(links)
		if err != nil {
			return err
		}
		*path = p
	}

	// Signals before the capture starts, so that none ends it uncleanly.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)

	c, err := capture.Dial(*path, req)
	if err != nil {
		var re *capture.RequestError
		if errors.As(err, &re) {
			return usageError{"capture: " + re.Msg}
		}
		return err
	}
	defer c.Close()
	// The first signal asks the daemon to end the stream (it sends what
	// its buffers hold, then its totals); a second ends the capture at
	// once, with what was written.
	var interrupted atomic.Bool
	ended := make(chan struct{})
	defer close(ended)
	go func() {
		select {
		case <-sig:
			c.Stop()
		case <-ended:
			return
		}
		var s os.Signal
		select {
		case s = <-sig:
		case <-ended:
			return
		}
		interrupted.Store(true)
		c.Close() // the next read fails: the file is flushed and closed
		select {
		case <-ended:
		case <-time.After(time.Second):
			// Stuck writing the output (a reader that stopped): end as
			// the signal would have without us.
			signal.Reset(s)
			syscall.Kill(os.Getpid(), s.(syscall.Signal))
		}
	}()

	w := stdout
	if *out != "-" {
		fh, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) // packet contents: the owner's only
		if err != nil {
			c.Stop()
			return usageError{fmt.Sprintf("capture: -w: %v", err)}
		}
		defer fh.Close()
		w = fh
	}
	// As tcpdump does; tests wait for it: from here on, every batch the
	// workers read is offered to this capture.
	// The links there are now ("" is an index a removed link left).
	on := slices.DeleteFunc(slices.Clone(c.Hello.Links), func(l string) bool { return l == "" })
	if len(links) > 0 {
		on = links
	}
	fmt.Fprintf(stderr, "listening on %s (%s), pcapng, snapshot length %d bytes\n",
		strings.Join(on, ", "), *path, c.Hello.Snaplen)
	n, err := writeCapture(c, w, fmt.Sprintf("xdpfwd %s capture", version))
	if interrupted.Load() {
		fmt.Fprintf(stderr, "%d packets captured\n", n)
		return fmt.Errorf("capture: interrupted again: ended without the daemon's totals (packets lost unknown)")
	}
	t := c.Totals()
	fmt.Fprintf(stderr, "%d packets captured\n%d packets lost by the capture (its buffer full; forwarding did not wait)\n", n, t.Lost)
	switch {
	case err == nil && t.LinkGone != "":
		// As tcpdump on an interface that disappeared: an error. The
		// link's index may serve another link now: not followed.
		return fmt.Errorf("capture ended: %w", &capture.LinkGoneError{Link: t.LinkGone})
	case err == nil && t.Error != "":
		fmt.Fprintf(stderr, "capture ended: %s\n", t.Error)
	}
	return err
}

// writeCapture writes the records of c as pcapng to w until the daemon
// ends the stream, and returns how many it wrote.
func writeCapture(c *capture.Client, w io.Writer, app string) (uint64, error) {
	ifs := make([]pcapng.Interface, len(c.Links()))
	for i, l := range c.Links() {
		ifs[i] = pcapng.Interface{Name: l, SnapLen: uint32(c.Hello.Snaplen)}
	}
	pw, err := pcapng.NewWriter(w, app, ifs)
	if err != nil {
		return 0, err
	}
	var n uint64
	var comment []byte
	for {
		if c.Buffered() == 0 {
			// Nothing more to hand: let a reader (tcpdump -r -) see it now.
			if err := pw.Flush(); err != nil {
				return n, err
			}
		}
		rec, err := c.Next()
		if err == io.EOF {
			return n, pw.Flush()
		}
		if err != nil {
			pw.Flush()
			return n, err
		}
		// Links added while capturing: described before their first
		// packet, in the order the daemon numbered them.
		for _, l := range c.Links()[pw.Interfaces():] {
			if _, err := pw.AddInterface(pcapng.Interface{Name: l, SnapLen: uint32(c.Hello.Snaplen)}); err != nil {
				return n, err
			}
		}
		comment = recordComment(comment[:0], rec, c.Hello.Reasons)
		if err := pw.Packet(rec.Link, rec.Time, rec.Data, rec.OrigLen, direction(rec, c.Hello.Reasons), string(comment)); err != nil {
			return n, err
		}
		n++
	}
}

// recordComment is a packet's comment: "rx queue=2", "tx queue=0",
// "drop queue=1 reason=handler_drops".
func recordComment(b []byte, rec capture.Record, reasons []string) []byte {
	b = fmt.Appendf(b, "%s queue=%d", rec.Dir, rec.Queue)
	if rec.Dir == capture.Drop {
		b = fmt.Appendf(b, " reason=%s", reasonName(rec.Reason, reasons))
	}
	return b
}

func reasonName(r capture.Reason, reasons []string) string {
	if int(r) < len(reasons) && reasons[r] != "" {
		return reasons[r]
	}
	return fmt.Sprintf("reason%d", r)
}

// direction is a record's pcapng flag: a drop is inbound when the
// receiving link's counter counts it (rx_*, handler_drops), outbound when
// the sending link's does.
func direction(rec capture.Record, reasons []string) pcapng.Direction {
	switch rec.Dir {
	case capture.RX:
		return pcapng.DirInbound
	case capture.TX:
		return pcapng.DirOutbound
	}
	if r := reasonName(rec.Reason, reasons); strings.HasPrefix(r, "rx_") || r == "handler_drops" {
		return pcapng.DirInbound
	}
	return pcapng.DirOutbound
}
