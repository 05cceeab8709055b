package topo

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/rps"
)

// Options for NewPair. The zero value gives one queue, MTU 1500, TX checksum
// offload off, the kernel's default VLAN offloads (on) and no VLAN.
type Options struct {
	Queues     int  // rx/tx queue count of every veth end (0: 1)
	MTU        int  // MTU of all four veth ends (0: 1500)
	TxChecksum bool // keep TX checksum offload on the namespace-side ends (see ethtool.SetTxChecksum)
	VLAN       int  // if > 0, add a VLAN sub-interface with this ID on each namespace-side end
	// RPSCPUs, if set, steers the namespace-side ends' receive processing
	// to these CPUs (RPS), as xdpfwd's CNI plugin does for pods: without
	// it a veth runs it on the CPU that sent, a forwarder's.
	RPSCPUs []int
}

// Pair is two network namespaces, A and B, each joined to the root namespace
// by a veth pair. The root-side ends (LinkA, LinkB) are what a forwarder
// joins; A and B cannot reach each other until one does.
type Pair struct {
	Name         string // unique prefix of every name below
	A, B         *NS
	LinkA, LinkB string // root-side ends: UP, no addresses, IPv6 disabled
	PeerA, PeerB string // namespace-side ends, "eth0" inside A and B, UP

	V4A, V4B netip.Addr // 198.18.0.1/24 and .2/24 (RFC 2544 benchmark range)
	V6A, V6B netip.Addr // fd00:5844:5046::1/64 and ::2/64, without DAD

	// VLANv4A and VLANv4B are 198.19.<VLAN%256>.1/24 and .2/24 on the VLAN
	// sub-interfaces; invalid unless Options.VLAN > 0.
	VLANv4A, VLANv4B netip.Addr

	mu           sync.Mutex // serializes Close and SetMTU
	rootA, rootB rootLink
	vlan         int
}

// ErrVLANUnsupported is returned by NewPair when Options.VLAN is set but the
// kernel cannot create VLAN interfaces (built without CONFIG_VLAN_8021Q, or
// the 8021q module is unavailable). Tests can skip on it, or check tagged
// forwarding with VLANFrames, which needs no VLAN interfaces.
var ErrVLANUnsupported = errors.New("kernel has no 802.1Q VLAN interface support (CONFIG_VLAN_8021Q)")

const (
	peerName = "eth0"
	v4Bits   = 24
	v6Bits   = 64
)

var (
	v4A = netip.MustParseAddr("198.18.0.1")
	v4B = netip.MustParseAddr("198.18.0.2")
	v6A = netip.MustParseAddr("fd00:5844:5046::1")
	v6B = netip.MustParseAddr("fd00:5844:5046::2")
)

// rootLink tracks a root-side veth end we created. The index guards against
// deleting a link that replaced ours under the same name.
type rootLink struct {
	name    string
	index   int // 0 if unknown
	created bool
}

// NewPair builds a Pair with fresh, uniquely named namespaces and links:
// namespaces "xdpfwd-<id>-a" and "-b" under /run/netns, root-side links
// "xf<id>a" and "xf<id>b". On error everything created so far is removed.
func NewPair(opt Options) (*Pair, error) {
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	return newPair(opt, id)
}

// randomID is the unique part of the names a topology creates.
func randomID() (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("topo: random id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func (opt Options) validate() error {
	switch {
	case opt.Queues < 0:
		return fmt.Errorf("negative queue count %d", opt.Queues)
	case opt.MTU < 0:
		return fmt.Errorf("negative MTU %d", opt.MTU)
	case opt.VLAN < 0 || opt.VLAN > 4094:
		return fmt.Errorf("VLAN ID %d out of range 1..4094", opt.VLAN)
	}
	return nil
}

// newPair is NewPair with a chosen id, so tests can predict the names.
func newPair(opt Options, id string) (_ *Pair, err error) {
	name := "xdpfwd-" + id
	if err := opt.validate(); err != nil {
		return nil, fmt.Errorf("topo: pair %s: %w", name, err)
	}
	if opt.Queues == 0 {
		opt.Queues = 1
	}
	if opt.MTU == 0 {
		opt.MTU = 1500
	}
	p := &Pair{
		Name:  name,
		LinkA: "xf" + id + "a",
		LinkB: "xf" + id + "b",
		PeerA: peerName,
		PeerB: peerName,
		V4A:   v4A,
		V4B:   v4B,
		V6A:   v6A,
		V6B:   v6B,
		vlan:  opt.VLAN,
	}
	p.rootA.name, p.rootB.name = p.LinkA, p.LinkB
	if opt.VLAN > 0 {
		p.VLANv4A = netip.AddrFrom4([4]byte{198, 19, byte(opt.VLAN % 256), 1})
		p.VLANv4B = netip.AddrFrom4([4]byte{198, 19, byte(opt.VLAN % 256), 2})
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("topo: pair %s: %w", p.Name, errors.Join(err, p.Close()))
		}
	}()

	if p.A, err = newNS(p.Name + "-a"); err != nil {
		return nil, err
	}
	if p.B, err = newNS(p.Name + "-b"); err != nil {
		return nil, err
	}
	if err = p.addSide(p.A, &p.rootA, p.V4A, p.V6A, p.VLANv4A, opt); err != nil {
		return nil, err
	}
	if err = p.addSide(p.B, &p.rootB, p.V4B, p.V6B, p.VLANv4B, opt); err != nil {
		return nil, err
	}
	return p, nil
}

