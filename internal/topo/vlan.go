package topo

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// vlanInnerType is the EtherType inside the 802.1Q tag: IEEE 802 "local
	// experimental EtherType 1", which no protocol stack handles.
	vlanInnerType = 0x88b5
	vlanMarkerLen = 8
	vlanSeqLen    = 4
	vlanPayload   = 64 // marker, sequence number, filler
	vlanHdrLen    = 2*6 + 4 + 2
	vlanFrameLen  = vlanHdrLen + vlanPayload // well above the 60-byte minimum
	vlanQuiet     = 200 * time.Millisecond
	vlanRcvBuf    = 4 << 20

	sizeofAuxdata = 20 // struct tpacket_auxdata
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
// Receiving stops once every frame arrived, at timeout, or after 200 ms
// without a matching frame once all were sent. Loss is a measurement, not an
// error: nothing arriving returns 0 and no error. A frame carrying this
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
}

// frame returns frame seq as sent: tag in the data.
func (s *vlanSpec) frame(seq uint32) []byte {
	b := make([]byte, vlanFrameLen)
	copy(b[0:6], s.dst)
	copy(b[6:12], s.src)
	binary.BigEndian.PutUint16(b[12:], unix.ETH_P_8021Q)
	binary.BigEndian.PutUint16(b[14:], s.vid) // PCP 0, DEI 0
	binary.BigEndian.PutUint16(b[16:], vlanInnerType)
	p := b[vlanHdrLen:]
	copy(p, s.marker[:])
	binary.BigEndian.PutUint32(p[vlanMarkerLen:], seq)
	for i := vlanMarkerLen + vlanSeqLen; i < len(p); i++ {
		p[i] = byte(uint32(i)*31 + seq)
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
	k := 0
	for got[k] == want[k] {
		k++
	}
	return true, seq, how, fmt.Errorf("frame %d (%s): byte %d is %#02x, want %#02x", seq, how, k, got[k], want[k])
}

func etherType(b []byte) uint16 {
	if len(b) < 14 {
		return 0
	}
	return binary.BigEndian.Uint16(b[12:])
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocket opens an AF_PACKET raw socket on peerName in the calling
// thread's namespace. With recv, it receives every frame of that link, with
// PACKET_AUXDATA; without, it only sends. It also returns the link's index
// and MAC address.
func packetSocket(recv bool) (fd, ifindex int, mac net.HardwareAddr, err error) {
	ifi, err := net.InterfaceByName(peerName)
	if err != nil {
		return -1, 0, nil, err
	}
	if len(ifi.HardwareAddr) != 6 {
		return -1, 0, nil, fmt.Errorf("%s has no Ethernet address (%v)", peerName, ifi.HardwareAddr)
	}
	// Protocol 0 receives nothing until bound, so no frame of another link
	// slips in between socket and bind.
	fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, nil, fmt.Errorf("packet socket: %w", err)
	}
	fail := func(what string, err error) (int, int, net.HardwareAddr, error) {
		unix.Close(fd)
		return -1, 0, nil, fmt.Errorf("packet socket on %s: %s: %w", peerName, what, err)
	}
	var proto uint16 // send only
	if !recv {
		// Bound a blocking send, so the sender notices stop and deadline.
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			return fail("SO_SNDTIMEO", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return fail("PACKET_AUXDATA", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, vlanRcvBuf); err != nil {
			if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, vlanRcvBuf); err != nil {
				return fail("SO_RCVBUF", err)
			}
		}
		// ETH_P_ALL: taps see a frame before the stack, which without a
		// VLAN device for its id marks it PACKET_OTHERHOST and drops the
		// tag metadata before protocol-specific sockets get it.
		proto = unix.ETH_P_ALL
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	return fd, ifi.Index, ifi.HardwareAddr, nil
}

// vlanFrames is VLANFrames with the details.
func vlanFrames(src, dst *NS, vid uint16, count int, timeout time.Duration) (vlanResult, error) {
	var res vlanResult
	name := fmt.Sprintf("vlan frames %s -> %s (VLAN %d)", src.Name, dst.Name, vid)
	switch {
	case vid < 1 || vid > 4094:
		return res, fmt.Errorf("%s: VLAN id out of range 1..4094", name)
	case count < 0:
		return res, fmt.Errorf("%s: negative count %d", name, count)
	}
	deadline := time.Now().Add(timeout)
	spec := vlanSpec{vid: vid, count: count}
	if _, err := rand.Read(spec.marker[:]); err != nil {
		return res, fmt.Errorf("%s: random marker: %w", name, err)
	}

	rfd := -1
	err := dst.Do(func() error {
		var err error
		rfd, _, spec.dst, err = packetSocket(true)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("%s: receiver in %s: %w", name, dst.Name, err)
	}
	defer unix.Close(rfd)
	sfd, ifindex := -1, 0
	err = src.Do(func() error {
		var err error
		sfd, ifindex, spec.src, err = packetSocket(false)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("%s: sender in %s: %w", name, src.Name, err)
	}
	defer unix.Close(sfd)

	// sendDone holds the UnixNano time the sender finished, 0 while it
	// runs; stop tells the sender the receiver has given up.
	var (
		sendDone atomic.Int64
		stop     atomic.Bool
	)
	sent := 0 // the sender's until sendErrc is read
	sendErrc := make(chan error, 1)
	go func() {
		defer func() { sendDone.Store(time.Now().UnixNano()) }()
		sendErrc <- func() error {
			to := &unix.SockaddrLinklayer{
				Protocol: htons(unix.ETH_P_8021Q),
				Ifindex:  ifindex,
				Halen:    6,
			}
			copy(to.Addr[:], spec.dst)
			for sent < count {
				if stop.Load() {
					return fmt.Errorf("receiver stopped after %d of %d frames were sent", sent, count)
				}
				err := unix.Sendto(sfd, spec.frame(uint32(sent)), 0, to)
				if err != nil {
					// A full queue (ENOBUFS, at once) or socket buffer
					// (EAGAIN, after SO_SNDTIMEO) is back-pressure.
					if (errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN)) && time.Now().Before(deadline) {
						time.Sleep(50 * time.Microsecond)
						continue
					}
					return fmt.Errorf("send frame %d: %w", sent, err)
				}
				sent++
			}
			return nil
		}()
	}()

	seen := make([]bool, count)
	var (
		lastRx     = time.Now()
		recvErr    error
		firstAlter error
		buf        = make([]byte, 1<<16)
		oob        = make([]byte, unix.CmsgSpace(sizeofAuxdata))
	)
	for res.Matched < count {
		now := time.Now()
		until := deadline
		if done := sendDone.Load(); done != 0 {
			quietFrom := time.Unix(0, done)
			if lastRx.After(quietFrom) {
				quietFrom = lastRx
			}
			until = earliest(until, quietFrom.Add(vlanQuiet))
		}
		if !now.Before(until) {
			break
		}
		// Wake up periodically to notice the sender finishing.
		wait := min(until.Sub(now), 50*time.Millisecond)
		pfd := []unix.PollFd{{Fd: int32(rfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(wait/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			recvErr = fmt.Errorf("poll: %w", err)
			break
		}
		for res.Matched < count {
			n, oobn, _, from, err := unix.Recvmsg(rfd, buf, oob, unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				break
			}
			if err != nil {
				recvErr = fmt.Errorf("receive: %w", err)
				break
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue // sent from dst's eth0, not received by it
			}
			ours, seq, how, err := spec.match(buf[:n], auxdata(oob[:oobn]))
			switch {
			case !ours:
				continue
			case err != nil:
				res.Altered++
				if firstAlter == nil {
					firstAlter = err
				}
				continue
			case seen[seq]:
				res.Duplicates++
				continue
			}
			seen[seq] = true
			lastRx = time.Now()
			res.Matched++
			if how == tagAuxdata {
				res.Auxdata++
			} else {
				res.InData++
			}
		}
		if recvErr != nil {
			break
		}
	}
	// Unblock a sender that is still going before reading its count.
	stop.Store(true)
	sendErr := <-sendErrc
	res.Sent = sent

	switch {
	case recvErr != nil:
		return res, fmt.Errorf("%s: %w", name, recvErr)
	case sendErr != nil && res.Matched < count:
		return res, fmt.Errorf("%s: %w", name, sendErr)
	case res.Altered > 0:
		return res, fmt.Errorf("%s: %d frames arrived altered, the first: %w", name, res.Altered, firstAlter)
	}
	return res, nil
}

// auxdata finds the PACKET_AUXDATA control message in oob, or returns nil.
func auxdata(oob []byte) *unix.TpacketAuxdata {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA || len(m.Data) < sizeofAuxdata {
			continue
		}
		var a unix.TpacketAuxdata
		if _, err := binary.Decode(m.Data, binary.NativeEndian, &a); err != nil {
			return nil
		}
		return &a
	}
	return nil
}
