// `xdpfwd capture`: a client of a running daemon's control socket that
// writes the packets it streams as pcapng. The daemon's side is control.go.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
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
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/pcapng"
)

const captureUsage = `usage: xdpfwd capture -w FILE|- [--control PATH] [--link NAME]... [--pod NAMESPACE/NAME]...
                      [--direction rx|tx|drop|all] [--count N] [--snaplen N] [--buffer BYTES] [FILTER EXPRESSION...]

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

--pod captures on the links of a pod (those the CNI plugin added for it,
or a link add --pod), as --link does: the pod's deletion ends it. Each
interface of a link that serves a pod is described "pod NAMESPACE/NAME"
in the file (pcapng if_description; tshark's frame.interface_description).

Exit status: 0 at --count, a signal, or the daemon stopping; 1 when a link
asked for was removed, or on another failure; 2 for bad input.
`

// cmdCapture is `xdpfwd capture`: a client of a running daemon's control
// socket.
func cmdCapture(args []string, stdout, stderr io.Writer) error {
	a, err := parseCaptureArgs(args, stderr)
	if err != nil {
		return err
	}
	names, err := a.resolve()
	if err != nil {
		return err
	}
	// Signals before the capture starts, so that none ends it uncleanly.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)

	c, err := capture.Dial(a.path, a.req)
	if err != nil {
		var re *capture.RequestError
		if errors.As(err, &re) {
			return usageError{"capture: " + re.Msg}
		}
		return err
	}
	defer c.Close()
	interrupted, ended := stopOnSignals(c, sig)
	defer close(ended)

	w := stdout
	if a.out != "-" {
		fh, err := os.OpenFile(a.out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600) // packet contents: the owner's only
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
	if len(a.req.Links) > 0 {
		on = a.req.Links
	}
	fmt.Fprintf(stderr, "listening on %s (%s), pcapng, snapshot length %d bytes\n",
		strings.Join(on, ", "), a.path, c.Hello.Snaplen)
	n, err := writeCapture(c, w, fmt.Sprintf("xdpfwd %s capture", version), names.describe)
	return captureEnded(c, n, err, interrupted.Load(), stderr)
}

// captureArgs is what `xdpfwd capture` was asked: the control socket
// (path, "" until resolve finds it), the output (out, - for standard
// output), the pods whose links it captures on, and the request.
type captureArgs struct {
	path, out string
	pods      []linkop.Pod
	req       capture.Request
}

// parseCaptureArgs reads capture's flags and filter expression, checks
// them and compiles the filter; --help writes the usage to stderr.
func parseCaptureArgs(args []string, stderr io.Writer) (captureArgs, error) {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("control", "", "the daemon's control socket, a `PATH` (default: "+control.Dir+"/LINK.sock for a --link, else the only socket there)")
	out := fs.String("w", "", "write pcapng to this `FILE`, or - for standard output (required)")
	var links, pods listFlag
	fs.Var(&links, "link", "capture on the link `NAME` only (repeat; default: every link)")
	fs.Var(&pods, "pod", "capture on the links of this pod only, `NAMESPACE/NAME` (repeat; as --link)")
	dir := fs.String("direction", "all", "what to capture, `rx|tx|drop|all`: what links receive, send, drop, or all of it")
	count := fs.Uint64("count", 0, "stop after `N` packets (0: until interrupted)")
	snaplen := fs.Int("snaplen", capture.DefaultSnaplen, "`N` bytes kept of each packet")
	buffer := fs.Int("buffer", capture.DefaultBuffer, "capture buffer per worker, `BYTES`: what does not fit is lost (and counted)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, captureUsage)
			printFlags(stderr, fs)
			return captureArgs{}, err
		}
		return captureArgs{}, usageError{fmt.Sprintf("capture: %v (see 'xdpfwd capture --help')", err)}
	}
	switch {
	case *out == "":
		return captureArgs{}, usageError{"capture: -w FILE (or -w - for standard output) is required"}
	case *snaplen < 1 || *snaplen > capture.DefaultSnaplen:
		return captureArgs{}, usageError{fmt.Sprintf("capture: --snaplen %d: want 1..%d", *snaplen, capture.DefaultSnaplen)}
	case *buffer < 4096 || *buffer > capture.MaxBuffer:
		return captureArgs{}, usageError{fmt.Sprintf("capture: --buffer %d: want 4096..%d bytes", *buffer, capture.MaxBuffer)}
	}
	if _, err := capture.ParseDir(*dir); err != nil || *dir == "" {
		return captureArgs{}, usageError{fmt.Sprintf("capture: --direction %q: want rx, tx, drop or all", *dir)}
	}
	a := captureArgs{path: *path, out: *out,
		req: capture.Request{Links: links, Direction: *dir, Snaplen: *snaplen, Count: *count, Buffer: *buffer}}
	for _, ref := range pods {
		p, err := linkop.ParsePod(ref)
		if err != nil {
			return captureArgs{}, usageError{"capture: --pod: " + err.Error()}
		}
		a.pods = append(a.pods, p)
	}
	if expr := strings.Join(fs.Args(), " "); expr != "" {
		prog, err := cbpf.Compile(expr, *snaplen)
		if errors.Is(err, cbpf.ErrNoCompiler) {
			return captureArgs{}, err
		}
		if err != nil {
			return captureArgs{}, usageError{err.Error()}
		}
		a.req.Filter = prog.Instructions()
	}
	return a, nil
}

