package modes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
)

// Port security: a switch port that is a pod's (a link the CNI plugin
// added) carries the pod's MAC address and, optionally, its IP addresses,
// as OVS port security and Neutron's allowed address pairs do:
//
//   - a frame from the link whose source MAC is another is dropped,
//     counted as spoofed_source; so is an ARP packet whose sender
//     hardware address is another;
//   - the MAC is a static FDB entry on the link (fdb.Table.Pin): a frame
//     from any other link with that source (the uplink included) neither
//     moves nor evicts it, and no second port may claim the address;
//   - nothing else is learned on the link: a pod cannot fill the table
//     (a flood of random source MACs is all spoofed_source);
//   - with IPs, an IPv4 packet or ARP sender from another address than
//     the port's (or 0.0.0.0, a DHCP client's or an ARP probe's), or an
//     IPv6 packet from another than the port's, a link-local one or ::
//     (duplicate address detection), is dropped, counted as spoofed_ip;
//     so is a neighbour advertisement for another's address (its target),
//     unless it follows extension headers.
//
// The check costs a frame one atomic load of its link's guard (nil for an
// unsecured link) and one compare; the IP check, for ports with IPs, a
// look at the L3 header. Links without a Port (the uplink, --link links)
// learn as before, without a limit: they are trusted, and a switch
// upstream may have any number of hosts behind them.

// Port is a secured switch port: the only source MAC address frames from
// its link may carry, and the IP addresses they may come from (none: any).
type Port struct {
	MAC net.HardwareAddr
	IPs []netip.Addr
}

// check says what is wrong with p, if anything.
func (p Port) check() error {
	if len(p.MAC) != 6 {
		return fmt.Errorf("port security: MAC %q: want a 6-byte Ethernet address", p.MAC)
	}
	if p.MAC[0]&1 != 0 || [6]byte(p.MAC) == [6]byte{} {
		return fmt.Errorf("port security: MAC %s: want a unicast address, not zero", p.MAC)
	}
	for _, a := range p.IPs {
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" {
			return fmt.Errorf("port security: IP %v: want a unicast address", a)
		}
	}
	return nil
}

func (p Port) equal(q Port) bool {
	return slices.Equal(p.MAC, q.MAC) && slices.Equal(p.IPs, q.IPs)
}

// guard is a Port as the switch checks it per frame: immutable, replaced
// whole.
type guard struct {
	mac    uint64   // fdb.Key(MAC, 0): the VLAN bits masked off the frame's key
	checkv bool     // IPs given: check them
	v4     []uint32 // the port's IPv4 addresses
	v6     [][16]byte
}

const keyVLAN = 0xfff << 48

func newGuard(p Port) *guard {
	g := &guard{mac: fdb.Key(p.MAC, 0), checkv: len(p.IPs) > 0}
	for _, a := range p.IPs {
		a = a.Unmap()
		if a.Is4() {
			b := a.As4()
			g.v4 = append(g.v4, binary.BigEndian.Uint32(b[:]))
		} else {
			g.v6 = append(g.v6, a.As16())
		}
	}
	return g
}

// verdict is the cause to drop frame f (source key src) for, or 0 to let
// it through.
func (g *guard) verdict(f []byte, src uint64) fwd.DropCause {
	if src&^keyVLAN != g.mac {
		return fwd.CauseSpoofedSource
	}
	off := 14
	etype := binary.BigEndian.Uint16(f[12:])
	if etype == 0x8100 || etype == 0x88a8 {
		if len(f) < 18 {
			return 0
		}
		off, etype = 18, binary.BigEndian.Uint16(f[16:])
	}
	switch etype {
	case 0x0806: // ARP: the sender's hardware address too
		if len(f) < off+28 {
			return 0
		}
		if fdb.Key(f[off+8:off+14], 0) != g.mac {
			return fwd.CauseSpoofedSource
		}
		if g.checkv && !g.has4(binary.BigEndian.Uint32(f[off+14:])) {
			return fwd.CauseSpoofedIP
		}
	case 0x0800:
		if g.checkv && len(f) >= off+20 && !g.has4(binary.BigEndian.Uint32(f[off+12:])) {
			return fwd.CauseSpoofedIP
		}
	case 0x86dd:
		if !g.checkv || len(f) < off+40 {
			return 0
		}
		if !g.has6(f[off+8 : off+24]) {
			return fwd.CauseSpoofedIP
		}
		// A neighbour advertisement (ICMPv6 136 right after the
		// header) for another's address: IPv6's ARP spoofing.
		if f[off+6] == 58 && len(f) >= off+64 && f[off+40] == 136 && !g.has6(f[off+48:off+64]) {
			return fwd.CauseSpoofedIP
		}
	}
	return 0
}

