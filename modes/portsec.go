package modes

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"net"
	"net/netip"
	"slices"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
)

// Port security: a switch port that is a pod's (a link the CNI plugin
// added) carries the pod's MAC address and, optionally, its IP addresses,
// as OVN's port security and Neutron's anti-spoofing rules do. What its
// frames may say is guard.go's (docs/portsecurity.md states the model);
// here, how a port gets its address:
//
//   - the MAC is a static FDB entry on the link (fdb.Table.Pin): a frame
//     from any other link with that source (the uplink included) neither
//     moves nor evicts it, and no second port may claim the address;
//   - nothing else is learned on the link: a pod cannot fill the table
//     (a flood of random source MACs is all spoofed_source).
//
// The check costs a frame one atomic load of its link's guard (nil for an
// unsecured link) and one compare; the rest, for a secured port, a look
// at the headers up to the transport's. Links without a Port (the uplink,
// --link links)
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

// Equal reports whether p and q are the same port security.
func (p Port) Equal(q Port) bool {
	return slices.Equal(p.MAC, q.MAC) && slices.Equal(p.IPs, q.IPs)
}

// Errors of SecurePort, for a port whose address cannot be pinned.
var (
	// ErrPortInUse: the MAC address is another secured link's, or static
	// on another link.
	ErrPortInUse = fdb.ErrInUse
	// ErrPortNoRoom: the MAC address's table bucket holds only other
	// static addresses (other ports' MACs that hash alike), so it could
	// not be pinned, and frames for it would be flooded.
	ErrPortNoRoom = fdb.ErrFull
)

// SecurePort gives the link named name port security p: at once if the
// switch forwards it already (its learned entries are forgotten), else
// when it is added (LinkAddedAs), and again whenever a link of that name
// is (ReleasePort ends it). A MAC address another secured link the switch
// forwards has, or one static on another link, is refused (wrapping
// ErrPortInUse), as is one the table has no room to pin (ErrPortNoRoom);
// one a link that went had is taken over. The same p again is a no-op.
// A refusal changes nothing.
//
// An address learned on another link is taken over when the port is
// added, as a pod that moved from another node takes its address with
// it; but provisionally (PortProvisional): if it is heard there again
// within the table's age, the port loses it (PortRevoked).
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
	if t := s.vlans[name].Trunk; len(t) > 0 {
		return fmt.Errorf("port security for %s: a trunk (VLANs %s) cannot be secured: port security is an access port's", name, FormatTrunk(t))
	}
	if q, ok := s.ports[name]; ok && q.Equal(p) {
		return nil
	}
	var stale []string
	for n, q := range s.ports {
		if n == name || !slices.Equal(q.MAC, p.MAC) {
			continue
		}
		if slices.Contains(s.names[:], n) {
			return fmt.Errorf("port security for %s: MAC %s is link %s's: %w", name, p.MAC, n, ErrPortInUse)
		}
		// A link that went without being released (deleted with its
		// pod, no CNI DEL yet): the pod is elsewhere now.
		stale = append(stale, n)
	}
	i := slices.Index(s.names[:], name)
	if err := s.Table.CanPin(p.MAC, s.accessVLAN(name), i); err != nil {
		if errors.Is(err, fdb.ErrFull) {
			return fmt.Errorf("port security for %s: MAC %s cannot be pinned: its table bucket holds four other static addresses: %w", name, p.MAC, err)
		}
		return fmt.Errorf("port security for %s: %w", name, err)
	}
	for _, n := range stale {
		delete(s.ports, n)
		delete(s.holds, n)
	}
	s.ports[name] = p
	delete(s.holds, name) // another address: what became of the last one is no matter
	if i >= 0 {
		s.apply(i, name)
	}
	return nil
}

