package topo

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// TransferResult is the outcome of a TCPTransfer.
type TransferResult struct {
	Bytes   int64         // bytes received and verified
	Elapsed time.Duration // from connection established to last byte received
	Gbps    float64       // goodput
}

// UDPResult is the outcome of a UDPBurst.
type UDPResult struct {
	Sent       int           // datagrams sent
	Received   int           // distinct sequence numbers received
	Duplicates int           // datagrams whose sequence number was already seen
	OutOfOrder int           // datagrams older than the newest one seen
	Elapsed    time.Duration // from first send to last datagram received
	PPS        float64       // Received / Elapsed
}

// PingResult is the outcome of a Ping.
type PingResult struct {
	Sent, Received int
	RTT            time.Duration // median round-trip time of the replies
}

const (
	// The TCP stream repeats a pseudo-random pattern whose odd length keeps
	// it out of step with any segment, buffer or page size, so a misplaced,
	// dropped or duplicated chunk does not line up with identical data.
	patternLen  = 1<<20 + 13
	tcpChunk    = 256 << 10
	patternSeed = 0x78647066776421 // "xdpfwd!"

	udpRcvBuf = 4 << 20
	udpQuiet  = 200 * time.Millisecond
	udpSeqLen = 8
)

// pattern returns patternLen pseudo-random bytes followed by the first
// tcpChunk of them again, so any chunk of the stream is one contiguous slice.
var pattern = sync.OnceValue(func() []byte {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], patternSeed)
	b := make([]byte, patternLen+tcpChunk)
	rand.NewChaCha8(seed).Read(b[:patternLen])
	copy(b[patternLen:], b[:tcpChunk])
	return b
})

func streamAt(off int64, n int) []byte {
	i := int(off % patternLen)
	return pattern()[i : i+n]
}

func network(proto string, a netip.Addr) string {
	if a.Is4() {
		return proto + "4"
	}
	return proto + "6"
}

// TCPTransfer sends n bytes of a deterministic pseudo-random stream over TCP
// from a client in src to a listener on dstAddr (ephemeral port) in dst and
// verifies every byte at the receiver. It fails on a mismatch, on a short or
// long stream, or when timeout expires.
func TCPTransfer(src, dst *NS, dstAddr netip.Addr, n int64, timeout time.Duration) (TransferResult, error) {
	deadline := time.Now().Add(timeout)
	l, err := ListenStream(dst, dstAddr, n, deadline)
	if err != nil {
		return TransferResult{}, err
	}
	var c net.Conn
	err = src.Do(func() error {
		d := net.Dialer{Deadline: deadline}
		var err error
		c, err = d.Dial(network("tcp", dstAddr), l.Addr().String())
		return err
	})
	if err != nil {
		l.Close()
		return TransferResult{}, fmt.Errorf("tcp transfer: connect from %s to %s: %w", src.Name, l.Addr(), err)
	}
	sendErr := SendStream(c, n, deadline)
	res, err := l.Wait()
	// The receiver's error explains a sender failure (it closed on
	// mismatch), not the other way round.
	if err == nil && sendErr != nil {
		err = sendErr
	}
	if err != nil {
		return res, fmt.Errorf("tcp transfer %s -> %s (%s): %w", src.Name, dst.Name, l.Addr(), err)
	}
	return res, nil
}

// A StreamListener accepts one TCP connection and verifies that it carries
// exactly n bytes of the stream SendStream writes: the receiving half of
// TCPTransfer, for a sender elsewhere (a VM guest's agent).
type StreamListener struct {
	ln   *net.TCPListener
	done chan struct{}
	res  TransferResult
	err  error
}

