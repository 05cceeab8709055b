package topo

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// vlanInnerType is the EtherType inside the 802.1Q tag.
	vlanInnerType = localEtherType
	vlanMarkerLen = markerLen
	vlanSeqLen    = seqLen
	vlanPayload   = 64 // marker, sequence number, filler
	vlanHdrLen    = 2*6 + 4 + 2
	vlanFrameLen  = vlanHdrLen + vlanPayload // well above the 60-byte minimum
	vlanQuiet     = 200 * time.Millisecond
)

// vlanResult is the detailed outcome of vlanFrames.
type vlanResult struct {
	Sent       int // frames sent
	Matched    int // distinct frames that arrived unchanged
	Auxdata    int // of Matched: tag reported through PACKET_AUXDATA
	InData     int // of Matched: tag still in the frame data
	Duplicates int // unchanged frames whose sequence number was seen before
	Altered    int // frames with this call's marker that differ from what was sent
}

// VLANFrames sends count Ethernet frames tagged with 802.1Q VLAN id vid (and
// a distinct payload marker per call) from the namespace-side end (eth0) of
// src to the MAC address of eth0 in dst, using AF_PACKET raw sockets, and
// returns how many arrived at dst's eth0 carrying the same VLAN id and
// byte-identical payload. Bounded by timeout.
//
// The frames carry the tag in their data (not in skb metadata), the
// EtherType 0x88b5 (local experimental) inside it, and a random per-call
// marker and a sequence number in the payload, so no protocol stack reacts
// to them and stray frames are not counted. The receiving kernel moves the
// tag of an arriving frame into skb metadata whether or not it has 802.1Q
// support, so the receiver reads it through PACKET_AUXDATA; a tag still in
// the frame data is accepted too. The whole frame, addresses included, must
// be unchanged.
//
// Frames are sent and checked as SendFrames does, paced the same way.
// Receiving stops once every frame arrived, at timeout, or after 200 ms
// without a frame of this call once all were sent. Loss is a measurement,
// not an error: nothing arriving returns 0 and no error. A frame carrying this
// call's marker but altered in any way (tag lost or changed, bytes changed)
// is not counted and is reported as an error, together with the count.
func VLANFrames(src, dst *NS, vid uint16, count int, timeout time.Duration) (int, error) {
	r, err := vlanFrames(src, dst, vid, count, timeout)
	return r.Matched, err
}

// vlanSpec describes the frames of one vlanFrames call.
type vlanSpec struct {
	dst, src net.HardwareAddr
	vid      uint16
	count    int
	marker   [vlanMarkerLen]byte
	// offloaded: frames are sent without their tag, which a program on
	// the sender adds as skb metadata.
	offloaded bool
}

// frame returns frame seq as it must arrive: tag in the data.
func (s *vlanSpec) frame(seq uint32) []byte { return s.appendFrame(nil, int(seq)) }

// appendSent appends frame seq as the packet socket sends it to b: without
// its tag if the tag is offloaded.
func (s *vlanSpec) appendSent(b []byte, seq int) []byte {
	n := len(b)
	b = s.appendFrame(b, seq)
	if s.offloaded {
		b = append(b[:n+12], b[n+16:]...)
	}
	return b
}

