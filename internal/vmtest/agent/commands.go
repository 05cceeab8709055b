package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// commands are what a script runs as `agent NAME ARGS...`; each returns
// the process's exit code (2: bad arguments).
var commands = map[string]func(args []string) int{
	"link":     showLink,
	"veth":     addVeth,
	"pod":      addPod,
	"tcp-send": tcpSend,
	"tcp-recv": tcpRecv,
	"udp-send": udpSend,
	"udp-recv": udpRecv,
}

// netnsDir is where `agent pod` names its namespaces, as ip-netns does;
// `nsenter --net=/run/netns/NAME` enters one.
const netnsDir = "/run/netns"

func fail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "agent: "+format+"\n", a...)
	return 1
}

func usage(u string) int {
	fmt.Fprintln(os.Stderr, "usage: agent", u)
	return 2
}

// linkState is what `agent link NAME` prints: what busybox's ip does not
// show of a link.
type linkState struct {
	XDPProgID   uint32 `json:"xdp_prog_id"`
	Promiscuity int    `json:"promiscuity"` // IFLA_PROMISCUITY: memberships, not the flag
	Up          bool   `json:"up"`
	Carrier     bool   `json:"carrier"`
	MTU         int    `json:"mtu"`
}

func showLink(args []string) int {
	if len(args) != 1 {
		return usage("link NAME")
	}
	l, err := netlink.LinkByName(args[0])
	if err != nil {
		return fail("%v", err)
	}
	a := l.Attrs()
	s := linkState{Promiscuity: a.Promisc, Up: a.Flags&net.FlagUp != 0,
		Carrier: a.OperState == netlink.OperUp, MTU: a.MTU}
	if a.Xdp != nil && a.Xdp.Attached {
		s.XDPProgID = a.Xdp.ProgId
	}
	json.NewEncoder(os.Stdout).Encode(s)
	return 0
}

// addVeth: `agent veth A B [QUEUES]`. busybox's ip cannot make a veth
// pair; the count gives both ends as many RX and TX queues.
func addVeth(args []string) int {
	if len(args) != 2 && len(args) != 3 {
		return usage("veth A B [QUEUES]")
	}
	if err := makeVeth(args[0], args[1], args[2:]); err != nil {
		return fail("veth: %v", err)
	}
	return 0
}

func makeVeth(a, b string, queues []string) error {
	q := 1
	if len(queues) == 1 {
		n, err := strconv.Atoi(queues[0])
		if err != nil || n < 1 {
			return fmt.Errorf("queues %q", queues[0])
		}
		q = n
	}
	la := netlink.LinkAttrs{Name: a, NumTxQueues: q, NumRxQueues: q}
	return netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: b, PeerNumTxQueues: uint32(q), PeerNumRxQueues: uint32(q)})
}

// addPod: `agent pod NAME LINK ADDR/PLEN [QUEUES]` makes what a CNI
// plugin makes for a pod: a namespace /run/netns/NAME, a veth pair whose
// end LINK stays here (up, for xdpfwd) and whose peer, eth0 in the pod,
// has ADDR; both namespaces' loopbacks up.
func addPod(args []string) int {
	if len(args) != 3 && len(args) != 4 {
		return usage("pod NAME LINK ADDR/PLEN [QUEUES]")
	}
	name, link := args[0], args[1]
	pfx, err := netip.ParsePrefix(args[2])
	if err != nil {
		return usage("pod NAME LINK ADDR/PLEN [QUEUES]: " + err.Error())
	}
	if err := makePod(name, link, pfx, args[3:]); err != nil {
		return fail("pod %s: %v", name, err)
	}
	return 0
}

func makePod(name, link string, addr netip.Prefix, queues []string) error {
	peer := link + "p"
	if err := makeVeth(link, peer, queues); err != nil {
		return err
	}
	ns, err := newNamedNS(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	p, err := netlink.LinkByName(peer)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetNsFd(p, int(ns)); err != nil {
		return fmt.Errorf("move %s into the pod: %w", peer, err)
	}
	l, err := netlink.LinkByName(link)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer h.Close()
	if p, err = h.LinkByName(peer); err != nil {
		return err
	}
	if err := h.LinkSetName(p, "eth0"); err != nil {
		return err
	}
	ipn := &net.IPNet{IP: addr.Addr().AsSlice(), Mask: net.CIDRMask(addr.Bits(), addr.Addr().BitLen())}
	if err := h.AddrAdd(p, &netlink.Addr{IPNet: ipn}); err != nil {
		return err
	}
	lo, err := h.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := h.LinkSetUp(lo); err != nil {
		return err
	}
	return h.LinkSetUp(p)
}

// newNamedNS makes a network namespace kept by a bind mount at
// netnsDir/name, leaving the calling thread where it was.
func newNamedNS(name string) (netns.NsHandle, error) {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return 0, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	ns, err := netns.New() // moves this thread into it
	if err != nil {
		return 0, err
	}
	defer netns.Set(orig)
	path := filepath.Join(netnsDir, name)
	f, err := os.Create(path)
	if err != nil {
		ns.Close()
		return 0, err
	}
	f.Close()
	self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
	if err := unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
		ns.Close()
		return 0, fmt.Errorf("bind %s: %w", path, err)
	}
	return ns, nil
}