// ListenStream listens on addr (ephemeral port) in ns until deadline.
func ListenStream(ns *NS, addr netip.Addr, n int64, deadline time.Time) (*StreamListener, error) {
	if n < 0 {
		return nil, fmt.Errorf("tcp stream to %s: negative length %d", addr, n)
	}
	l := &StreamListener{done: make(chan struct{})}
	err := ns.Do(func() error {
		var err error
		l.ln, err = net.ListenTCP(network("tcp", addr), net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("tcp stream: listen on %s in %s: %w", addr, ns.Name, err)
	}
	l.ln.SetDeadline(deadline)
	go func() {
		defer close(l.done)
		c, err := l.ln.AcceptTCP()
		if err != nil {
			l.err = fmt.Errorf("accept on %s in %s: %w", l.Addr(), ns.Name, err)
			return
		}
		defer c.Close()
		c.SetDeadline(deadline)
		start := time.Now()
		var end time.Time
		l.res.Bytes, end, l.err = ReceiveStream(c, n)
		if !end.IsZero() {
			l.res.Elapsed = end.Sub(start)
			if s := l.res.Elapsed.Seconds(); s > 0 {
				l.res.Gbps = float64(l.res.Bytes) * 8 / s / 1e9
			}
		}
	}()
	return l, nil
}

// Addr is the address a sender connects to.
func (l *StreamListener) Addr() netip.AddrPort { return l.ln.Addr().(*net.TCPAddr).AddrPort() }

// Close stops waiting for a connection.
func (l *StreamListener) Close() { l.ln.Close(); <-l.done }

// Wait returns once the stream ended, failed or the deadline passed.
func (l *StreamListener) Wait() (TransferResult, error) {
	<-l.done
	l.ln.Close()
	return l.res, l.err
}

// SendStream writes n bytes of the stream to c by deadline, half-closes it
// so the receiver sees the stream end exactly at n, and closes it.
func SendStream(c net.Conn, n int64, deadline time.Time) error {
	defer c.Close()
	c.SetDeadline(deadline)
	for off := int64(0); off < n; {
		k := int(min(n-off, tcpChunk))
		w, err := c.Write(streamAt(off, k))
		off += int64(w)
		if err != nil {
			return fmt.Errorf("send after %d of %d bytes: %w", off, n, err)
		}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.CloseWrite(); err != nil {
			return fmt.Errorf("close write: %w", err)
		}
	}
	return nil
}

// SendStreamPaced is SendStream at rate bytes/s, in writes of 16 KiB: a
// stream that lasts (over a handover, say) rather than fills the pipe.
// It half-closes c; the caller closes it (after Retransmits, say).
func SendStreamPaced(c net.Conn, n int64, rate float64, deadline time.Time) error {
	c.SetDeadline(deadline)
	start := time.Now()
	for off := int64(0); off < n; {
		if due := time.Duration(float64(off) / rate * float64(time.Second)); time.Since(start) < due {
			time.Sleep(due - time.Since(start))
		}
		k := int(min(n-off, 16<<10))
		w, err := c.Write(streamAt(off, k))
		off += int64(w)
		if err != nil {
			return fmt.Errorf("send after %d of %d bytes: %w", off, n, err)
		}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		if err := tc.CloseWrite(); err != nil {
			return fmt.Errorf("close write: %w", err)
		}
	}
	return nil
}

// Retransmits is how many segments the TCP connection c retransmitted.
func Retransmits(c net.Conn) (uint32, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0, fmt.Errorf("retransmits of a %T", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var info *unix.TCPInfo
	var gerr error
	if err := rc.Control(func(fd uintptr) { info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }); err != nil {
		return 0, err
	}
	if gerr != nil {
		return 0, gerr
	}
	return info.Total_retrans, nil
}

// DialStream connects to a stream receiver at to, retrying while it is
// not listening yet (refused), until deadline.
func DialStream(to netip.AddrPort, deadline time.Time) (net.Conn, error) {
	for {
		c, err := net.DialTimeout(network("tcp", to.Addr()), to.String(), time.Until(deadline))
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SendPaced writes count datagrams of size bytes (size >= 4) to c, paced
// at pps, each starting with its big-endian sequence number. A full socket
// buffer is loss for the receiver to count, not an error.
func SendPaced(c net.Conn, count, size, pps int) {
	b := make([]byte, size)
	gap, next := time.Second/time.Duration(pps), time.Now()
	for seq := range count {
		binary.BigEndian.PutUint32(b, uint32(seq))
		c.Write(b)
		next = next.Add(gap)
		time.Sleep(time.Until(next))
	}
}

// CountDatagrams counts the datagrams c receives until deadline, or until
// quiet passes without one after the first.
func CountDatagrams(c net.Conn, deadline time.Time, quiet time.Duration) int {
	n, buf := 0, make([]byte, 65536)
	for {
		d := deadline
		if q := time.Now().Add(quiet); n > 0 && q.Before(d) {
			d = q
		}
		c.SetReadDeadline(d)
		if _, err := c.Read(buf); err != nil {
			return n
		}
		n++
	}
}

// ReceiveStream reads c to its end and checks it is exactly n bytes of the
// stream SendStream writes. It returns the bytes verified and when the
// last of them arrived.
func ReceiveStream(c net.Conn, n int64) (got int64, end time.Time, err error) {
	buf := make([]byte, tcpChunk)
	for {
		k, err := c.Read(buf)
		if k > 0 {
			if got+int64(k) > n {
				return got, end, fmt.Errorf("received more than the %d bytes sent", n)
			}
			if want := streamAt(got, k); !bytes.Equal(buf[:k], want) {
				i := 0
				for buf[i] == want[i] {
					i++
				}
				return got + int64(i), end, fmt.Errorf("stream mismatch at byte %d: got %#02x, want %#02x", got+int64(i), buf[i], want[i])
			}
			got += int64(k)
			if got == n {
				end = time.Now()
			}
		}
		if errors.Is(err, io.EOF) {
			if got < n {
				return got, end, fmt.Errorf("stream ended after %d of %d bytes", got, n)
			}
			return got, end, nil
		}
		if err != nil {
			return got, end, fmt.Errorf("receive after %d of %d bytes: %w", got, n, err)
		}
	}
}

// UDPBurst sends count datagrams of size bytes (size >= 8; each starts with
// its big-endian sequence number) from src to a receiver on dstAddr
// (ephemeral port) in dst, as fast as the sending socket allows. The receiver
// stops when every sequence number arrived, when timeout expires, or after
// 200 ms of silence once the sender has finished. Loss is a measurement, not
// an error, but receiving nothing at all is reported as one.
func UDPBurst(src, dst *NS, dstAddr netip.Addr, count, size int, timeout time.Duration) (UDPResult, error) {
	var res UDPResult
	if count < 0 || size < udpSeqLen || size > 65507 {
		return res, fmt.Errorf("udp burst to %s: bad count %d or size %d (need size %d..65507)", dstAddr, count, size, udpSeqLen)
	}
	deadline := time.Now().Add(timeout)
	rc, sc, err := udpEnds(src, dst, dstAddr)
	if err != nil {
		return res, err
	}
	defer rc.Close()
	defer sc.Close()
	to := rc.LocalAddr().(*net.UDPAddr).AddrPort()

	start := time.Now()
	s := sendBurst(sc, count, size, deadline)
	lastRx, recvErr := receiveBurst(rc, sc.LocalAddr().(*net.UDPAddr).AddrPort(), count, size, deadline, start, &s.done, &res)
	// Unblock a sender stuck on a full socket before reading its count.
	s.stop.Store(true)
	sc.SetWriteDeadline(time.Now())
	sendErr := <-s.errc
	res.Sent = s.sent
	res.Elapsed = lastRx.Sub(start)
	if s := res.Elapsed.Seconds(); s > 0 {
		res.PPS = float64(res.Received) / s
	}

	name := fmt.Sprintf("udp burst %s -> %s (%s)", src.Name, dst.Name, to)
	switch {
	case recvErr != nil:
		return res, fmt.Errorf("%s: %w", name, recvErr)
	case sendErr != nil && res.Received < count:
		return res, fmt.Errorf("%s: %w", name, sendErr)
	case res.Received == 0 && count > 0:
		return res, fmt.Errorf("%s: none of %d datagrams arrived within %s", name, res.Sent, timeout)
	}
	return res, nil
}

// udpEnds are a burst's receiver, listening on dstAddr (an ephemeral
// port) in dst with a large receive buffer, and its sender in src,
// connected to it.
func udpEnds(src, dst *NS, dstAddr netip.Addr) (rc, sc *net.UDPConn, err error) {
	err = dst.Do(func() error {
		var err error
		rc, err = net.ListenUDP(network("udp", dstAddr), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dstAddr, 0)))
		if err != nil {
			return err
		}
		return setRcvBuf(rc, udpRcvBuf)
	})
	if err != nil {
		if rc != nil {
			rc.Close()
		}
		return nil, nil, fmt.Errorf("udp burst: listen on %s in %s: %w", dstAddr, dst.Name, err)
	}
	to := rc.LocalAddr().(*net.UDPAddr).AddrPort()
	err = src.Do(func() error {
		var err error
		sc, err = net.DialUDP(network("udp", dstAddr), nil, net.UDPAddrFromAddrPort(to))
		return err
	})
	if err != nil {
		rc.Close()
		return nil, nil, fmt.Errorf("udp burst: socket in %s to %s: %w", src.Name, to, err)
	}
	return rc, sc, nil
}

// burstSender is a burst's sending goroutine: done holds the UnixNano
// time it finished (0 while running), stop tells it the receiver has
// given up, and errc gives its error, after which sent is the datagrams
// it sent.
type burstSender struct {
	done atomic.Int64
	stop atomic.Bool
	errc chan error
	sent int
}

// sendBurst sends count datagrams of size bytes on sc, each starting with
// its big-endian sequence number, as fast as the socket allows, until
// deadline.
func sendBurst(sc *net.UDPConn, count, size int, deadline time.Time) *burstSender {
	s := &burstSender{errc: make(chan error, 1)}
	go func() {
		s.errc <- func() error {
			defer func() { s.done.Store(time.Now().UnixNano()) }()
			sc.SetWriteDeadline(deadline)
			b := make([]byte, size)
			for i := range b[udpSeqLen:] {
				b[udpSeqLen+i] = byte(i)
			}
			for s.sent < count {
				if s.stop.Load() {
					return fmt.Errorf("receiver stopped after %d of %d datagrams were sent", s.sent, count)
				}
				binary.BigEndian.PutUint64(b, uint64(s.sent))
				if _, err := sc.Write(b); err != nil {
					// A full device queue is back-pressure, not failure;
					// ENOBUFS returns at once, so bound the retries.
					if errors.Is(err, unix.ENOBUFS) && time.Now().Before(deadline) {
						time.Sleep(50 * time.Microsecond)
						continue
					}
					return fmt.Errorf("send datagram %d: %w", s.sent, err)
				}
				s.sent++
			}
			return nil
		}()
	}()
	return s
}

// receiveBurst reads the burst's datagrams from rc, those from from, into
// res, until every sequence number arrived, deadline, or udpQuiet of
// silence once the sender finished (sendDone, UnixNano); it returns when
// the last one arrived (start if none did) and why it stopped early.
func receiveBurst(rc *net.UDPConn, from netip.AddrPort, count, size int, deadline, start time.Time, sendDone *atomic.Int64, res *UDPResult) (lastRx time.Time, err error) {
	seen := make([]bool, count)
	maxSeq, lastRx := -1, start
	buf := make([]byte, 65536)
	for res.Received < count {
		now := time.Now()
		until := deadline
		if done := sendDone.Load(); done != 0 {
			quietFrom := time.Unix(0, done)
			if lastRx.After(quietFrom) {
				quietFrom = lastRx
			}
			until = earliest(until, quietFrom.Add(udpQuiet))
		}
		if !now.Before(until) {
			break
		}
		// Wake up periodically to notice the sender finishing.
		rc.SetReadDeadline(earliest(until, now.Add(50*time.Millisecond)))
		k, addr, err := rc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return lastRx, fmt.Errorf("receive: %w", err)
		}
		if addr.Port() != from.Port() || addr.Addr().Unmap() != from.Addr().Unmap() {
			continue // not ours
		}
		if k != size {
			return lastRx, fmt.Errorf("datagram of %d bytes, sent %d", k, size)
		}
		lastRx = time.Now()
		seq := binary.BigEndian.Uint64(buf)
		if seq >= uint64(count) {
			return lastRx, fmt.Errorf("datagram with sequence number %d out of range", seq)
		}
		switch {
		case seen[seq]:
			res.Duplicates++
			continue
		case int(seq) < maxSeq:
			res.OutOfOrder++
		default:
			maxSeq = int(seq)
		}
		seen[seq] = true
		res.Received++
	}
	return lastRx, nil
}

// setRcvBuf enlarges the receive buffer so a burst is not dropped at the
// receiving socket. SO_RCVBUFFORCE (root) ignores net.core.rmem_max.
func setRcvBuf(c *net.UDPConn, n int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, n)
	}); err != nil {
		return err
	}
	if serr != nil {
		// Without CAP_NET_ADMIN, take what rmem_max allows.
		return c.SetReadBuffer(n)
	}
	return nil
}