// appendFrame appends frame seq, tag in the data, to b.
func (s *vlanSpec) appendFrame(b []byte, seq int) []byte {
	b = append(b, s.dst...)
	b = append(b, s.src...)
	b = binary.BigEndian.AppendUint16(b, unix.ETH_P_8021Q)
	b = binary.BigEndian.AppendUint16(b, s.vid) // PCP 0, DEI 0
	b = binary.BigEndian.AppendUint16(b, vlanInnerType)
	b = append(b, s.marker[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	for i := vlanMarkerLen + vlanSeqLen; i < vlanPayload; i++ {
		b = append(b, byte(uint32(i)*31+uint32(seq)))
	}
	return b
}

// tagSource says where a receiver found a frame's VLAN tag.
type tagSource int

const (
	tagNone tagSource = iota
	tagAuxdata
	tagInData
)

func (t tagSource) String() string {
	switch t {
	case tagAuxdata:
		return "tag from PACKET_AUXDATA"
	case tagInData:
		return "tag in data"
	}
	return "no tag"
}

// match examines one received frame, data from its Ethernet header on, and
// the PACKET_AUXDATA that came with it (nil if none). ours reports whether
// the frame carries this call's marker; if so, seq is its sequence number
// and err, if not nil, says how it differs from the frame that was sent.
func (s *vlanSpec) match(data []byte, aux *unix.TpacketAuxdata) (ours bool, seq uint32, how tagSource, err error) {
	i := bytes.Index(data, s.marker[:])
	if i < 0 {
		return false, 0, tagNone, nil
	}
	if len(data) < i+vlanMarkerLen+vlanSeqLen {
		return true, 0, tagNone, fmt.Errorf("%d-byte frame truncated after the marker", len(data))
	}
	seq = binary.BigEndian.Uint32(data[i+vlanMarkerLen:])
	if seq >= uint32(s.count) {
		return true, seq, tagNone, fmt.Errorf("sequence number %d out of range (sent %d)", seq, s.count)
	}

	got := data
	switch {
	case aux != nil && aux.Status&unix.TP_STATUS_VLAN_VALID != 0:
		// The tag was moved out of the data; put it back where it was.
		if len(data) < 12 {
			return true, seq, tagNone, fmt.Errorf("%d-byte frame", len(data))
		}
		tpid := uint16(unix.ETH_P_8021Q) // older kernels only report 802.1Q
		if aux.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = aux.Vlan_tpid
		}
		got = make([]byte, 0, len(data)+4)
		got = append(got, data[:12]...)
		got = binary.BigEndian.AppendUint16(got, tpid)
		got = binary.BigEndian.AppendUint16(got, aux.Vlan_tci)
		got = append(got, data[12:]...)
		how = tagAuxdata
	case len(data) >= 16 && binary.BigEndian.Uint16(data[12:]) == unix.ETH_P_8021Q:
		how = tagInData
	default:
		return true, seq, tagNone, fmt.Errorf("frame %d arrived without a VLAN tag (EtherType %#04x)", seq, etherType(data))
	}

	want := s.frame(seq)
	if bytes.Equal(got, want) {
		return true, seq, how, nil
	}
	if tpid, tci := binary.BigEndian.Uint16(got[12:]), binary.BigEndian.Uint16(got[14:]); tpid != unix.ETH_P_8021Q || tci != s.vid {
		return true, seq, how, fmt.Errorf("frame %d (%s): TPID %#04x TCI %#04x (VLAN id %d), want TPID %#04x TCI %#04x (VLAN id %d)",
			seq, how, tpid, tci, tci&0xfff, unix.ETH_P_8021Q, s.vid, s.vid)
	}
	if len(got) != len(want) {
		return true, seq, how, fmt.Errorf("frame %d (%s): %d bytes, want %d", seq, how, len(got), len(want))
	}
	k := firstDiff(got, want)
	return true, seq, how, fmt.Errorf("frame %d (%s): byte %d is %#02x, want %#02x", seq, how, k, got[k], want[k])
}

func etherType(b []byte) uint16 {
	if len(b) < 14 {
		return 0
	}
	return binary.BigEndian.Uint16(b[12:])
}

// vlanFrames is VLANFrames with the details.
func vlanFrames(src, dst *NS, vid uint16, count int, timeout time.Duration) (vlanResult, error) {
	name := fmt.Sprintf("vlan frames %s -> %s (VLAN %d)", src.Name, dst.Name, vid)
	if vid < 1 || vid > 4094 {
		return vlanResult{}, fmt.Errorf("%s: VLAN id out of range 1..4094", name)
	}
	return runVLANFrames(name, src, dst, vid, count, timeout, false)
}

// runVLANFrames sends the frames of VLANFrames, or, with offloaded, the same
// frames without their tag, for a program on the sender to tag (see
// OffloadedVLANFrames); either way they must arrive tagged.
func runVLANFrames(name string, src, dst *NS, vid uint16, count int, timeout time.Duration, offloaded bool) (vlanResult, error) {
	var res vlanResult
	if count < 0 {
		return res, fmt.Errorf("%s: negative count %d", name, count)
	}
	spec := vlanSpec{vid: vid, count: count, offloaded: offloaded}
	if _, err := rand.Read(spec.marker[:]); err != nil {
		return res, fmt.Errorf("%s: random marker: %w", name, err)
	}
	proto := uint16(unix.ETH_P_8021Q)
	if offloaded {
		proto = vlanInnerType
	}
	x := exchange{
		name:  name,
		count: count,
		proto: proto,
		quiet: vlanQuiet,
		prepare: func(s, d *net.Interface) error {
			spec.src, spec.dst = s.HardwareAddr, d.HardwareAddr
			return nil
		},
		frame: spec.appendSent,
		check: func(data []byte, aux *unix.TpacketAuxdata) (bool, int, int, error) {
			ours, seq, how, err := spec.match(data, aux)
			if err != nil {
				return ours, -1, int(how), err
			}
			return ours, int(seq), int(how), nil
		},
	}
	r, err := x.run(src, dst, timeout)
	res = vlanResult{
		Sent:       r.Sent,
		Matched:    r.Matched,
		Auxdata:    r.kinds[int(tagAuxdata)],
		InData:     r.kinds[int(tagInData)],
		Duplicates: r.Duplicates,
		Altered:    r.Altered,
	}
	switch {
	case err != nil:
		return res, err
	case res.Altered > 0:
		return res, fmt.Errorf("%s: %d frames arrived altered, the first: %w", name, res.Altered, r.alterations[0])
	}
	return res, nil
}
