// `xdpfwd link list|add|del`: a client of a running daemon's control
// socket. The daemon's side (daemonLinks) is control.go.

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

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/modes"
)

const linkUsage = `usage: xdpfwd link list [--json] [--control PATH]
       xdpfwd link add NAME [--mac MAC [--ip IP]...] [--port-security on|off]
                       [--ingress-rate RATE [--ingress-burst SIZE]] [--egress-rate RATE [--egress-burst SIZE]]
                       [--pod NAMESPACE/NAME [--pod-uid UID]] [--vlan VID | --trunk VLANS]
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
units (8M, 8Mbit, 1G), 1k..1000T; a burst is bytes (64KiB), 1518 (a full
frame) .. 4294967294, by default 10 ms at the rate, at least 64 KiB. A
policer drops, it does not queue: TCP slows down to the rate.

A link added with --pod (xdpfwd-cni names each pod's link so) is shown as
the pod's: link list's POD column and JSON, the metrics' namespace and pod
labels, the summary and xdpfwd capture --pod. A link added without serves
no pod.

A switch's link added with --vlan VID is an access port of that VLAN
(1..4094): its untagged frames are in the VLAN, it receives the VLAN's
frames untagged and no other's, and a frame it sends tagged is dropped
(spoofed_vlan). With --trunk VLANS (0,100,200-209; 0 is the untagged
network) it is a trunk of those VLANs: its frames carry their VLAN's tag
both ways, and another VLAN's are spoofed_vlan; a trunk is never secured
(--port-security on with it is refused). Without either it is a port of
every VLAN, as an uplink (docs/vlans.md).
`

// cmdLink is `xdpfwd link`: a client of a running daemon's control socket.
func cmdLink(args []string, stdout, stderr io.Writer) error {
	a, err := parseLinkArgs(args, stderr)
	if err != nil {
		return err
	}
	if a.path == "" {
		if a.path, err = control.Find(nil); err != nil {
			return err
		}
	}
	c, err := linkop.Dial(a.path)
	if err != nil {
		return err
	}
	defer c.Close()
	switch a.op {
	case "add":
		err = c.AddLinkWith(a.name, a.opts)
	case "del":
		err = c.DelLink(a.name)
	default:
		var l linkop.List
		if l, err = c.ListLinks(); err == nil {
			err = printLinks(stdout, l, a.asJSON)
		}
	}
	var re *linkop.RequestError
	if errors.As(err, &re) {
		msg := re.Msg
		if !strings.HasPrefix(msg, "link "+a.op) { // the daemon's says it already
			msg = "link " + a.op + ": " + msg
		}
		return usageError{msg}
	}
	return err
}

// linkArgs is what `xdpfwd link` was asked: op (list, add or del) of link
// name, over the control socket path ("": the only one), with add's
// options and list's format.
type linkArgs struct {
	op, name, path string
	asJSON         bool
	opts           linkop.AddOptions
}

// linkFlags are link's flags as given, before add's are checked.
type linkFlags struct {
	path, mac, portSec, pod, podUID, trunk string
	asJSON                                 bool
	ips                                    listFlag
	bw                                     bandwidthFlags
	vlan                                   uint
}

func (f *linkFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.path, "control", "", "the daemon's control socket, a `PATH` (default: the only socket in "+control.Dir+")")
	fs.BoolVar(&f.asJSON, "json", false, "list: print the daemon's answer as JSON")
	fs.StringVar(&f.mac, "mac", "", "add: the pod's `MAC` address, the only source its link may send from (port security)")
	fs.Var(&f.ips, "ip", "add: an `IP` address of the pod, the only ones it may send from (repeat; port security)")
	fs.StringVar(&f.portSec, "port-security", "", "add: port security `on|off` for this link, over the daemon's --port-security (on needs --mac)")
	fs.Var(&f.bw.ingressRate, "ingress-rate", "add: police what the link's pod receives to this `RATE`, bits/s with SI units (8M, 8Mbit, 1G); switch mode")
	fs.Var(&f.bw.ingressBurst, "ingress-burst", "add: the ingress policer's burst, `BYTES` (64KiB), 1518..4294967294; default 10 ms at the rate, at least 64KiB")
	fs.Var(&f.bw.egressRate, "egress-rate", "add: police what the link's pod sends to this `RATE`, bits/s with SI units; switch mode")
	fs.Var(&f.bw.egressBurst, "egress-burst", "add: the egress policer's burst, `BYTES`, 1518..4294967294; default 10 ms at the rate, at least 64KiB")
	fs.StringVar(&f.pod, "pod", "", "add: the pod the link serves, `NAMESPACE/NAME`, shown wherever the link is")
	fs.StringVar(&f.podUID, "pod-uid", "", "add: the pod's `UID` (with --pod)")
	fs.UintVar(&f.vlan, "vlan", 0, "add: make the link an access port of the VLAN `VID`, 1..4094; switch mode")
	fs.StringVar(&f.trunk, "trunk", "", "add: make the link a trunk of these `VLANS` (0,100,200-209; 0: untagged); switch mode")
}

// forAdd reports whether a flag only add takes was given.
func (f *linkFlags) forAdd() bool {
	return f.mac != "" || len(f.ips) > 0 || f.portSec != "" || f.bw != (bandwidthFlags{}) || f.pod != "" || f.podUID != "" || f.vlan != 0 || f.trunk != ""
}