// RestorePort is SecurePort for a port as the daemon saved it before it
// restarted: its pin is provisional for the table's age from when its
// link is added, as a takeover's is, since the switch has heard nothing
// of the network yet; a port saved revoked stays revoked.
func (s *Switch) RestorePort(name string, p Port, revoked bool) error {
	if err := s.SecurePort(name, p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := hold{status: PortProvisional}
	if revoked {
		h.status = PortRevoked
	}
	s.holds[name] = h
	if i := slices.Index(s.names[:], name); i >= 0 {
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
	delete(s.holds, name)
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

// Checkpoint notes the port security and limits given by name and
// returns what puts back those that changed since: for a link add that
// failed after SecurePort or LimitPort, so that the refusal changes
// nothing. Only the names whose port or limits changed are put back: a
// port revoked meanwhile by the datapath stays revoked. What a link the
// switch forwards has applied is not undone: callers refuse an add of a
// forwarded link before they change anything.
func (s *Switch) Checkpoint() (restore func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ports, holds, limits, vlans := maps.Clone(s.ports), maps.Clone(s.holds), maps.Clone(s.limits), maps.Clone(s.vlans)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for n := range joinKeys(ports, s.ports) {
			if p, ok := ports[n]; ok && p.Equal(s.ports[n]) {
				continue
			}
			putBack(s.ports, ports, n)
			putBack(s.holds, holds, n)
		}
		if s.limits == nil {
			s.limits = map[string]Limits{}
		}
		for n := range joinKeys(limits, s.limits) {
			putBack(s.limits, limits, n)
		}
		for n := range joinKeys(vlans, s.vlans) {
			putBack(s.vlans, vlans, n)
		}
	}
}

// joinKeys yields the keys of a and b.
func joinKeys[V any](a, b map[string]V) iter.Seq[string] {
	return func(yield func(string) bool) {
		for k := range a {
			if !yield(k) {
				return
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok && !yield(k) {
				return
			}
		}
	}
}

// putBack sets m[k] to what was has of it, or deletes it.
func putBack[V any](m, was map[string]V, k string) {
	if v, ok := was[k]; ok {
		m[k] = v
	} else {
		delete(m, k)
	}
}

// Secured reports whether link i's frames are checked now.
func (s *Switch) Secured(i int) bool {
	return uint(i) < fwd.MaxLinks && s.guards[i].Load() != nil
}

// PortStatus is what became of a secured port's address.
type PortStatus uint8

const (
	// PortPinned: the address is the port's static entry (or will be,
	// for a link not added yet); also the status of a name without port
	// security.
	PortPinned PortStatus = iota
	// PortProvisional: the address was learned on another link when the
	// port was added and is the port's until it is heard there again,
	// for the table's age.
	PortProvisional
	// PortRevoked: the address was heard on another link while
	// provisional, or could not be pinned: it is no longer the port's,
	// and every frame from the port is dropped (spoofed_source) until
	// it is added again.
	PortRevoked
)

func (st PortStatus) String() string {
	return [...]string{"pinned", "provisional", "revoked"}[st]
}

// PortStatus is the status of the port of the link named name.
func (s *Switch) PortStatus(name string) PortStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch h := s.holds[name]; {
	case s.ports[name].MAC == nil:
	case h.status == PortRevoked:
		return PortRevoked
	case h.status == PortProvisional && (h.until == 0 || h.until >= s.now()):
		return PortProvisional
	}
	return PortPinned
}

// hold is what a port's name keeps of its address's status while its
// link goes and comes back (a forwarder rebuilt, a daemon restarted:
// RestorePort): revoked for good, or provisional until a time (0: for
// the table's age from its link's next add).
type hold struct {
	status PortStatus
	until  int64
}

// PortEvent is a change the switch made to a secured port's address on
// its own (PortProvisional, PortRevoked), for the daemon's log: a port
// that took over an address learned elsewhere, and one that lost it.
type PortEvent struct {
	Status PortStatus
	Name   string
	Link   int
	MAC    net.HardwareAddr
	// Other is the link the address was learned on (provisional) or
	// heard on (revoked); -1 for a pin that failed.
	Other int
}

// Events delivers PortEvents as they happen. A reader that falls behind
// misses events (PortStatus says where each port stands).
func (s *Switch) Events() <-chan PortEvent { return s.events }

// emit sends e without waiting.
func (s *Switch) emit(e PortEvent) {
	select {
	case s.events <- e:
	default:
	}
}

// revoked is the guard of a port that lost its address: its MAC key
// (with fdb's valid bit) matches no frame's, so every frame is
// spoofed_source.
var revoked = &guard{}

// LinkAddedAs implements fwd.LinkNameObserver: link i, named name, is
// flooded to, and gets the port security and the bandwidth limits
// (LimitPort) given for name, if any (else none: an index a secured or
// limited link had is neither for its next link).
func (s *Switch) LinkAddedAs(i int, name string) {
	s.mu.Lock()
	s.names[i] = name
	s.applyVLANs(i, name) // before apply: a secured port's pin is in its VLAN
	s.apply(i, name)
	s.applyLimits(i, name)
	s.mu.Unlock()
	s.LinkAdded(i)
}

// apply puts name's port security, or none, on link i. s.mu is held.
func (s *Switch) apply(i int, name string) {
	s.provisional[i].Store(0)
	p, ok := s.ports[name]
	if !ok {
		s.guards[i].Store(nil)
		return
	}
	// Checked first: from here on the link learns nothing, so what it
	// learned before (a link secured while forwarded) goes.
	s.guards[i].Store(newGuard(p))
	s.Table.Forget(i)
	h := s.holds[name]
	if h.status == PortRevoked {
		s.guards[i].Store(revoked)
		return
	}
	now := s.now()
	vlan := s.accessVLAN(name)
	from, learned := s.Table.Lookup(fdb.Key(p.MAC, vlan), now)
	if err := s.Table.Pin(p.MAC, vlan, i); err != nil {
		// SecurePort found room; a pin since took it. Unpinned, the
		// pod's frames would be flooded to every link: it sends
		// nothing instead, and is told.
		s.revoke(i, name, p.MAC, -1)
		return
	}
	until := h.until
	if h.status == PortProvisional && until == 0 {
		until = now + s.age
	}
	if learned && from != i {
		until = now + s.age
		s.emit(PortEvent{Status: PortProvisional, Name: name, Link: i, MAC: p.MAC, Other: from})
	}
	if until > now {
		s.provisional[i].Store(until)
		s.holds[name] = hold{status: PortProvisional, until: until}
	} else {
		delete(s.holds, name)
	}
}

// revoke takes link i's address away from its port, name's: every frame
// from it is dropped, and what it is is kept by name (heard on link
// other; -1: its pin failed). s.mu is held.
func (s *Switch) revoke(i int, name string, mac net.HardwareAddr, other int) {
	s.provisional[i].Store(0)
	s.guards[i].Store(revoked)
	s.holds[name] = hold{status: PortRevoked}
	s.emit(PortEvent{Status: PortRevoked, Name: name, Link: i, MAC: mac, Other: other})
}

// heardElsewhere is a frame from link in whose source, key, is static on
// another link: if that link's port took the address over provisionally,
// it loses it, and the address is learned where it was heard.
func (s *Switch) heardElsewhere(key uint64, in int, now int64) {
	l, ok := s.Table.Lookup(key, now)
	if !ok || l == in || uint(l) >= fwd.MaxLinks {
		return
	}
	if d := s.provisional[l].Load(); d == 0 || now > d {
		return // a pin for good: counted (fdb's conflicts), kept
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := s.provisional[l].Load(); d == 0 || now > d {
		return // another worker was first
	}
	mac := net.HardwareAddr{byte(key >> 40), byte(key >> 32), byte(key >> 24), byte(key >> 16), byte(key >> 8), byte(key)}
	s.revoke(l, s.names[l], mac, in)
	s.Table.Unpin(mac, uint16(key>>48)&0xfff, l)
	s.Table.Learn(key, in, now)
}
