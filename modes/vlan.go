package modes

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// VLAN networks: a switch port may be an access port of one VLAN or a
// trunk of several, as Open vSwitch's ports ("tag", "trunks") and
// ovs-cni's networks ("vlan", "trunk") are, so that the networks sharing
// a switch are isolated from each other. The model (docs/vlans.md; the
// table of every case is vlan_test.go's):
//
//   - a frame's VLAN is decided where it comes in (classify): an access
//     port's frames are in its VLAN; a trunk's, in their outer 802.1Q
//     tag's (0, the untagged network, without one); a frame a port may
//     not send is spoofed_vlan, and is neither learned nor sent;
//   - it is learned, looked up and flooded within its VLAN only: the
//     table is keyed by VLAN and MAC, and a flood goes to the ports of
//     its VLAN;
//   - it leaves an access port untagged, a trunk tagged with its VLAN
//     (VLAN 0 untagged): the forwarder pushes, rewrites or pops the tag
//     per link (fwd.Packet.SetVLAN).
//
// A port with no VLANs (the zero value, every port before VLANs) is a
// trunk of every VLAN: the uplink to a switch that sorts them out, as a
// port without "tag" or "trunks" is in Open vSwitch.

// MaxVID is the highest VLAN ID (4095 is reserved).
const MaxVID = 4094

// vlanIDs is how many VIDs a tag holds: 4095 too, which a frame from a
// port of every VLAN may carry.
const vlanIDs = 4096

// VLANs is a switch port's VLAN membership:
//
//   - Access N (1..4094): an access port of VLAN N. Its untagged frames,
//     and those with one 802.1Q priority tag (VID 0), are in VLAN N; any
//     other tag it sends (another VID, a second tag, 802.1ad) is
//     spoofed_vlan. It receives VLAN N's frames, untagged, and no other.
//   - Trunk: a trunk of the VLANs listed (0..4094; 0 is the untagged
//     network). A frame it sends with an outer 802.1Q tag is in that
//     tag's VLAN, one without in VLAN 0; a VLAN not listed is
//     spoofed_vlan. It receives the listed VLANs' frames, tagged (VLAN
//     0's untagged).
//   - Neither (the zero value): a port of every VLAN, as a trunk of all.
type VLANs struct {
	Access uint16   `json:"access,omitempty"`
	Trunk  []uint16 `json:"trunk,omitempty"`
}

// IsZero reports whether v is a port of every VLAN.
func (v VLANs) IsZero() bool { return v.Access == 0 && len(v.Trunk) == 0 }

// Equal reports whether v and w are the same membership.
func (v VLANs) Equal(w VLANs) bool { return v.Access == w.Access && slices.Equal(v.Trunk, w.Trunk) }

// Check says what is wrong with v, if anything.
func (v VLANs) Check() error {
	switch {
	case v.Access > MaxVID:
		return fmt.Errorf("vlan %d: want 1 to %d", v.Access, MaxVID)
	case v.Access != 0 && len(v.Trunk) > 0:
		return errors.New("vlan and trunk: a port is an access port of one VLAN or a trunk, not both")
	}
	for _, id := range v.Trunk {
		if id > MaxVID {
			return fmt.Errorf("trunk VLAN %d: want 0 to %d", id, MaxVID)
		}
	}
	return nil
}

// normal is v with its trunk sorted and without repeats.
func (v VLANs) normal() VLANs {
	if len(v.Trunk) == 0 {
		return VLANs{Access: v.Access}
	}
	t := slices.Clone(v.Trunk)
	slices.Sort(t)
	return VLANs{Access: v.Access, Trunk: slices.Compact(t)}
}

// String is v as the flags and link list write it: "access 100", "trunk
// 0,100-103", or "all".
func (v VLANs) String() string {
	switch {
	case v.Access != 0:
		return "access " + strconv.Itoa(int(v.Access))
	case len(v.Trunk) > 0:
		return "trunk " + FormatTrunk(v.Trunk)
	}
	return "all"
}