// addOptions checks add's flags and turns them into its options.
func (f *linkFlags) addOptions() (linkop.AddOptions, error) {
	o := linkop.AddOptions{MAC: f.mac}
	err := addOptions(&o, f.ips, f.portSec)
	if err == nil {
		o.Bandwidth, err = f.bw.options()
	}
	if err == nil {
		o.Pod, err = podOption(f.pod, f.podUID)
	}
	if err == nil {
		o.VLAN, err = vlanOption(f.vlan, f.trunk)
	}
	return o, err
}

// parseLinkArgs reads link's flags, before or after its words (list, add
// NAME, del NAME), and checks them; --help or `link help` writes the
// usage to stderr.
func parseLinkArgs(args []string, stderr io.Writer) (linkArgs, error) {
	fs := flag.NewFlagSet("link", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f linkFlags
	f.register(fs)
	help := func() (linkArgs, error) {
		fmt.Fprint(stderr, linkUsage)
		printFlags(stderr, fs)
		return linkArgs{}, flag.ErrHelp
	}
	var words []string
	for rest := args; ; rest = fs.Args()[1:] {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return help()
			}
			return linkArgs{}, usageError{fmt.Sprintf("link: %v (see 'xdpfwd link --help')", err)}
		}
		if fs.NArg() == 0 {
			break
		}
		words = append(words, fs.Arg(0))
	}
	if len(words) == 0 {
		return linkArgs{}, usageError{"link: want list, add NAME or del NAME (see 'xdpfwd link --help')"}
	}
	a := linkArgs{op: words[0], path: f.path, asJSON: f.asJSON}
	switch a.op {
	case "list":
		if len(words) != 1 {
			return linkArgs{}, usageError{fmt.Sprintf("link list: unexpected %q", words[1])}
		}
	case "add", "del":
		if len(words) != 2 {
			return linkArgs{}, usageError{fmt.Sprintf("link %s: want exactly one link NAME", a.op)}
		}
		a.name = words[1]
		if err := linkop.CheckName(a.name); err != nil {
			return linkArgs{}, usageError{fmt.Sprintf("link %s: %v", a.op, err)}
		}
		if a.op == "del" && f.forAdd() {
			return linkArgs{}, usageError{"link del: --mac, --ip, --port-security, the rates and bursts, --pod, --vlan and --trunk are for add"}
		}
	case "help":
		return help()
	default:
		return linkArgs{}, usageError{fmt.Sprintf("link: unknown subcommand %q: want list, add or del", a.op)}
	}
	if a.op == "add" {
		var err error
		if a.opts, err = f.addOptions(); err != nil {
			return linkArgs{}, usageError{"link add: " + err.Error()}
		}
	}
	return a, nil
}

// vlanOption is link add's --vlan and --trunk: nil for neither.
func vlanOption(vid uint, trunk string) (*linkop.VLAN, error) {
	switch {
	case vid != 0 && trunk != "":
		return nil, errors.New("--vlan and --trunk: a port is an access port of one VLAN or a trunk, not both")
	case vid > modes.MaxVID:
		return nil, fmt.Errorf("--vlan %d: want 1..%d", vid, modes.MaxVID)
	case vid != 0:
		return &linkop.VLAN{Access: uint16(vid)}, nil
	case trunk != "":
		ids, err := modes.ParseTrunk(trunk)
		if err != nil {
			return nil, fmt.Errorf("--%w", err)
		}
		return &linkop.VLAN{Trunk: ids}, nil
	}
	return nil, nil
}

// podOption is link add's --pod and --pod-uid: nil for none.
func podOption(ref, uid string) (*linkop.Pod, error) {
	if ref == "" {
		if uid != "" {
			return nil, errors.New("--pod-uid needs --pod")
		}
		return nil, nil
	}
	p, err := linkop.ParsePod(ref)
	if err != nil {
		return nil, fmt.Errorf("--pod: %w", err)
	}
	p.UID = uid
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("--pod-uid: %w", err)
	}
	return &p, nil
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
		// The queues an added link needs (one per worker) and the CPUs
		// the workers are pinned to: what xdpfwd-cni reads to build a
		// pod's veth and steer its receive work.
		return e.Encode(struct {
			Mode   string        `json:"mode"`
			Queues int           `json:"queues"`
			CPUs   []int         `json:"cpus,omitempty"`
			Links  []linkop.Link `json:"links"`
		}{l.Mode, l.Queues, l.CPUs, l.Links})
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "LINK\tMODE\tBIND\tUMEM\tRX PACKETS\tTX PACKETS\tPOD\tPOLICY\t\n")
	for _, k := range l.Links {
		pod := "-"
		if k.Pod != nil {
			pod = k.Pod.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t\n", k.Name, l.Mode, cmp.Or(k.Bind, "-"), cmp.Or(k.Domain, "-"), k.RXPackets, k.TXPackets, pod, linkPolicy(k))
	}
	return tw.Flush()
}

// linkPolicy is link list's POLICY column: the link's port security,
// bandwidth limits and VLANs, "-" for none.
func linkPolicy(k linkop.Link) string {
	var s []string
	if k.MAC != "" {
		s = append(s, "mac "+k.MAC)
	}
	if k.PortState != "" {
		s = append(s, "("+k.PortState+")")
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
	if v := k.VLAN; v != nil {
		s = append(s, modes.VLANs{Access: v.Access, Trunk: v.Trunk}.String())
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, " ")
}