// addSide creates the veth joining ns to the root namespace and configures
// both of its ends.
func (p *Pair) addSide(ns *NS, root *rootLink, v4, v6, vlan4 netip.Addr, opt Options) error {
	// The peer is created directly inside ns, where "eth0" is free, so no
	// interface named eth0 ever appears in the root namespace (which may
	// have one of its own).
	attrs := netlink.NewLinkAttrs()
	attrs.Name = root.name
	attrs.MTU = opt.MTU
	attrs.NumTxQueues = opt.Queues
	attrs.NumRxQueues = opt.Queues
	veth := &netlink.Veth{
		LinkAttrs:     attrs,
		PeerName:      peerName,
		PeerNamespace: netlink.NsFd(ns.fd),
		PeerTxQLen:    -1, // kernel default, as for the root end
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s (peer %s in %s): %w", root.name, peerName, ns.Name, err)
	}
	root.created = true
	root.index = veth.Attrs().Index
	rl, err := netlink.LinkByName(root.name)
	if err != nil {
		return fmt.Errorf("look up veth %s: %w", root.name, err)
	}
	root.index = rl.Attrs().Index

	// Without IPv6 the root stack sends nothing (no link-local address, no
	// router or multicast listener solicitations) into the forwarder's path.
	// It must happen before the link goes up.
	if err := disableIPv6(root.name); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(rl); err != nil {
		return fmt.Errorf("set veth %s up: %w", root.name, err)
	}

	h, err := ns.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("look up lo in %s: %w", ns.Name, err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up in %s: %w", ns.Name, err)
	}
	eth, err := h.LinkByName(peerName)
	if err != nil {
		return fmt.Errorf("look up %s in %s: %w", peerName, ns.Name, err)
	}
	if err := disableOffloads(ns, peerName, opt.TxChecksum); err != nil {
		return fmt.Errorf("namespace %s: %w", ns.Name, err)
	}
	if len(opt.RPSCPUs) > 0 {
		if err := rps.Set(ns.Path(), peerName, opt.RPSCPUs); err != nil {
			return err
		}
	}
	if err := addAddr(h, ns, eth, v4, v4Bits); err != nil {
		return err
	}
	if err := addAddr(h, ns, eth, v6, v6Bits); err != nil {
		return err
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("set %s up in %s: %w", peerName, ns.Name, err)
	}
	if opt.VLAN == 0 {
		return nil
	}

	// Created after the offload changes so it inherits the parent's
	// features; with the parent's default TX VLAN offload the tag rides in
	// skb metadata, not in the frame.
	vl := &netlink.Vlan{
		LinkAttrs:    netlink.LinkAttrs{Name: vlanName(opt.VLAN), ParentIndex: eth.Attrs().Index, TxQLen: -1},
		VlanId:       opt.VLAN,
		VlanProtocol: netlink.VLAN_PROTOCOL_8021Q,
	}
	if err := h.LinkAdd(vl); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("create VLAN %s in %s: %w: %w", vl.Name, ns.Name, ErrVLANUnsupported, err)
		}
		return fmt.Errorf("create VLAN %s in %s: %w", vl.Name, ns.Name, err)
	}
	vlink, err := h.LinkByName(vl.Name)
	if err != nil {
		return fmt.Errorf("look up VLAN %s in %s: %w", vl.Name, ns.Name, err)
	}
	if err := addAddr(h, ns, vlink, vlan4, v4Bits); err != nil {
		return err
	}
	if err := h.LinkSetUp(vlink); err != nil {
		return fmt.Errorf("set VLAN %s up in %s: %w", vl.Name, ns.Name, err)
	}
	return nil
}