// FormatTrunk writes VLAN IDs as ParseTrunk reads them, runs as ranges.
func FormatTrunk(ids []uint16) string {
	ids = VLANs{Trunk: ids}.normal().Trunk
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(ids[i])))
		if j > i {
			b.WriteString("-" + strconv.Itoa(int(ids[j])))
		}
		i = j + 1
	}
	return b.String()
}

// ParseTrunk reads a list of VLAN IDs and ranges: "0,100,200-209".
func ParseTrunk(s string) ([]uint16, error) {
	var ids []uint16
	for _, f := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		a, err := strconv.ParseUint(lo, 10, 16)
		b := a
		if err == nil && isRange {
			b, err = strconv.ParseUint(hi, 10, 16)
		}
		if err != nil || a > MaxVID || b > MaxVID || b < a {
			return nil, fmt.Errorf("trunk %q: %q is not a VLAN ID (0 to %d) or a range of them (100-199)", s, f, MaxVID)
		}
		for id := a; id <= b; id++ {
			ids = append(ids, uint16(id))
		}
	}
	return VLANs{Trunk: ids}.normal().Trunk, nil
}

// vlanPort is a port's VLANs as the switch reads them per frame:
// immutable, replaced whole.
type vlanPort struct {
	access uint16
	trunk  [vlanIDs / 64]uint64 // the VLANs a trunk carries, a bit each
}

func newVLANPort(v VLANs) *vlanPort {
	vp := &vlanPort{access: v.Access}
	for _, id := range v.Trunk {
		vp.trunk[id/64] |= 1 << (id % 64)
	}
	return vp
}

// carries reports whether the port is in VLAN id.
func (vp *vlanPort) carries(id uint16) bool {
	if vp.access != 0 {
		return id == vp.access
	}
	return vp.trunk[id/64]&(1<<(id%64)) != 0
}

// classify is the VLAN of frame f (at least 14 bytes) as it comes in on
// the port, or the cause to drop it for. A port with VLANs sends frames
// untagged or with one 802.1Q tag, whose VID 0 (a priority tag) is the
// port's untagged VLAN: another tag outermost (802.1ad, 0x9100), or a
// priority tag with another tag inside it, is spoofed_vlan, since a
// receiving kernel strips a priority tag and would take the inner tag's
// VLAN. Tags inside a tag with a VID are that VLAN's payload.
func (vp *vlanPort) classify(f []byte) (uint16, fwd.DropCause) {
	var id uint16
	switch et := binary.BigEndian.Uint16(f[12:]); {
	case et == tpid8021Q:
		if len(f) < 18 {
			return 0, fwd.CauseUnverifiable
		}
		if id = binary.BigEndian.Uint16(f[14:]) & 0xfff; id == 0 && isTPID(binary.BigEndian.Uint16(f[16:])) {
			return 0, fwd.CauseSpoofedVLAN
		}
	case isTPID(et):
		return 0, fwd.CauseSpoofedVLAN
	}
	switch {
	case vp.access == 0:
		if !vp.carries(id) {
			return 0, fwd.CauseSpoofedVLAN
		}
		return id, 0
	case id != 0:
		return 0, fwd.CauseSpoofedVLAN
	}
	return vp.access, 0
}

const tpid8021Q = 0x8100

// vlanOf is the VLAN ID of a frame's outer 802.1Q tag: 0 for a frame
// without one (an 802.1ad tag outermost included: the switch is a
// customer bridge, whose VLANs are 802.1Q's), or with a priority tag.
func vlanOf(f []byte) uint16 {
	if binary.BigEndian.Uint16(f[12:]) == tpid8021Q && len(f) >= 16 {
		return binary.BigEndian.Uint16(f[14:]) & 0xfff
	}
	return 0
}

// Untagged implements fwd.VLANHandler: the links that take VLAN vid's
// frames untagged, its access ports.
func (s *Switch) Untagged(vid uint16) fwd.LinkSet {
	return fwd.LinkSet(s.vuntagged[vid&0xfff].Load())
}

