package topo

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// FrameResult reports a SendFrames run.
type FrameResult struct {
	Sent, Matched int
	Missing       []int    // sizes (frame lengths) that did not arrive, in order, at most 50 listed
	Mismatch      []string // descriptions of frames that arrived altered (size, first differing offset), at most 20
}

const (
	// localEtherType is IEEE 802 "local experimental EtherType 1", which no
	// protocol stack handles.
	localEtherType = 0x88b5
	ethHdrLen      = 2*6 + 2
	markerLen      = 8
	seqLen         = 4

	// minFrameSize and maxFrameSize bound the frame lengths SendFrames
	// accepts: from the destination MAC to the end of the payload, no FCS.
	minFrameSize = 60
	maxFrameSize = 65535

	framesQuiet       = 300 * time.Millisecond
	maxMissingListed  = 50
	maxMismatchListed = 20
	// fillStride spreads the fill of consecutive frames over the pattern.
	fillStride = 104729

	// exchangeBuf is larger than any frame a veth can carry (MTU 65535,
	// Ethernet header and a VLAN tag), so nothing is ever truncated.
	exchangeBuf     = 1<<16 + 64
	exchangeSockBuf = 8 << 20
	// exchangeWindow is how many frames may be sent and not yet read by the
	// receiver. It keeps the receiving socket and the per-CPU backlog
	// (net.core.netdev_max_backlog, 1000 by default) from overflowing.
	exchangeWindow = 64
	// exchangeStall is how long the sender waits for the receiver to read a
	// frame when the window is full before it counts the frames in flight
	// as lost and goes on.
	exchangeStall = 10 * time.Millisecond

	sizeofAuxdata = 20 // struct tpacket_auxdata
)

// SendFrames sends one Ethernet frame of each length in sizes (length =
// bytes from the destination MAC to the end of the payload, no FCS;
// 60 ≤ size ≤ 65535) from src's eth0 to dst's eth0 MAC, using AF_PACKET raw
// sockets, and returns how many arrived at dst's eth0 byte-for-byte
// identical. The receiver takes frames up to 64 KiB, jumbo frames included.
//
// Frame seq (its index in sizes) carries EtherType 0x88b5 (local
// experimental, so no protocol stack reacts to it), a random per-call
// marker, seq and a deterministic pseudo-random fill. The sender keeps at
// most 64 frames unread by the receiver in flight (waiting up to 10 ms for
// progress before counting them lost), so the receiver is not overrun.
//
// Receiving stops once every frame arrived, at timeout, or after 300 ms
// without a frame of this call once all were sent. Loss and alteration are
// measurements, not errors: a frame that never arrived is listed in
// Missing, one that arrived only altered (bytes, length, or a VLAN tag
// added in metadata) in Mismatch, so Sent - Matched counts both. Errors are
// bad sizes, a frame larger than src's eth0 can send (MTU + 14), socket
// failures, and timeout expiring before all frames were sent.
func SendFrames(src, dst *NS, sizes []int, timeout time.Duration) (FrameResult, error) {
	var res FrameResult
	name := fmt.Sprintf("send frames %s -> %s", src.Name, dst.Name)
	largest := 0
	for i, n := range sizes {
		if n < minFrameSize || n > maxFrameSize {
			return res, fmt.Errorf("%s: frame %d: size %d out of range %d..%d", name, i, n, minFrameSize, maxFrameSize)
		}
		largest = max(largest, n)
	}
	spec := rawSpec{sizes: sizes}
	if _, err := rand.Read(spec.marker[:]); err != nil {
		return res, fmt.Errorf("%s: random marker: %w", name, err)
	}
	var want []byte // check's scratch: only the receiving goroutine uses it
	x := exchange{
		name:  name,
		count: len(sizes),
		proto: localEtherType,
		quiet: framesQuiet,
		prepare: func(s, d *net.Interface) error {
			if limit := s.MTU + ethHdrLen; largest > limit {
				return fmt.Errorf("a %d-byte frame cannot be sent: %s in %s has MTU %d, so frames are at most %d bytes (MTU + 14-byte Ethernet header)",
					largest, peerName, src.Name, s.MTU, limit)
			}
			spec.src, spec.dst = s.HardwareAddr, d.HardwareAddr
			return nil
		},
		frame: spec.appendFrame,
		check: func(data []byte, aux *unix.TpacketAuxdata) (bool, int, int, error) {
			var (
				ours bool
				seq  int
				err  error
			)
			ours, seq, want, err = spec.check(data, aux, want)
			return ours, seq, 0, err
		},
	}
	r, err := x.run(src, dst, timeout)
	res.Sent, res.Matched = r.Sent, r.Matched
	for seq, a := range r.arrived {
		if a == notArrived && len(res.Missing) < maxMissingListed {
			res.Missing = append(res.Missing, sizes[seq])
		}
	}
	for _, e := range r.alterations {
		if len(res.Mismatch) < maxMismatchListed {
			res.Mismatch = append(res.Mismatch, e.Error())
		}
	}
	return res, err
}