// disableOffloads turns off TX checksum offload on ifname inside ns unless
// keepTxChecksum, so that every frame a forwarder sees carries a complete
// checksum. VLAN offloads keep the kernel's default (on), as in a
// container: a tag sent through a VLAN device then travels in skb metadata,
// not in the frame, and the forwarder must put it back (xsk.MetaVLAN).
func disableOffloads(ns *NS, ifname string, keepTxChecksum bool) error {
	if keepTxChecksum {
		return nil
	}
	return ns.Do(func() error { return ethtool.SetTxChecksum(ifname, false) })
}

func vlanName(id int) string { return peerName + "." + strconv.Itoa(id) }

// addAddr adds addr/bits to link. IPv6 addresses skip duplicate address
// detection: nothing else uses them, and a tentative address could not be
// bound to or sent from until DAD finished.
func addAddr(h *netlink.Handle, ns *NS, link netlink.Link, addr netip.Addr, bits int) error {
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   addr.AsSlice(),
		Mask: net.CIDRMask(bits, addr.BitLen()),
	}}
	if addr.Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(link, a); err != nil {
		return fmt.Errorf("add %s/%d to %s in %s: %w", addr, bits, link.Attrs().Name, ns.Name, err)
	}
	return nil
}

// disableIPv6 turns IPv6 off on a link of the calling thread's namespace. A
// kernel without IPv6 has nothing to turn off.
func disableIPv6(ifname string) error {
	path := "/proc/sys/net/ipv6/conf/" + ifname + "/disable_ipv6"
	err := os.WriteFile(path, []byte("1\n"), 0)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat("/proc/sys/net/ipv6"); errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("disable IPv6 on %s: %w", ifname, err)
	}
	return nil
}

// SetMTU sets the MTU of all four veth ends (and of the VLAN sub-interfaces,
// if any).
func (p *Pair) SetMTU(mtu int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, name := range []string{p.LinkA, p.LinkB} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("topo: look up veth %s: %w", name, err)
		}
		if err := netlink.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("topo: set MTU %d on %s: %w", mtu, name, err)
		}
	}
	names := []string{peerName}
	if p.vlan > 0 {
		// After the parent: a VLAN device's MTU may not exceed it.
		names = append(names, vlanName(p.vlan))
	}
	for _, ns := range []*NS{p.A, p.B} {
		if err := setMTUIn(ns, names, mtu); err != nil {
			return fmt.Errorf("topo: %w", err)
		}
	}
	return nil
}

func setMTUIn(ns *NS, names []string, mtu int) error {
	h, err := ns.handle()
	if err != nil {
		return err
	}
	defer h.Close()
	for _, name := range names {
		l, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("look up %s in %s: %w", name, ns.Name, err)
		}
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("set MTU %d on %s in %s: %w", mtu, name, ns.Name, err)
		}
	}
	return nil
}

// Close removes both root-side veths (which takes their peers with them) and
// both namespaces. It only removes what this Pair created, may be called more
// than once, and is safe on a partially built or zero Pair.
func (p *Pair) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	// Links first: deleting a veth is synchronous, while a namespace, and
	// the veth ends inside it, is torn down asynchronously by the kernel.
	for _, rl := range []*rootLink{&p.rootA, &p.rootB} {
		if err := rl.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, ns := range []*NS{p.A, p.B} {
		if ns == nil {
			continue
		}
		if err := ns.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (rl *rootLink) remove() error {
	if !rl.created {
		return nil
	}
	l, err := netlink.LinkByName(rl.name)
	var nf netlink.LinkNotFoundError
	switch {
	case errors.As(err, &nf):
		rl.created = false
		return nil
	case err != nil:
		return fmt.Errorf("look up veth %s: %w", rl.name, err)
	case rl.index != 0 && l.Attrs().Index != rl.index:
		// Ours is gone and somebody else's link has the name now.
		rl.created = false
		return nil
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete veth %s: %w", rl.name, err)
	}
	rl.created = false
	return nil
}
