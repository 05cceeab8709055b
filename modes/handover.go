package modes

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/xdpfwd/xdpfwd/fdb"
)

// A switch's state, for a successor that takes the datapath over
// (fwd.Forwarder's handover): its ports' VLANs, their security and what
// became of their addresses, its limits and how full their buckets are,
// and the addresses it learned with their age. Times go across as
// durations from now: the two processes' clocks start apart. Static
// entries do not go: ports' pins are made again from their ports, and
// --fdb-static is the successor's own flag.

// SwitchState is a switch's state as Export gives it.
type SwitchState struct {
	Ports  []PortState  `json:"ports,omitempty"`
	Limits []LimitState `json:"limits,omitempty"`
	// VLANs are the ports' VLANs (vlan.go), by link name.
	VLANs map[string]VLANs `json:"vlans,omitempty"`
	// Learned are the addresses learned, with how long ago each was
	// last seen (Age).
	Learned []fdb.Entry `json:"learned,omitempty"`
}

// PortState is one port's security and its address's status.
type PortState struct {
	Name   string   `json:"name"`
	MAC    string   `json:"mac"`
	IPs    []string `json:"ips,omitempty"`
	Status string   `json:"status,omitempty"` // "" (pinned), provisional or revoked
	// For is how much longer a provisional takeover stays provisional
	// (0: for the table's age from the link's next add).
	For time.Duration `json:"for_ns,omitempty"`
}

// LimitState is one port's limits and how far ahead of now each bucket
// is (its debt: how long until it is full again).
type LimitState struct {
	Name    string        `json:"name"`
	Limits  Limits        `json:"limits"`
	InDebt  time.Duration `json:"in_debt_ns,omitempty"`
	OutDebt time.Duration `json:"out_debt_ns,omitempty"`
}

// Export is the switch's state now. Call it with the workers parked, so
// that nothing moves while it reads.
func (s *Switch) Export() SwitchState {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var st SwitchState
	if len(s.vlans) > 0 {
		st.VLANs = maps.Clone(s.vlans)
	}
	for _, name := range slices.Sorted(maps.Keys(s.ports)) {
		p := s.ports[name]
		ps := PortState{Name: name, MAC: p.MAC.String()}
		for _, a := range p.IPs {
			ps.IPs = append(ps.IPs, a.String())
		}
		switch h := s.holds[name]; h.status {
		case PortRevoked:
			ps.Status = PortRevoked.String()
		case PortProvisional:
			if h.until == 0 || h.until > now {
				ps.Status = PortProvisional.String()
				if h.until != 0 {
					ps.For = time.Duration(h.until - now)
				}
			}
		}
		st.Ports = append(st.Ports, ps)
	}
	for _, name := range slices.Sorted(maps.Keys(s.limits)) {
		ls := LimitState{Name: name, Limits: s.limits[name]}
		if i := slices.Index(s.names[:], name); i >= 0 {
			if pl := s.limiters[i].Load(); pl != nil {
				ls.InDebt, ls.OutDebt = pl.in.debt(now), pl.out.debt(now)
			}
		}
		st.Limits = append(st.Limits, ls)
	}
	for e := range s.Table.All(now) {
		if !e.Static {
			e.MAC = slices.Clone(e.MAC)
			st.Learned = append(st.Learned, e)
		}
	}
	return st
}

// Import takes over a predecessor's state (Export) on a switch whose
// links were added as the predecessor had them (fwd.Adopt tells it, by
// name and index): ports, their status and pins, limits and their
// buckets' debts, and the learned addresses. Call it before the workers
// run.
func (s *Switch) Import(st SwitchState) error {
	// VLANs first: a secured port's address is pinned in its VLAN.
	for _, name := range slices.Sorted(maps.Keys(st.VLANs)) {
		if err := s.SetVLANs(name, st.VLANs[name]); err != nil {
			return fmt.Errorf("switch state: %w", err)
		}
	}
	for _, ps := range st.Ports {
		p, err := parsePort(ps)
		if err != nil {
			return err
		}
		if err := s.SecurePort(ps.Name, p); err != nil {
			return err
		}
		if err := s.setStatus(ps); err != nil {
			return err
		}
	}
	for _, ls := range st.Limits {
		if err := s.LimitPort(ls.Name, ls.Limits); err != nil {
			return err
		}
		s.setDebts(ls)
	}
	now := s.now()
	for _, e := range st.Learned {
		if len(e.MAC) != 6 || uint(e.Link) >= fdb.MaxLinks {
			return fmt.Errorf("switch state: learned entry %+v", e)
		}
		s.Table.Learn(fdb.Key(e.MAC, e.VLAN), e.Link, now-int64(e.Age))
	}
	return nil
}

func parsePort(ps PortState) (Port, error) {
	mac, err := net.ParseMAC(ps.MAC)
	if err != nil {
		return Port{}, fmt.Errorf("switch state: port %s: %w", ps.Name, err)
	}
	p := Port{MAC: mac}
	for _, s := range ps.IPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return Port{}, fmt.Errorf("switch state: port %s: %w", ps.Name, err)
		}
		p.IPs = append(p.IPs, a)
	}
	return p, nil
}

// setStatus gives port ps.Name the status it had: revoked (its guard too,
// if its link is here), or provisional for what is left of it.
func (s *Switch) setStatus(ps PortState) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.names[:], ps.Name)
	switch ps.Status {
	case "":
		delete(s.holds, ps.Name)
		if i >= 0 {
			s.provisional[i].Store(0)
		}
	case PortRevoked.String():
		s.holds[ps.Name] = hold{status: PortRevoked}
		if i >= 0 {
			s.revoke(i, ps.Name, s.ports[ps.Name].MAC, -1)
			s.Table.Unpin(s.ports[ps.Name].MAC, s.accessVLAN(ps.Name), i)
		}
	case PortProvisional.String():
		h := hold{status: PortProvisional}
		if ps.For > 0 {
			h.until = s.now() + int64(ps.For)
		}
		s.holds[ps.Name] = h
		if i >= 0 {
			s.provisional[i].Store(h.until)
		}
	default:
		return fmt.Errorf("switch state: port %s: status %q", ps.Name, ps.Status)
	}
	return nil
}

// setDebts puts the buckets of port ls.Name where the predecessor's were.
func (s *Switch) setDebts(ls LimitState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.names[:], ls.Name)
	if i < 0 {
		return
	}
	if pl := s.limiters[i].Load(); pl != nil {
		now := s.now()
		pl.in.setDebt(now, ls.InDebt)
		pl.out.setDebt(now, ls.OutDebt)
	}
}

// debt is how long until b is full again, from now (0: full, or no
// bucket).
func (b *TokenBucket) debt(now int64) time.Duration {
	if b == nil {
		return 0
	}
	return time.Duration(max(0, b.tat.Load()-now<<tickShift) >> tickShift)
}

// setDebt makes b full again d from now.
func (b *TokenBucket) setDebt(now int64, d time.Duration) {
	if b != nil && d > 0 {
		b.tat.Store((now + int64(d)) << tickShift)
	}
}