// Ping sends count ICMP or ICMPv6 echo requests from src to addr, one after
// another, and returns how many were answered and the median round-trip
// time. Each request gets an equal share of timeout before the next is sent;
// late replies still count until timeout expires. No reply at all is an
// error.
func Ping(src *NS, addr netip.Addr, count int, timeout time.Duration) (PingResult, error) {
	var res PingResult
	if count <= 0 {
		return res, fmt.Errorf("ping %s: count %d must be positive", addr, count)
	}
	addr = addr.Unmap()
	proto, laddr, reqType, replyType := "ip4:icmp", "0.0.0.0", byte(8), byte(0)
	if addr.Is6() {
		proto, laddr, reqType, replyType = "ip6:ipv6-icmp", "::", 128, 129
	}
	deadline := time.Now().Add(timeout)

	var c net.PacketConn
	err := src.Do(func() error {
		var err error
		c, err = net.ListenPacket(proto, laddr)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("ping %s: raw socket in %s: %w", addr, src.Name, err)
	}
	defer c.Close()

	// A random identifier tells our replies from those of concurrent pings
	// in the same namespace.
	id := uint16(rand.Uint32())
	sentAt := make([]time.Time, count)
	got := make([]bool, count)
	var rtts []time.Duration
	dst := &net.IPAddr{IP: addr.AsSlice()}
	buf := make([]byte, 1500)
	per := timeout / time.Duration(count)

	// await reads replies until seq (or, with seq < 0, every request) has
	// been answered or until is reached.
	await := func(seq int, until time.Time) error {
		for {
			if seq >= 0 && got[seq] || seq < 0 && len(rtts) == res.Sent {
				return nil
			}
			if !time.Now().Before(until) {
				return nil
			}
			c.SetReadDeadline(until)
			k, from, err := c.ReadFrom(buf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					return nil
				}
				return fmt.Errorf("receive: %w", err)
			}
			now := time.Now()
			// The raw socket sees all ICMP of the namespace; keep only
			// replies to our requests. Go strips the IPv4 header.
			ip, ok := from.(*net.IPAddr)
			if !ok || k < 8 || buf[0] != replyType || buf[1] != 0 {
				continue
			}
			if fa, ok := netip.AddrFromSlice(ip.IP); !ok || fa.Unmap() != addr {
				continue
			}
			rseq := int(binary.BigEndian.Uint16(buf[6:]))
			if binary.BigEndian.Uint16(buf[4:]) != id || rseq >= res.Sent || got[rseq] {
				continue
			}
			got[rseq] = true
			rtts = append(rtts, now.Sub(sentAt[rseq]))
		}
	}

	for seq := 0; seq < count && time.Now().Before(deadline); seq++ {
		msg := echoRequest(reqType, id, uint16(seq), addr.Is4())
		sentAt[seq] = time.Now()
		if _, err := c.WriteTo(msg, dst); err != nil {
			return res, fmt.Errorf("ping %s from %s: send request %d: %w", addr, src.Name, seq, err)
		}
		res.Sent++
		if err := await(seq, earliest(deadline, sentAt[seq].Add(per))); err != nil {
			return res, fmt.Errorf("ping %s from %s: %w", addr, src.Name, err)
		}
	}
	if err := await(-1, deadline); err != nil {
		return res, fmt.Errorf("ping %s from %s: %w", addr, src.Name, err)
	}
	res.Received = len(rtts)
	if res.Received == 0 {
		return res, fmt.Errorf("ping %s from %s: no reply to %d requests within %s", addr, src.Name, res.Sent, timeout)
	}
	slices.Sort(rtts)
	if n := len(rtts); n%2 == 1 {
		res.RTT = rtts[n/2]
	} else {
		res.RTT = (rtts[n/2-1] + rtts[n/2]) / 2
	}
	return res, nil
}

// echoRequest builds an ICMP echo request with a 56-byte payload. For ICMPv6
// the kernel fills in the checksum, which covers a pseudo-header we do not
// know the source address of.
func echoRequest(typ byte, id, seq uint16, v4 bool) []byte {
	b := make([]byte, 8+56)
	b[0] = typ
	binary.BigEndian.PutUint16(b[4:], id)
	binary.BigEndian.PutUint16(b[6:], seq)
	for i := range b[8:] {
		b[8+i] = byte(i)
	}
	if v4 {
		binary.BigEndian.PutUint16(b[2:], inetChecksum(b))
	}
	return b
}

// inetChecksum is the RFC 1071 Internet checksum.
func inetChecksum(b []byte) uint16 {
	var sum uint32
	for ; len(b) >= 2; b = b[2:] {
		sum += uint32(b[0])<<8 | uint32(b[1])
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