// resolve finds the control socket when none was given and adds the
// links of the pods asked for to the request; it returns what names the
// links' pods in the file.
func (a *captureArgs) resolve() (*podNames, error) {
	if a.path == "" {
		p, err := control.Find(a.req.Links)
		if err != nil {
			return nil, err
		}
		a.path = p
	}
	names := &podNames{path: a.path}
	if len(a.pods) > 0 {
		of, err := names.linksOf(a.pods)
		if err != nil {
			return nil, err
		}
		a.req.Links = append(a.req.Links, of...)
	}
	return names, nil
}

// stopOnSignals ends c's capture on sig: the first signal asks the daemon
// to end the stream (it sends what its buffers hold, then its totals); a
// second ends the capture at once, with what was written (interrupted),
// and if the output is stuck (a reader that stopped) ends the process as
// the signal would have. Closing ended, once the capture is over, stops
// it listening.
func stopOnSignals(c *capture.Client, sig chan os.Signal) (interrupted *atomic.Bool, ended chan struct{}) {
	interrupted, ended = new(atomic.Bool), make(chan struct{})
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
			signal.Reset(s)
			syscall.Kill(os.Getpid(), s.(syscall.Signal))
		}
	}()
	return interrupted, ended
}

// captureEnded reports on stderr how a capture that wrote n packets
// ended (err: writeCapture's), with the daemon's totals unless it was
// interrupted a second time, and returns the capture's error.
func captureEnded(c *capture.Client, n uint64, err error, interrupted bool, stderr io.Writer) error {
	if interrupted {
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
// ends the stream, and returns how many it wrote; describe gives each
// interface's description (nil: none).
func writeCapture(c *capture.Client, w io.Writer, app string, describe func(link string) string) (uint64, error) {
	if describe == nil {
		describe = func(string) string { return "" }
	}
	ifs := make([]pcapng.Interface, len(c.Links()))
	for i, l := range c.Links() {
		ifs[i] = pcapng.Interface{Name: l, SnapLen: uint32(c.Hello.Snaplen), Description: describe(l)}
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
			if _, err := pw.AddInterface(pcapng.Interface{Name: l, SnapLen: uint32(c.Hello.Snaplen), Description: describe(l)}); err != nil {
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

// podNames are the pods of the daemon's links, from its link list: read
// for --pod, and again when the capture meets a link it has not seen
// (added while capturing), for the interfaces' descriptions.
type podNames struct {
	path string
	pods map[string]linkop.Pod
	seen map[string]bool // the links the last list had
}

// list reads the daemon's links and their pods.
func (p *podNames) list() error {
	c, err := linkop.Dial(p.path)
	if err != nil {
		return err
	}
	defer c.Close()
	l, err := c.ListLinks()
	if err != nil {
		return err
	}
	p.pods, p.seen = map[string]linkop.Pod{}, map[string]bool{}
	for _, k := range l.Links {
		p.seen[k.Name] = true
		if k.Pod != nil {
			p.pods[k.Name] = *k.Pod
		}
	}
	return nil
}

// linksOf are the links of the pods refs; a pod the daemon serves no link
// of is the request's fault.
func (p *podNames) linksOf(refs []linkop.Pod) ([]string, error) {
	if err := p.list(); err != nil {
		return nil, fmt.Errorf("capture: --pod: %w", err)
	}
	var links []string
	for _, ref := range refs {
		n := len(links)
		for _, name := range slices.Sorted(maps.Keys(p.pods)) {
			if p.pods[name].Is(ref) {
				links = append(links, name)
			}
		}
		if len(links) == n {
			return nil, usageError{fmt.Sprintf("capture: --pod %s: %s serves no link of that pod (xdpfwd link list shows the pods)", ref, p.path)}
		}
	}
	return links, nil
}

// describe is link's interface description: "pod NAMESPACE/NAME", or ""
// for a link that serves none (or when the daemon cannot say).
func (p *podNames) describe(link string) string {
	if !p.seen[link] && p.list() != nil { // a link added since
		if p.seen == nil {
			p.seen = map[string]bool{}
		}
		p.seen[link] = true // undescribed: not asked again
	}
	if pod, ok := p.pods[link]; ok {
		return "pod " + pod.String()
	}
	return ""
}