// SetVLANs makes the link named name a port of VLANs v: at once if the
// switch forwards it already (what it learned is forgotten, since it may
// be of VLANs it no longer carries), else when it is added (LinkAddedAs),
// and again whenever a link of that name is (ReleaseVLANs ends it). The
// zero value is ReleaseVLANs. A secured port (SecurePort) may be an
// access port, not a trunk: its address is pinned in its VLAN.
func (s *Switch) SetVLANs(name string, v VLANs) error {
	if name == "" {
		return errors.New("vlan: a link name is required")
	}
	if err := v.Check(); err != nil {
		return err
	}
	if v.IsZero() {
		s.ReleaseVLANs(name)
		return nil
	}
	v = v.normal()
	s.mu.Lock()
	defer s.mu.Unlock()
	if w, ok := s.vlans[name]; ok && w.Equal(v) {
		return nil
	}
	if _, secured := s.ports[name]; secured && len(v.Trunk) > 0 {
		return fmt.Errorf("vlan: %s has port security, which is an access port's: trunk %s refused", name, FormatTrunk(v.Trunk))
	}
	if _, secured := s.ports[name]; secured && slices.Contains(s.names[:], name) {
		// Its pin would move to another VLAN under its frames.
		return fmt.Errorf("vlan: %s is a secured port the switch forwards: remove it to change its VLAN", name)
	}
	s.vlans[name] = v
	for i, n := range s.names {
		if n == name {
			s.applyVLANs(i, name)
		}
	}
	return nil
}

// ReleaseVLANs makes the link named name a port of every VLAN again: for
// a link removed (or never added).
func (s *Switch) ReleaseVLANs(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vlans[name]; !ok {
		return
	}
	delete(s.vlans, name)
	for i, n := range s.names {
		if n == name {
			s.applyVLANs(i, name)
		}
	}
}

// PortVLANs are the VLANs of every link that has them, by name.
func (s *Switch) PortVLANs() map[string]VLANs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.vlans)
}

// accessVLAN is the VLAN port name's address is pinned in: its access
// VLAN, 0 for any other port. s.mu is held.
func (s *Switch) accessVLAN(name string) uint16 { return s.vlans[name].Access }

// applyVLANs puts name's VLANs, or none, on link i, and forgets what the
// link learned (of VLANs it may no longer carry). s.mu is held.
func (s *Switch) applyVLANs(i int, name string) {
	v, ok := s.vlans[name]
	old := s.vports[i].Load()
	if !ok && old == nil {
		return
	}
	// In an order that never leaves the link, for a frame switched
	// meanwhile, in a VLAN neither config gives it: restricted to its
	// VLANs (vlanned) before its memberships change, a port of every VLAN
	// only once it is in none.
	bit := uint64(1) << uint(i)
	if ok {
		s.vlanned.Or(bit)
	}
	if old != nil {
		s.setMember(old, bit, false)
	}
	if ok {
		vp := newVLANPort(v)
		s.vports[i].Store(vp)
		s.setMember(vp, bit, true)
	} else {
		s.vports[i].Store(nil)
		s.vlanned.And(^bit)
	}
	if s.guards[i].Load() == nil { // a secured port's pin stays: its VLAN is set before it is added
		s.Table.Forget(i)
	}
}

// setMember adds bit (a link's) to, or takes it from, the member sets of
// the VLANs vp carries and the untagged set of its access VLAN.
func (s *Switch) setMember(vp *vlanPort, bit uint64, in bool) {
	set := func(a *[vlanIDs]atomic.Uint64, id uint16) {
		if in {
			a[id].Or(bit)
		} else {
			a[id].And(^bit)
		}
	}
	if vp.access != 0 {
		set(&s.vmembers, vp.access)
		set(&s.vuntagged, vp.access)
		return
	}
	for id := range uint16(MaxVID + 1) {
		if vp.carries(id) {
			set(&s.vmembers, id)
		}
	}
}
