package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

const linkUsage = `usage: xdpfwd link list [--json] [--control PATH]
       xdpfwd link add NAME [--mac MAC [--ip IP]...] [--port-security on|off]
                       [--ingress-rate RATE [--ingress-burst SIZE]] [--egress-rate RATE [--egress-burst SIZE]]
                       [--control PATH]
       xdpfwd link del NAME [--control PATH]

Lists a running xdpfwd's links (with their packet counters), or asks it to
forward one more link or to stop forwarding one, over its control socket.
In xconnect mode the links stay the two it started with.

A switch's link added with --mac (a pod's veth: the pod's MAC, not the
host end's) has port security unless the daemon runs with
--port-security off or the add says --port-security off: frames from
another source MAC are dropped (spoofed_source), the MAC is pinned to the
link, nothing else is learned there; with --ip, packets and ARP from
other IP addresses are dropped too (spoofed_ip).

A switch's link added with --ingress-rate or --egress-rate (a pod's
bandwidth, as Kubernetes' ingress-bandwidth and egress-bandwidth
annotations give it) is policed: frames for the link over its ingress
rate (what the pod receives) are dropped before they are sent
(tx_rate_limited), frames from it over its egress rate (what the pod
sends) as they arrive (rx_rate_limited). Rates are bits per second with SI
units (8M, 8Mbit, 1G); a burst is bytes (64KiB), by default 10 ms at the
rate, at least 64 KiB. A policer drops, it does not queue: TCP slows down
to the rate.

`

// cmdLink is `xdpfwd link`: a client of a running daemon's control socket.
func cmdLink(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("link", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("control", "", "the daemon's control socket (default: the only socket in "+control.Dir+")")
	asJSON := fs.Bool("json", false, "list: print the daemon's answer as JSON")
	var opts linkop.AddOptions
	var ips listFlag
	fs.StringVar(&opts.MAC, "mac", "", "add: the pod's MAC address, the only source its link may send from (port security)")
	fs.Var(&ips, "ip", "add: an IP address of the pod, the only ones it may send from (repeat; port security)")
	portSec := fs.String("port-security", "", "add: on or off, for this link, over the daemon's --port-security (on needs --mac)")
	var bw bandwidthFlags
	fs.Var(&bw.ingressRate, "ingress-rate", "add: police what the link's pod receives to this rate, bits/s with SI units (8M, 8Mbit, 1G); switch mode")
	fs.Var(&bw.ingressBurst, "ingress-burst", "add: the ingress policer's burst in bytes (64KiB); default 10 ms at the rate, at least 64KiB")
	fs.Var(&bw.egressRate, "egress-rate", "add: police what the link's pod sends to this rate, bits/s with SI units; switch mode")
	fs.Var(&bw.egressBurst, "egress-burst", "add: the egress policer's burst in bytes; default 10 ms at the rate, at least 64KiB")
	help := func() error {
		fmt.Fprint(stderr, linkUsage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return flag.ErrHelp
	}
	// Flags may come before or after the positional words.
	var words []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return help()
			}
			return usageError{fmt.Sprintf("link: %v (see 'xdpfwd link --help')", err)}
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(words) == 0 {
		return usageError{"link: want list, add NAME or del NAME (see 'xdpfwd link --help')"}
	}
	op, name := words[0], ""
	switch op {
	case "list":
		if len(words) != 1 {
			return usageError{fmt.Sprintf("link list: unexpected %q", words[1])}
		}
	case "add", "del":
		if len(words) != 2 {
			return usageError{fmt.Sprintf("link %s: want exactly one link NAME", op)}
		}
		name = words[1]
		if err := linkop.CheckName(name); err != nil {
			return usageError{fmt.Sprintf("link %s: %v", op, err)}
		}
		if op == "del" && (opts.MAC != "" || len(ips) > 0 || *portSec != "" || bw != (bandwidthFlags{})) {
			return usageError{"link del: --mac, --ip, --port-security and the rates and bursts are for add"}
		}
	case "help":
		return help()
	default:
		return usageError{fmt.Sprintf("link: unknown subcommand %q: want list, add or del", op)}
	}
	if op == "add" {
		if err := addOptions(&opts, ips, *portSec); err != nil {
			return usageError{"link add: " + err.Error()}
		}
		var err error
		if opts.Bandwidth, err = bw.options(); err != nil {
			return usageError{"link add: " + err.Error()}
		}
	}
	if *path == "" {
		p, err := control.Find(nil)
		if err != nil {
			return err
		}
		*path = p
	}
	c, err := linkop.Dial(*path)
	if err != nil {
		return err
	}
	defer c.Close()
	switch op {
	case "add":
		err = c.AddLinkWith(name, opts)
	case "del":
		err = c.DelLink(name)
	default:
		var l linkop.List
		if l, err = c.ListLinks(); err == nil {
			err = printLinks(stdout, l, *asJSON)
		}
	}
	var re *linkop.RequestError
	if errors.As(err, &re) {
		msg := re.Msg
		if !strings.HasPrefix(msg, "link "+op) { // the daemon's says it already
			msg = "link " + op + ": " + msg
		}
		return usageError{msg}
	}
	return err
}

// addOptions checks link add's port security flags into o: the daemon
// checks them again, but a typo is the command line's to report.
func addOptions(o *linkop.AddOptions, ips []string, portSec string) error {
	if o.MAC != "" {
		if m, err := net.ParseMAC(o.MAC); err != nil || len(m) != 6 {
			return fmt.Errorf("--mac %q: not an Ethernet address (aa:bb:cc:dd:ee:ff)", o.MAC)
		}
	}
	for _, a := range ips {
		if _, err := netip.ParseAddr(a); err != nil {
			if _, perr := netip.ParsePrefix(a); perr != nil {
				return fmt.Errorf("--ip %q: not an IP address", a)
			}
		}
	}
	o.IPs = ips
	switch portSec {
	case "":
	case "on", "off":
		on := portSec == "on"
		if on && o.MAC == "" {
			return errors.New("--port-security on needs --mac (the pod's address)")
		}
		o.PortSecurity = &on
	default:
		return fmt.Errorf("--port-security %q: want on or off", portSec)
	}
	return nil
}

func printLinks(w io.Writer, l linkop.List, asJSON bool) error {
	if asJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(struct {
			Mode  string        `json:"mode"`
			Links []linkop.Link `json:"links"`
		}{l.Mode, l.Links})
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "LINK\tMODE\tBIND\tUMEM\tRX PACKETS\tTX PACKETS\tPOLICY\t\n")
	for _, k := range l.Links {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t\n", k.Name, l.Mode, cmp.Or(k.Bind, "-"), cmp.Or(k.Domain, "-"), k.RXPackets, k.TXPackets, linkPolicy(k))
	}
	return tw.Flush()
}