// rawSpec describes the frames of one SendFrames call.
type rawSpec struct {
	dst, src net.HardwareAddr
	sizes    []int
	marker   [markerLen]byte
}

// appendFrame appends frame seq, as sent, to b.
func (s *rawSpec) appendFrame(b []byte, seq int) []byte {
	n := s.sizes[seq]
	b = slices.Grow(b, n)
	start := len(b)
	b = append(b, s.dst...)
	b = append(b, s.src...)
	b = binary.BigEndian.AppendUint16(b, localEtherType)
	b = append(b, s.marker[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	// pattern() has maxFrameSize bytes to spare after patternLen.
	off := int(uint64(seq) * fillStride % patternLen)
	return append(b, pattern()[off:off+n-(len(b)-start)]...)
}

// check examines one received frame, data from its Ethernet header on, and
// the PACKET_AUXDATA that came with it (nil if none). ours reports whether
// the frame carries this call's marker; if so, seq is its sequence number
// (-1 if unreadable) and err, if not nil, says how it differs from the frame
// that was sent. scratch is reused to build that frame and returned.
func (s *rawSpec) check(data []byte, aux *unix.TpacketAuxdata, scratch []byte) (ours bool, seq int, _ []byte, err error) {
	i := bytes.Index(data, s.marker[:])
	if i < 0 {
		return false, -1, scratch, nil
	}
	if len(data) < i+markerLen+seqLen {
		return true, -1, scratch, fmt.Errorf("%d-byte frame truncated after the marker", len(data))
	}
	u := binary.BigEndian.Uint32(data[i+markerLen:])
	if u >= uint32(len(s.sizes)) {
		return true, -1, scratch, fmt.Errorf("%d-byte frame with sequence number %d out of range (sent %d)", len(data), u, len(s.sizes))
	}
	seq = int(u)
	want := s.appendFrame(scratch[:0], seq)
	if k := firstDiff(data, want); k >= 0 {
		return true, seq, want, fmt.Errorf("frame %d (%d bytes): %s", seq, len(want), describeDiff(data, want, k))
	}
	if aux != nil && aux.Status&unix.TP_STATUS_VLAN_VALID != 0 {
		return true, seq, want, fmt.Errorf("frame %d (%d bytes): arrived with VLAN tag TCI %#04x (VLAN id %d) in metadata, sent untagged",
			seq, len(want), aux.Vlan_tci, aux.Vlan_tci&0xfff)
	}
	return true, seq, want, nil
}

// firstDiff returns the first offset at which got and want differ, counting
// a length difference as one at the end of the shorter, or -1 if they are
// equal.
func firstDiff(got, want []byte) int {
	if bytes.Equal(got, want) {
		return -1
	}
	n := min(len(got), len(want))
	for k := 0; k < n; k++ {
		if got[k] != want[k] {
			return k
		}
	}
	return n
}

// describeDiff describes the difference firstDiff found at offset k.
func describeDiff(got, want []byte, k int) string {
	switch {
	case k < len(got) && k < len(want):
		s := fmt.Sprintf("first difference at offset %d: %#02x, want %#02x", k, got[k], want[k])
		if len(got) != len(want) {
			s = fmt.Sprintf("%d bytes arrived, %s", len(got), s)
		}
		return s
	default:
		return fmt.Sprintf("%d bytes arrived, identical up to offset %d", len(got), k)
	}
}

// exchange sends count raw Ethernet frames from src's eth0 to dst's eth0 over
// AF_PACKET sockets and checks what arrives. It is the engine of SendFrames
// and VLANFrames, which describe their frames with the functions below.
type exchange struct {
	name  string
	count int
	proto uint16        // EtherType the kernel is given with each frame sent (sll_protocol)
	quiet time.Duration // once all are sent, stop this long after the last frame of ours

	// prepare is called with src's and dst's eth0 once both sockets are
	// open and before anything is sent; it completes the description of
	// the frames (their addresses) or refuses to send them.
	prepare func(src, dst *net.Interface) error
	// frame appends frame seq, as sent, to b. It runs in the sending
	// goroutine, concurrently with check: both may only read shared state.
	frame func(b []byte, seq int) []byte
	// check examines one received frame, data from its Ethernet header on,
	// and the PACKET_AUXDATA that came with it (nil if none). ours reports
	// whether it carries this exchange's marker; if so, seq is its sequence
	// number (-1 if unknown), kind a classification counted per kind in
	// exchangeResult.kinds, and err, if not nil, says how the frame differs
	// from the one sent.
	check func(data []byte, aux *unix.TpacketAuxdata) (ours bool, seq, kind int, err error)
}

// What arrived of a frame.
const (
	notArrived = iota
	arrivedAltered
	arrivedIntact
)

type exchangeResult struct {
	Sent       int // frames sent
	Matched    int // distinct frames that arrived unchanged
	Duplicates int // unchanged frames whose sequence number was seen before
	Altered    int // frames of ours that differ from what was sent

	kinds       map[int]int // Matched by the kind check reported
	arrived     []uint8     // per sequence number: notArrived, arrivedAltered or arrivedIntact
	alterations []error     // check's errors for the first maxMismatchListed altered frames
}

// run performs the exchange, bounded by timeout. Loss and alteration are
// only counted; errors are failures to set up, send or receive, and the
// timeout expiring before all frames were sent.
func (x *exchange) run(src, dst *NS, timeout time.Duration) (exchangeResult, error) {
	res := exchangeResult{kinds: make(map[int]int), arrived: make([]uint8, x.count)}
	deadline := time.Now().Add(timeout)
	var (
		rfd, sfd     = -1, -1
		dstIf, srcIf *net.Interface
	)
	err := dst.Do(func() error {
		var err error
		rfd, dstIf, err = packetSocket(true)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("%s: receiver in %s: %w", x.name, dst.Name, err)
	}
	defer unix.Close(rfd)
	err = src.Do(func() error {
		var err error
		sfd, srcIf, err = packetSocket(false)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("%s: sender in %s: %w", x.name, src.Name, err)
	}
	defer unix.Close(sfd)
	if err := x.prepare(srcIf, dstIf); err != nil {
		return res, fmt.Errorf("%s: %w", x.name, err)
	}
	to := &unix.SockaddrLinklayer{Protocol: htons(x.proto), Ifindex: srcIf.Index, Halen: 6}
	copy(to.Addr[:], dstIf.HardwareAddr)

	s := &frameSender{kick: make(chan struct{}, 1), stop: make(chan struct{}), errc: make(chan error, 1)}
	go func() {
		defer func() { s.done.Store(time.Now().UnixNano()) }()
		s.errc <- x.send(s, sfd, to, deadline)
	}()
	recvErr := x.receive(s, rfd, deadline, &res)
	// Unblock a sender that is still going before reading its count.
	close(s.stop)
	sendErr := <-s.errc
	res.Sent = s.sent

	switch {
	case recvErr != nil:
		return res, fmt.Errorf("%s: %w", x.name, recvErr)
	case sendErr != nil && res.Matched < x.count:
		return res, fmt.Errorf("%s: %w", x.name, sendErr)
	}
	return res, nil
}

// frameSender is an exchange's sending goroutine and what it shares with
// the receiver.
type frameSender struct {
	// done holds the UnixNano time the sender finished, 0 while it runs.
	done atomic.Int64
	// read counts frames of ours the receiver has read; kick tells a
	// sender waiting for window space that it grew.
	read atomic.Int64
	kick chan struct{}
	// stop tells the sender the receiver has given up.
	stop chan struct{}
	// errc gives the sender's error, after which sent is the frames it
	// sent (the sender's until then).
	errc chan error
	sent int
}

// send sends x's frames on sfd to to, at most exchangeWindow ahead of
// what the receiver read, until deadline.
func (x *exchange) send(s *frameSender, sfd int, to *unix.SockaddrLinklayer, deadline time.Time) error {
	stopped := func() error {
		return fmt.Errorf("receiver stopped after %d of %d frames were sent", s.sent, x.count)
	}
	stall := time.NewTimer(exchangeStall)
	stall.Stop()
	lost := 0 // frames given up on when the window stalled
	var b []byte
	for s.sent < x.count {
		for s.sent-lost-int(s.read.Load()) >= exchangeWindow {
			stall.Reset(exchangeStall)
			select {
			case <-s.kick:
			case <-s.stop:
				return stopped()
			case <-stall.C:
				// Nothing arrived for a while: what is in flight is
				// lost, not queued.
				lost = s.sent - int(s.read.Load())
			}
			stall.Stop()
		}
		select {
		case <-s.stop:
			return stopped()
		default:
		}
		b = x.frame(b[:0], s.sent)
		if err := unix.Sendto(sfd, b, 0, to); err != nil {
			// A full queue (ENOBUFS, at once) or socket buffer (EAGAIN,
			// after SO_SNDTIMEO) is back-pressure.
			if (errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN)) && time.Now().Before(deadline) {
				time.Sleep(50 * time.Microsecond)
				continue
			}
			return fmt.Errorf("send frame %d (%d bytes): %w", s.sent, len(b), err)
		}
		s.sent++
	}
	return nil
}

// receive reads x's frames from rfd into res until every one arrived
// intact, deadline, or x.quiet of silence once the sender finished; the
// error says why it could not read on.
func (x *exchange) receive(s *frameSender, rfd int, deadline time.Time, res *exchangeResult) error {
	lastRx := time.Now()
	buf := make([]byte, exchangeBuf)
	oob := make([]byte, unix.CmsgSpace(sizeofAuxdata))
	for res.Matched < x.count {
		now := time.Now()
		until := deadline
		if done := s.done.Load(); done != 0 {
			quietFrom := time.Unix(0, done)
			if lastRx.After(quietFrom) {
				quietFrom = lastRx
			}
			until = earliest(until, quietFrom.Add(x.quiet))
		}
		if !now.Before(until) {
			return nil
		}
		// Wake up periodically to notice the sender finishing.
		wait := min(until.Sub(now), 50*time.Millisecond)
		pfd := []unix.PollFd{{Fd: int32(rfd), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfd, int(wait/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll: %w", err)
		}
		for res.Matched < x.count {
			n, oobn, _, from, err := unix.Recvmsg(rfd, buf, oob, unix.MSG_DONTWAIT)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				break
			}
			if err != nil {
				return fmt.Errorf("receive: %w", err)
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue // sent from dst's eth0, not received by it
			}
			ours, seq, kind, err := x.check(buf[:n], auxdata(oob[:oobn]))
			if !ours {
				continue
			}
			lastRx = time.Now()
			s.read.Add(1)
			select {
			case s.kick <- struct{}{}:
			default:
			}
			res.add(n, seq, kind, err, x.count)
		}
	}
	return nil
}

// add counts a frame of n bytes of ours that arrived: sequence number
// seq of count sent, of kind kind, altered as err says (nil: intact).
func (res *exchangeResult) add(n, seq, kind int, err error, count int) {
	known := seq >= 0 && seq < count
	switch {
	case err == nil && !known:
		err = fmt.Errorf("%d-byte frame with sequence number %d out of range (sent %d)", n, seq, count)
		fallthrough
	case err != nil:
		res.Altered++
		if len(res.alterations) < maxMismatchListed {
			res.alterations = append(res.alterations, err)
		}
		if known && res.arrived[seq] == notArrived {
			res.arrived[seq] = arrivedAltered
		}
	case res.arrived[seq] == arrivedIntact:
		res.Duplicates++
	default:
		res.arrived[seq] = arrivedIntact
		res.Matched++
		res.kinds[kind]++
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// packetSocket opens an AF_PACKET raw socket on eth0 in the calling thread's
// namespace and returns it with the link. With recv, it receives every frame
// of that link, with PACKET_AUXDATA; without, it only sends.
func packetSocket(recv bool) (fd int, ifi *net.Interface, err error) {
	ifi, err = net.InterfaceByName(peerName)
	if err != nil {
		return -1, nil, err
	}
	if len(ifi.HardwareAddr) != 6 {
		return -1, nil, fmt.Errorf("%s has no Ethernet address (%v)", peerName, ifi.HardwareAddr)
	}
	// Protocol 0 receives nothing until bound, so no frame of another link
	// slips in between socket and bind.
	fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("packet socket: %w", err)
	}
	fail := func(what string, err error) (int, *net.Interface, error) {
		unix.Close(fd)
		return -1, nil, fmt.Errorf("packet socket on %s: %s: %w", peerName, what, err)
	}
	var proto uint16 // send only
	if !recv {
		// Bound a blocking send, so the sender notices stop and deadline.
		tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
			return fail("SO_SNDTIMEO", err)
		}
		if err := setSockBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, exchangeSockBuf); err != nil {
			return fail("SO_SNDBUF", err)
		}
	} else {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			return fail("PACKET_AUXDATA", err)
		}
		if err := setSockBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, exchangeSockBuf); err != nil {
			return fail("SO_RCVBUF", err)
		}
		// ETH_P_ALL: taps see a frame before the stack, which without a
		// VLAN device for its id marks it PACKET_OTHERHOST and drops the
		// tag metadata before protocol-specific sockets get it.
		proto = unix.ETH_P_ALL
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	return fd, ifi, nil
}

// setSockBuf sets a socket buffer size with force (root, ignores the
// net.core.[rw]mem_max limit), falling back to what the limit allows.
func setSockBuf(fd, force, plain, n int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n); err == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n)
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