func (g *guard) has4(a uint32) bool {
	return a == 0 || slices.Contains(g.v4, a)
}

func (g *guard) has6(a []byte) bool {
	if a[0] == 0xfe && a[1]&0xc0 == 0x80 { // fe80::/10, link-local
		return true
	}
	b := [16]byte(a)
	return b == [16]byte{} || slices.Contains(g.v6, b)
}

// ErrPortInUse: a port's MAC address is another port's, or static on
// another link.
var ErrPortInUse = fdb.ErrInUse

// SecurePort gives the link named name port security p: at once if the
// switch forwards it already (its learned entries are forgotten), else
// when it is added (LinkAddedAs), and again whenever a link of that name
// is (ReleasePort ends it). A MAC address another secured link the switch
// forwards has, or one static on another link, is refused (wrapping
// ErrPortInUse); one a link that went had is taken over. The same p again
// is a no-op.
func (s *Switch) SecurePort(name string, p Port) error {
	if name == "" {
		return errors.New("port security: a link name is required")
	}
	if err := p.check(); err != nil {
		return err
	}
	p = Port{MAC: slices.Clone(p.MAC), IPs: slices.Clone(p.IPs)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if q, ok := s.ports[name]; ok && q.equal(p) {
		return nil
	}
	for n, q := range s.ports {
		if n == name || !slices.Equal(q.MAC, p.MAC) {
			continue
		}
		if slices.Contains(s.names[:], n) {
			return fmt.Errorf("port security for %s: MAC %s is link %s's: %w", name, p.MAC, n, ErrPortInUse)
		}
		// A link that went without being released (deleted with its
		// pod, no CNI DEL yet): the pod is elsewhere now.
		delete(s.ports, n)
	}
	i := slices.Index(s.names[:], name)
	for e := range s.Table.All(s.now()) {
		if e.Static && e.VLAN == 0 && slices.Equal(e.MAC, p.MAC) && e.Link != i {
			return fmt.Errorf("port security for %s: MAC %s is static on link %d: %w", name, p.MAC, e.Link, ErrPortInUse)
		}
	}
	if s.ports == nil {
		s.ports = map[string]Port{}
	}
	s.ports[name] = p
	if i >= 0 {
		s.apply(i, name)
	}
	return nil
}

// ReleasePort takes the link named name's port security away: for a link
// removed (or never added). A link the switch still forwards keeps it
// until it is removed.
func (s *Switch) ReleasePort(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ports, name)
}

// Ports is the port security of every link that has it, by name.
func (s *Switch) Ports() map[string]Port {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Port, len(s.ports))
	for n, p := range s.ports {
		out[n] = p
	}
	return out
}

// Secured reports whether link i's frames are checked now.
func (s *Switch) Secured(i int) bool {
	return uint(i) < fwd.MaxLinks && s.guards[i].Load() != nil
}

// LinkAddedAs implements fwd.LinkNameObserver: link i, named name, is
// flooded to, and gets the port security and the bandwidth limits
// (LimitPort) given for name, if any (else none: an index a secured or
// limited link had is neither for its next link).
func (s *Switch) LinkAddedAs(i int, name string) {
	s.mu.Lock()
	s.names[i] = name
	s.apply(i, name)
	s.applyLimits(i, name)
	s.mu.Unlock()
	s.LinkAdded(i)
}

// apply puts name's port security, or none, on link i. s.mu is held.
func (s *Switch) apply(i int, name string) {
	p, ok := s.ports[name]
	if !ok {
		s.guards[i].Store(nil)
		return
	}
	// Checked first: from here on the link learns nothing, so what it
	// learned before (a link secured while forwarded) goes.
	s.guards[i].Store(newGuard(p))
	s.Table.Forget(i)
	// SecurePort refused an address pinned elsewhere; what is left is a
	// bucket of four static addresses (fdb.ErrFull), which leaves the
	// pod's frames flooded to it, and its address learned nowhere else.
	s.Table.Pin(p.MAC, 0, i)
}