// linkPolicy is link list's POLICY column: the link's port security and
// bandwidth limits, "-" for none.
func linkPolicy(k linkop.Link) string {
	var s []string
	if k.MAC != "" {
		s = append(s, "mac "+k.MAC)
	}
	if len(k.IPs) > 0 {
		s = append(s, "ip "+strings.Join(k.IPs, ","))
	}
	if b := k.Bandwidth; b != nil {
		if b.IngressRate != 0 {
			s = append(s, "in "+formatBitRate(b.IngressRate))
		}
		if b.EgressRate != 0 {
			s = append(s, "out "+formatBitRate(b.EgressRate))
		}
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}

// handle serves one connection of the control socket: a link request
// (its first line's "op") or, as ever, a capture.
func (cs *controlSocket) handle(c net.Conn) {
	op, rc, err := control.ReadOp(c, 10*time.Second)
	if err != nil {
		// Too long, too slow: said, for a client still reading.
		control.RefuseRequest(c, err)
		c.Close()
		return
	}
	if linkop.IsOp(op) {
		linkop.Serve(rc, daemonLinks{cs})
		return
	}
	if op != "" && op != "capture" {
		defer rc.Close()
		b, _ := json.Marshal(linkop.Reply{Error: fmt.Sprintf("unknown op %q: want capture (no op), %s, %s or %s", op, linkop.OpList, linkop.OpAdd, linkop.OpDel), BadRequest: true})
		rc.Write(append(b, '\n'))
		return
	}
	capture.Serve(rc, cs.hub.Load())
}

// daemonLinks is the daemon's linkop.Manager: the current forwarder's
// links. Adding and removing need the forwarder to be a
// linkop.LinkManager (issue 21's Forwarder.AddLink and RemoveLink); until
// it is, they are refused, never pretended.
type daemonLinks struct{ cs *controlSocket }

var errNoForwarder = errors.New("no forwarder is running")

func (d daemonLinks) List() (linkop.List, error) {
	f := d.cs.fw.Load()
	if f == nil {
		return linkop.List{}, errNoForwarder
	}
	l := linkop.List{Mode: d.cs.mode, Queues: f.Plan().Queues}
	// Why an add would be refused, for the CNI plugin's STATUS; not
	// while the forwarder is stopped for a rebuild, which adds wait for
	// (change).
	if _, err := d.manager(f, "add", "LINK"); err != nil {
		l.AddRefused = err.Error()
	} else if err := f.LinksChangeable(); err != nil && !f.Stopping() {
		l.AddRefused = err.Error()
	}
	// The plugin's STATUS: a daemon draining or stalled is not
	// available, though it answers.
	l.Health, l.HealthDetail = health(f, d.cs.stopping.Load())
	var ports map[string]modes.Port
	var limits map[string]modes.Limits
	if sw := d.cs.sw; sw != nil {
		ports, limits = sw.Ports(), sw.PortLimits()
	}
	for i, name := range f.Links() {
		if name == "" {
			continue // a removed link's index
		}
		st := f.LinkStats(i)
		k := linkop.Link{Name: name, RXPackets: st.RXPackets, TXPackets: st.TXPackets, Bind: st.BindMode, Domain: st.Domain}
		if p, ok := ports[name]; ok {
			k.MAC = p.MAC.String()
			for _, a := range p.IPs {
				k.IPs = append(k.IPs, a.String())
			}
		}
		if b, ok := limits[name]; ok {
			k.Bandwidth = &linkop.Bandwidth{IngressRate: b.IngressRate, IngressBurst: b.IngressBurst, EgressRate: b.EgressRate, EgressBurst: b.EgressBurst}
		}
		l.Links = append(l.Links, k)
	}
	return l, nil
}

func (d daemonLinks) Add(name string) error {
	return d.change("add", name, linkop.LinkManager.AddLink)
}

func (d daemonLinks) Del(name string) error {
	return d.change("del", name, func(lm linkop.LinkManager, name string) error {
		err := lm.RemoveLink(name)
		d.cs.releasePort(name, err)
		return err
	})
}

// defaultRebuildWait bounds how long a link request waits for the
// forwarder being rebuilt: well within the client's linkop.AddTimeout,
// so that it hears why.
const defaultRebuildWait = 10 * time.Second

// change makes a link change on the current forwarder.
//
// A forwarder that has stopped (its Run returned: a link's queue count
// changed, or --wait-for-links waits for a link, and cmdRun builds the
// next) refuses every change as unsupported, which the CNI plugin would
// take for a definite refusal; the request waits for the next forwarder
// instead and is made on it, or fails after a while (defaultRebuildWait) as one to try
// again (no code: the CNI plugin's "try again later", 11). A change
// that the forwarder refuses as the input's fault (fwd.InputError:
// --max-links taken, an MTU its frames cannot hold) is a refusal
// (linkop.Refused): `xdpfwd link` exits 2 and the CNI plugin gives a
// definite code.
func (d daemonLinks) change(op, name string, do func(linkop.LinkManager, string) error) error {
	start := time.Now()
	for {
		f, next, wait := d.cs.forwarder()
		if f == nil {
			return fmt.Errorf("link %s %s: %w", op, name, errNoForwarder)
		}
		lm, err := d.manager(f, op, name)
		if err == nil {
			d.cs.linkOps.Lock()
			err = do(lm, name)
			if err == nil {
				if serr := d.cs.saveLinks(f, d.cs.given); serr != nil && d.cs.log != nil {
					d.cs.log.Error("link state not written: this link is not added back if the daemon restarts", "link", name, "err", serr)
				}
			}
			d.cs.linkOps.Unlock()
		}
		if err == nil || !f.Stopping() {
			if fwd.IsInputError(err) {
				return linkop.Refused(err)
			}
			return err
		}
		t := time.NewTimer(time.Until(start.Add(wait)))
		select {
		case <-next:
			t.Stop()
		case <-t.C:
			return fmt.Errorf("link %s %s: the forwarder is being rebuilt, and the next was not ready within %v: try again", op, name, wait)
		}
	}
}

func (d daemonLinks) manager(f *fwd.Forwarder, op, name string) (linkop.LinkManager, error) {
	if d.cs.mode == "xconnect" {
		return nil, fmt.Errorf("link %s %s: xconnect mode forwards exactly its two links: %w", op, name, linkop.ErrUnsupported)
	}
	if !linksAtRuntime(d.cs.mode) {
		return nil, fmt.Errorf("link %s %s: %s mode's links are fixed at start (switch, reflect and sink take links while running): %w", op, name, d.cs.mode, linkop.ErrUnsupported)
	}
	return linkManager(f, op, name)
}

// linkManager is f as a linkop.LinkManager, or the error that says which
// capability it lacks.
func linkManager(f *fwd.Forwarder, op, name string) (linkop.LinkManager, error) {
	if lm, ok := any(f).(linkop.LinkManager); ok {
		return lm, nil
	}
	return nil, fmt.Errorf("link %s %s: this xdpfwd's forwarder has no AddLink/RemoveLink (links fixed at start, issue 21): restart it with the link in --link: %w", op, name, linkop.ErrUnsupported)
}