// tcpSend: `agent tcp-send ADDR:PORT BYTES SECONDS` connects (retrying
// while the listener is not up yet) and sends topo's verified stream.
func tcpSend(args []string) int {
	to, n, deadline, ok := streamArgs(args)
	if !ok {
		return usage("tcp-send ADDR:PORT BYTES SECONDS")
	}
	c, err := topo.DialStream(to, deadline)
	if err != nil {
		return fail("tcp-send to %s: %v", to, err)
	}
	if err := topo.SendStream(c, n, deadline); err != nil {
		return fail("tcp-send to %s: %v", to, err)
	}
	return 0
}

// tcpRecv: `agent tcp-recv ADDR:PORT BYTES SECONDS` accepts one
// connection and verifies it carries exactly the stream tcp-send sends;
// it prints the bytes verified.
func tcpRecv(args []string) int {
	on, n, deadline, ok := streamArgs(args)
	if !ok {
		return usage("tcp-recv ADDR:PORT BYTES SECONDS")
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(on))
	if err != nil {
		return fail("tcp-recv: %v", err)
	}
	defer ln.Close()
	ln.SetDeadline(deadline)
	c, err := ln.Accept()
	if err != nil {
		return fail("tcp-recv on %s: %v", on, err)
	}
	defer c.Close()
	c.SetDeadline(deadline)
	got, _, err := topo.ReceiveStream(c, n)
	fmt.Println("verified", got)
	if err != nil {
		return fail("tcp-recv on %s: %v", on, err)
	}
	return 0
}

func streamArgs(args []string) (netip.AddrPort, int64, time.Time, bool) {
	if len(args) != 3 {
		return netip.AddrPort{}, 0, time.Time{}, false
	}
	ap, err1 := netip.ParseAddrPort(args[0])
	n, err2 := strconv.ParseInt(args[1], 10, 64)
	s, err3 := strconv.ParseFloat(args[2], 64)
	if err1 != nil || err2 != nil || err3 != nil || n < 0 || s <= 0 {
		return netip.AddrPort{}, 0, time.Time{}, false
	}
	return ap, n, time.Now().Add(time.Duration(s * float64(time.Second))), true
}

// udpSend: `agent udp-send ADDR:PORT COUNT PAYLOAD PPS` sends COUNT
// datagrams of PAYLOAD bytes paced at PPS, each starting with its
// big-endian sequence number.
func udpSend(args []string) int {
	if len(args) != 4 {
		return usage("udp-send ADDR:PORT COUNT PAYLOAD PPS")
	}
	to, err := netip.ParseAddrPort(args[0])
	count, err2 := strconv.Atoi(args[1])
	size, err3 := strconv.Atoi(args[2])
	pps, err4 := strconv.Atoi(args[3])
	if err != nil || err2 != nil || err3 != nil || err4 != nil || size < 8 || pps < 1 {
		return usage("udp-send ADDR:PORT COUNT PAYLOAD PPS")
	}
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to))
	if err != nil {
		return fail("udp-send to %s: %v", to, err)
	}
	defer c.Close()
	topo.SendPaced(c, count, size, pps)
	return 0
}

// udpRecv: `agent udp-recv ADDR:PORT SECONDS` counts datagrams until
// SECONDS pass or one second passes without any after the first, and
// prints the count.
func udpRecv(args []string) int {
	if len(args) != 2 {
		return usage("udp-recv ADDR:PORT SECONDS")
	}
	on, err := netip.ParseAddrPort(args[0])
	s, err2 := strconv.ParseFloat(args[1], 64)
	if err != nil || err2 != nil || s <= 0 {
		return usage("udp-recv ADDR:PORT SECONDS")
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(on))
	if err != nil {
		return fail("udp-recv: %v", err)
	}
	defer c.Close()
	c.SetReadBuffer(4 << 20)
	deadline := time.Now().Add(time.Duration(s * float64(time.Second)))
	fmt.Println("received", topo.CountDatagrams(c, deadline, time.Second))
	return 0
}
