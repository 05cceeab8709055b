package fwd_test

// Hostile input: malformed frames through a forwarder whose flow-key parser
// (xps, sticky, two queues) and checksum completion (csum, on for veth) look
// at every frame. xdpfwd forwards frames as they are: the parsers only pick
// a TX queue and decide whether a checksum was left partial, so every
// hostile frame the kernel hands it leaves unchanged on the other link. The
// one frame xdpfwd alters on purpose is a TCP/UDP frame whose checksum
// field holds exactly the pseudo-header sum (a sender's offload left it
// partial): that field, and only it, is completed.
//
// What the kernel never hands over, and so cannot be tested end to end
// over veth: frames under 14 bytes (AF_PACKET refuses them with EINVAL;
// AF_XDP sends them but veth_xmit drops them, as it pulls an Ethernet
// header first). And frames that xdpfwd forwards but the receiving kernel
// drops before any packet socket sees them: a VLAN EtherType with fewer
// than 6 bytes after the Ethernet header (skb_vlan_untag); for those only
// the forwarder's counters are checked.

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/csum"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xps"
)

// hFrame is one hostile frame and what should arrive of it.
type hFrame struct {
	name string
	b    []byte
	want []byte // what arrives (nil: b, unchanged)
	// unseen: the receiving kernel drops it before packet sockets see it;
	// only the forwarder's counters can tell it crossed.
	unseen bool
	// truncated: its IPv4 total length or IPv6 payload length claims more
	// bytes than it has, as a frame a NIC cut would: the forwarder drops
	// it and counts it (rx_truncated) instead of sending it on.
	truncated bool
}

var (
	hSrc4 = [4]byte{198, 18, 0, 201} // neither namespace's address
	hDst4 = [4]byte{198, 18, 0, 202}
	hSrc6 = [16]byte{0xfd, 0, 0x58, 0x44, 0x50, 0x46, 14: 0, 15: 0xc9}
	hDst6 = [16]byte{0xfd, 0, 0x58, 0x44, 0x50, 0x46, 14: 0, 15: 0xca}
)

func hEth(dst, src net.HardwareAddr, tpids []uint16, etype uint16) []byte {
	b := append(append([]byte{}, dst...), src...)
	for i, tp := range tpids {
		b = binary.BigEndian.AppendUint16(b, tp)
		b = binary.BigEndian.AppendUint16(b, uint16(100+i)) // VLAN id
	}
	return binary.BigEndian.AppendUint16(b, etype)
}

// hIPv4 builds an IPv4 header with the given IHL field, hdrBytes bytes of
// header actually present (at least 20), a raw total length field (-1:
// what follows, correct), protocol and flags/fragment field, then body.
func hIPv4(ihl, hdrBytes, total int, proto byte, frag uint16, body []byte) []byte {
	h := make([]byte, max(hdrBytes, 20))
	h[0] = 0x40 | byte(ihl&0x0f)
	if total < 0 {
		total = len(h) + len(body)
	}
	binary.BigEndian.PutUint16(h[2:], uint16(total))
	binary.BigEndian.PutUint16(h[4:], 0x1234)
	binary.BigEndian.PutUint16(h[6:], frag)
	h[8], h[9] = 64, proto
	copy(h[12:], hSrc4[:])
	copy(h[16:], hDst4[:])
	var s uint32
	for i := 0; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(s))
	return append(h, body...)
}

// hIPv6 builds an IPv6 header with next header nh and a raw payload length
// (-1: what follows, correct), then body.
func hIPv6(nh byte, plen int, body []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	if plen < 0 {
		plen = len(body)
	}
	binary.BigEndian.PutUint16(h[4:], uint16(plen))
	h[6], h[7] = nh, 64
	copy(h[8:], hSrc6[:])
	copy(h[24:], hDst6[:])
	return append(h, body...)
}

// hExt is an IPv6 extension header of (hlen+1)×8 bytes, next header nh.
func hExt(nh byte, hlen byte) []byte {
	b := make([]byte, (int(hlen)+1)*8)
	b[0], b[1] = nh, hlen
	return b
}

// hTCP is a TCP header with data offset field doff, followed by data. Its
// checksum field holds 0xbeef: not a pseudo-header sum (checked below).
func hTCP(doff int, data []byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], 40001)
	binary.BigEndian.PutUint16(h[2:], 80)
	binary.BigEndian.PutUint32(h[4:], 1)
	h[12] = byte(doff << 4)
	h[13] = 0x10 // ACK
	binary.BigEndian.PutUint16(h[14:], 65535)
	binary.BigEndian.PutUint16(h[16:], 0xbeef)
	return append(h, data...)
}

// hUDP is a UDP header with a raw length field (-1: correct) and checksum
// field, followed by data.
func hUDP(length int, check uint16, data []byte) []byte {
	h := make([]byte, 8)
	binary.BigEndian.PutUint16(h[0:], 40002)
	binary.BigEndian.PutUint16(h[2:], 53)
	if length < 0 {
		length = 8 + len(data)
	}
	binary.BigEndian.PutUint16(h[4:], uint16(length))
	binary.BigEndian.PutUint16(h[6:], check)
	return append(h, data...)
}

func hBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func repeatTPID(tp uint16, n int) []uint16 {
	s := make([]uint16, n)
	for i := range s {
		s[i] = tp
	}
	return s
}

// hostileFrames builds the hostile set for frames from src to dst.
func hostileFrames(t *testing.T, dst, src net.HardwareAddr) []hFrame {
	t.Helper()
	e4 := hEth(dst, src, nil, 0x0800)
	e6 := hEth(dst, src, nil, 0x86dd)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	fs := []hFrame{
		// Runts: shorter than the 60-byte Ethernet minimum, down to the
		// bare header.
		{name: "runt-14-bare-header-ipv4", b: e4},
		{name: "runt-15-ipv4-one-byte", b: cat(e4, []byte{0x45})},
		{name: "runt-20-ipv6-six-bytes", b: cat(e6, []byte{0x60, 0, 0, 0, 0, 8}), truncated: true},
		{name: "runt-20-vlan-inner-ipv4-two-bytes", b: cat(hEth(dst, src, []uint16{0x8100}, 0x0800), []byte{0x45, 0})},
		{name: "runt-34-ipv4-tcp-no-tcp-header", b: cat(e4, hIPv4(5, 20, -1, 6, 0, nil))},
		{name: "runt-38-ipv4-udp-header-cut", b: cat(e4, hIPv4(5, 20, -1, 17, 0, hBytes(4, 1)))},
		{name: "runt-54-ipv6-udp-plen-8-nothing", b: cat(e6, hIPv6(17, 8, nil)), truncated: true},
		{name: "runt-59-ipv4-udp-odd", b: cat(e4, hIPv4(5, 20, -1, 17, 0, hUDP(-1, 0, hBytes(17, 2))))},

		// Bogus IPv4 IHL and total length.
		{name: "ipv4-ihl-0", b: cat(e4, hIPv4(0, 20, -1, 6, 0, hTCP(5, nil)))},
		{name: "ipv4-ihl-4", b: cat(e4, hIPv4(4, 20, -1, 17, 0, hUDP(-1, 0, hBytes(20, 3))))},
		{name: "ipv4-ihl-15-total-20", b: cat(e4, hIPv4(15, 20, 20, 6, 0, hTCP(5, hBytes(40, 4))))},
		{name: "ipv4-ihl-15-beyond-frame", b: cat(e4, hIPv4(15, 20, 60, 17, 0, hUDP(-1, 0, hBytes(2, 5)))), truncated: true},
		{name: "ipv4-total-0", b: cat(e4, hIPv4(5, 20, 0, 6, 0, hTCP(5, hBytes(10, 6))))},
		{name: "ipv4-total-below-ihl", b: cat(e4, hIPv4(6, 24, 22, 17, 0, hUDP(-1, 0, hBytes(10, 7))))},
		{name: "ipv4-total-beyond-frame", b: cat(e4, hIPv4(5, 20, 1500, 17, 0, hUDP(1480, 0, hBytes(30, 8)))), truncated: true},
		{name: "ipv4-total-65535", b: cat(e4, hIPv4(5, 20, 65535, 6, 0, hTCP(5, hBytes(30, 9)))), truncated: true},
		{name: "ipv4-version-6-under-ethertype-0800", b: cat(e4, hIPv6(17, -1, hUDP(-1, 0, hBytes(20, 10))))},
		{name: "ipv4-mf-fragment-udp", b: cat(e4, hIPv4(5, 20, -1, 17, 0x2000, hUDP(-1, 0x1111, hBytes(24, 11))))},
		{name: "ipv4-offset-fragment-tcp", b: cat(e4, hIPv4(5, 20, -1, 6, 0x00b9, hTCP(5, hBytes(24, 12))))},
		{name: "ipv4-options-udp-len-0", b: cat(e4, hIPv4(8, 32, -1, 17, 0, hUDP(0, 0x2222, hBytes(12, 13))))},

		// Truncated and overlong IPv6 extension headers.
		{name: "ipv6-plen-beyond-frame", b: cat(e6, hIPv6(6, 1000, hTCP(5, hBytes(8, 14)))), truncated: true},
		{name: "ipv6-jumbo-plen-0-tcp", b: cat(e6, hIPv6(6, 0, hTCP(5, hBytes(8, 15))))},
		{name: "ipv6-hop-by-hop-len-beyond-frame", b: cat(e6, hIPv6(0, -1, cat([]byte{17, 200}, hBytes(6, 16), hUDP(-1, 0x3333, nil))))},
		{name: "ipv6-destopts-cut-mid-header", b: cat(e6, hIPv6(60, -1, []byte{17, 0, 1}))},
		{name: "ipv6-destopts-len-beyond-plen", b: cat(e6, hIPv6(60, 8, cat(hExt(17, 3), hUDP(-1, 0x4444, hBytes(8, 17)))))},
		{name: "ipv6-9-destopts-then-udp", b: cat(e6, hIPv6(60, -1, cat(
			hExt(60, 0), hExt(60, 0), hExt(60, 0), hExt(60, 0), hExt(60, 0), hExt(60, 0), hExt(60, 0), hExt(60, 0), hExt(17, 0),
			hUDP(-1, 0x5555, hBytes(8, 18)))))},
		{name: "ipv6-srh-cut", b: cat(e6, hIPv6(43, -1, []byte{6, 2, 4, 1, 0, 0, 0, 0}))},
		{name: "ipv6-routing-0-segments-left-no-address", b: cat(e6, hIPv6(43, -1, cat([]byte{17, 0, 0, 1, 0, 0, 0, 0}, hUDP(-1, 0x6666, hBytes(8, 19)))))},
		{name: "ipv6-fragment-header-cut", b: cat(e6, hIPv6(44, -1, []byte{17, 0, 0}))},
		{name: "ipv6-ext-chain-to-tcp-doff-past-end", b: cat(e6, hIPv6(0, -1, cat(hExt(43, 0), []byte{6, 0, 0, 0, 0, 0, 0, 0}, hTCP(15, nil))))},

		// Deep VLAN stacks (xdpfwd's parsers look through four tags).
		{name: "vlan-10x8100-ipv4-udp", b: cat(hEth(dst, src, repeatTPID(0x8100, 10), 0x0800), hIPv4(5, 20, -1, 17, 0, hUDP(-1, 0x7777, hBytes(16, 20))))},
		{name: "vlan-10-mixed-88a8-8100-9100-ipv6-tcp", b: cat(hEth(dst, src, []uint16{0x88a8, 0x8100, 0x9100, 0x8100, 0x88a8, 0x8100, 0x8100, 0x9100, 0x8100, 0x8100}, 0x86dd), hIPv6(6, -1, hTCP(5, hBytes(12, 21))))},
		{name: "vlan-10x8100-cut-after-tags", b: cat(hEth(dst, src, repeatTPID(0x8100, 10), 0x0800), []byte{0x45, 0})},
		{name: "vlan-10x8100-nothing-inside", b: hEth(dst, src, repeatTPID(0x8100, 10), 0x8100)},
		{name: "vlan-4x88a8-ipv4-tcp-doff-past-end", b: cat(hEth(dst, src, repeatTPID(0x88a8, 4), 0x0800), hIPv4(5, 20, -1, 6, 0, hTCP(15, hBytes(4, 22))))},

		// TCP data offset past the end, and below the minimum.
		{name: "tcp4-doff-15-past-segment", b: cat(e4, hIPv4(5, 20, -1, 6, 0, hTCP(15, nil)))},
		{name: "tcp4-doff-15-segment-cut-by-total", b: cat(e4, hIPv4(5, 20, 40, 6, 0, hTCP(15, hBytes(40, 23))))},
		{name: "tcp4-doff-0", b: cat(e4, hIPv4(5, 20, -1, 6, 0, hTCP(0, hBytes(10, 24))))},
		{name: "tcp4-doff-4", b: cat(e4, hIPv4(5, 20, -1, 6, 0, hTCP(4, hBytes(10, 25))))},
		{name: "tcp6-doff-15-past-segment", b: cat(e6, hIPv6(6, -1, hTCP(15, hBytes(8, 26))))},

		// Bogus UDP lengths.
		{name: "udp4-len-7", b: cat(e4, hIPv4(5, 20, -1, 17, 0, hUDP(7, 0x8888, hBytes(12, 27))))},
		{name: "udp4-len-beyond-ip", b: cat(e4, hIPv4(5, 20, -1, 17, 0, hUDP(400, 0x9999, hBytes(12, 28))))},
		{name: "udp6-len-65535", b: cat(e6, hIPv6(17, -1, hUDP(65535, 0xaaaa, hBytes(12, 29))))},

		// Odd EtherTypes.
		{name: "ethertype-0000", b: cat(hEth(dst, src, nil, 0x0000), hBytes(46, 30))},
		{name: "ethertype-8023-length-46", b: cat(hEth(dst, src, nil, 46), hBytes(46, 31))},
		{name: "ethertype-ffff", b: cat(hEth(dst, src, nil, 0xffff), hBytes(46, 32))},

		// Controls: well formed.
		{name: "control-ipv4-udp-no-checksum", b: cat(e4, hIPv4(5, 20, -1, 17, 0, hUDP(-1, 0, hBytes(40, 33))))},
		{name: "control-ipv6-tcp", b: cat(e6, hIPv6(6, -1, hTCP(5, hBytes(40, 34))))},

		// Forwarded, then dropped by the receiving kernel before any
		// packet socket: a VLAN tag with too little behind it.
		{name: "vlan-cut-16-tci-only", b: cat(hEth(dst, src, nil, 0x8100), []byte{0, 100}), unseen: true},
		{name: "vlan-cut-18-no-payload", b: hEth(dst, src, []uint16{0x8100}, 0x0800), unseen: true},
	}
	for _, f := range fs {
		// The test's own premise: none of these looks partial to csum, so
		// xdpfwd must leave every byte alone.
		if r := csum.Complete(bytes.Clone(f.b)); r == csum.Completed {
			t.Fatalf("test bug: hostile frame %s looks partial to csum.Complete", f.name)
		}
	}
	// The one frame xdpfwd alters on purpose: a UDP checksum field holding
	// the pseudo-header sum, as an offloading sender leaves it. Find that
	// value by trying them all; what must arrive is the completed frame.
	partial := cat(e4, hIPv4(5, 20, -1, 17, 0, hUDP(-1, 0, hBytes(40, 35))))
	l4 := partial[14+20:]
	for v := 1; v <= 0xffff; v++ {
		binary.BigEndian.PutUint16(l4[6:], uint16(v))
		want := bytes.Clone(partial)
		if csum.Complete(want) == csum.Completed {
			fs = append(fs, hFrame{name: "partial-checksum-completed", b: bytes.Clone(partial), want: want})
			break
		}
	}
	if fs[len(fs)-1].name != "partial-checksum-completed" {
		t.Fatal("test bug: no checksum value makes the frame look partial")
	}
	return fs
}

func hostileHtons(v uint16) uint16 { return v<<8 | v>>8 }

// hostileSocket opens an AF_PACKET socket on ifname in the calling thread's
// namespace: to receive everything (with PACKET_AUXDATA), or to send only.
func hostileSocket(ifname string, recv bool) (int, *net.Interface, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, nil, err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	var proto uint16
	if recv {
		proto = unix.ETH_P_ALL
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_AUXDATA, 1); err != nil {
			unix.Close(fd)
			return -1, nil, err
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20); err != nil {
			unix.Close(fd)
			return -1, nil, err
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: hostileHtons(proto), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, ifi, nil
}

// withTag puts back in front of data the outer VLAN tag the receiving
// kernel moved into the packet's metadata, as PACKET_AUXDATA reports it.
func withTag(data, oob []byte) []byte {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(data) < 12 {
		return data
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_PACKET || m.Header.Type != unix.PACKET_AUXDATA || len(m.Data) < 20 {
			continue
		}
		var a unix.TpacketAuxdata
		if _, err := binary.Decode(m.Data, binary.NativeEndian, &a); err != nil || a.Status&unix.TP_STATUS_VLAN_VALID == 0 {
			return data
		}
		tpid := uint16(unix.ETH_P_8021Q)
		if a.Status&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = a.Vlan_tpid
		}
		out := append([]byte{}, data[:12]...)
		out = binary.BigEndian.AppendUint16(out, tpid)
		out = binary.BigEndian.AppendUint16(out, a.Vlan_tci)
		return append(out, data[12:]...)
	}
	return data
}

// hostileResult is what a receiver saw of one exchange.
type hostileResult struct {
	sent     int
	matched  map[string]int
	dups     int
	altered  []string // frames from our source MAC matching nothing sent
	runts    int      // frames under 14 bytes (of any origin)
	sendErrs map[string]error
}

// hostileReceiver collects frames on dst's eth0 until stop is closed and quiet
// has passed without a frame, or timeout.
type hostileReceiver struct {
	fd   int
	done chan struct{}
	res  hostileResult
}

func startHostileReceiver(t *testing.T, dst *topo.NS, ifname string, srcMAC net.HardwareAddr, want map[string][]string, stop <-chan struct{}, timeout time.Duration) *hostileReceiver {
	t.Helper()
	rv := &hostileReceiver{done: make(chan struct{}), res: hostileResult{matched: map[string]int{}}}
	if err := dst.Do(func() error {
		var err error
		rv.fd, _, err = hostileSocket(ifname, true)
		return err
	}); err != nil {
		t.Fatalf("receiver in %s: %v", dst.Name, err)
	}
	left := map[string][]string{} // frame bytes → names still expected
	for k, v := range want {
		left[k] = append([]string(nil), v...)
	}
	go func() {
		defer close(rv.done)
		defer unix.Close(rv.fd)
		deadline := time.Now().Add(timeout)
		var stoppedAt, lastRx time.Time
		buf := make([]byte, 1<<16)
		oob := make([]byte, unix.CmsgSpace(20))
		for time.Now().Before(deadline) {
			select {
			case <-stop:
				if stoppedAt.IsZero() {
					stoppedAt = time.Now()
				}
			default:
			}
			if !stoppedAt.IsZero() && time.Since(stoppedAt) > 300*time.Millisecond && time.Since(lastRx) > 300*time.Millisecond {
				return
			}
			pfd := []unix.PollFd{{Fd: int32(rv.fd), Events: unix.POLLIN}}
			unix.Poll(pfd, 50)
			for {
				n, oobn, _, from, err := unix.Recvmsg(rv.fd, buf, oob, unix.MSG_DONTWAIT)
				if err != nil {
					break
				}
				if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
					continue
				}
				if n < 14 {
					rv.res.runts++
					continue
				}
				if !bytes.Equal(buf[6:12], srcMAC) {
					continue // the namespaces' own traffic
				}
				lastRx = time.Now()
				data := withTag(buf[:n], oob[:oobn])
				k := string(data)
				switch names, ok := left[k]; {
				case ok && len(names) > 0:
					rv.res.matched[names[0]]++
					left[k] = names[1:]
				case ok:
					rv.res.dups++
				default:
					if len(rv.res.altered) < 20 {
						rv.res.altered = append(rv.res.altered, fmt.Sprintf("%d bytes: %s", len(data), hex.EncodeToString(data[:min(len(data), 96)])))
					}
				}
			}
		}
	}()
	return rv
}

// hostileExchange sends every frame repeat times from src's eth0 to dst's
// over AF_PACKET and reports what dst's eth0 received.
func hostileExchange(t *testing.T, src, dst *topo.NS, ifname string, srcMAC net.HardwareAddr, frames []hFrame, repeat int) hostileResult {
	t.Helper()
	want := map[string][]string{}
	for _, f := range frames {
		w := f.want
		if w == nil {
			w = f.b
		}
		for range repeat {
			want[string(w)] = append(want[string(w)], f.name)
		}
	}
	stop := make(chan struct{})
	rv := startHostileReceiver(t, dst, ifname, srcMAC, want, stop, 15*time.Second)
	var sfd int
	var sif *net.Interface
	if err := src.Do(func() error {
		var err error
		sfd, sif, err = hostileSocket(ifname, false)
		return err
	}); err != nil {
		close(stop)
		<-rv.done
		t.Fatalf("sender in %s: %v", src.Name, err)
	}
	defer unix.Close(sfd)
	sent, errs := 0, map[string]error{}
	deadline := time.Now().Add(10 * time.Second)
	for r := 0; r < repeat && time.Now().Before(deadline); r++ {
		for _, f := range frames {
			to := &unix.SockaddrLinklayer{Ifindex: sif.Index, Halen: 6, Protocol: hostileHtons(binary.BigEndian.Uint16(f.b[12:]))}
			copy(to.Addr[:], f.b[:6])
			for {
				err := unix.Sendto(sfd, f.b, 0, to)
				if errors.Is(err, unix.ENOBUFS) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				if err != nil {
					errs[f.name] = err
				} else {
					sent++
				}
				break
			}
			if sent%32 == 0 {
				time.Sleep(500 * time.Microsecond) // keep the receiving backlog short
			}
		}
	}
	close(stop)
	<-rv.done
	rv.res.sent = sent
	rv.res.sendErrs = errs
	return rv.res
}

// TestHostileFrames sends malformed frames both ways through a two-queue
// forwarder in sticky xps mode with checksum completion on, and checks that
// each arrives byte for byte (the partial-checksum frame completed) but
// those whose IP length claims more bytes than they have, which are dropped
// and counted as rx_truncated, that the forwarder counted every one as
// received and the rest as sent, and that ordinary traffic still crosses
// afterwards.
func TestHostileFrames(t *testing.T) {
	p := newPair(t, topo.Options{Queues: 2})
	r := start(t, p, fwd.Config{Queues: 2, XPS: xps.ModeSticky})
	requirePing(t, "before", p.A, p.V4B, 3)

	var fake [6]byte
	rand.Read(fake[:])
	fake[0] = fake[0]&^1 | 2 // unicast, locally administered
	srcMAC := net.HardwareAddr(fake[:])
	const repeat = 10

	for _, d := range []struct {
		name     string
		src, dst *topo.NS
		in, out  int // forwarder link indexes
	}{{"A→B", p.A, p.B, 0, 1}, {"B→A", p.B, p.A, 1, 0}} {
		t.Run(d.name, func(t *testing.T) {
			frames := hostileFrames(t, macOf(t, d.dst, p.PeerB), srcMAC)
			before := [2]fwd.LinkStats{r.f.LinkStats(0), r.f.LinkStats(1)}
			start := time.Now()
			res := hostileExchange(t, d.src, d.dst, p.PeerA, srcMAC, frames, repeat)
			waitSettled(t, r.f, true, 5*time.Second)
			after := [2]fwd.LinkStats{r.f.LinkStats(0), r.f.LinkStats(1)}
			stillRunning(t, r)
			rx := after[d.in].RXPackets - before[d.in].RXPackets
			tx := after[d.out].TXPackets - before[d.out].TXPackets
			matched := 0
			for _, n := range res.matched {
				matched += n
			}
			t.Logf("%d kinds × %d: %d sent in %v, %d arrived as expected, %d duplicates, %d unexpected; forwarder rx %d tx %d (the rest is the namespaces' own traffic); drops in %v out %v; checksums completed %d",
				len(frames), repeat, res.sent, time.Since(start).Round(time.Millisecond), matched, res.dups, len(res.altered), rx, tx,
				dropDelta(before[d.in], after[d.in]), dropDelta(before[d.out], after[d.out]),
				after[d.in].ChecksumsCompleted-before[d.in].ChecksumsCompleted)
			for name, err := range res.sendErrs {
				t.Errorf("could not send %s: %v", name, err)
			}
			if res.sent != len(frames)*repeat {
				t.Fatalf("sent %d frames, want %d", res.sent, len(frames)*repeat)
			}
			// Every frame reached the forwarder, and left it unless it
			// claimed more bytes than it had.
			cut := 0
			for _, f := range frames {
				if f.truncated {
					cut += repeat
				}
			}
			if rx < uint64(res.sent) || tx < uint64(res.sent-cut) {
				t.Errorf("forwarder received %d and sent %d frames, fewer than the %d hostile frames sent (%d of them to be dropped as truncated)", rx, tx, res.sent, cut)
			}
			if got := dropDelta(before[d.in], after[d.in])[fwd.DropRXTruncated]; got != uint64(cut) {
				t.Errorf("rx_truncated grew by %d, want %d (the frames whose IP length exceeds their bytes)", got, cut)
			}
			var bad []string
			for _, f := range frames {
				got := res.matched[f.name]
				switch {
				case f.truncated && got != 0:
					bad = append(bad, fmt.Sprintf("%s (%d bytes): %d arrived, want it dropped as truncated", f.name, len(f.b), got))
				case f.truncated:
				case f.unseen && got != 0:
					t.Logf("%s: expected the receiving kernel to drop it, yet %d arrived intact", f.name, got)
				case !f.unseen && got != repeat:
					bad = append(bad, fmt.Sprintf("%s (%d bytes): %d of %d", f.name, len(f.b), got, repeat))
				}
			}
			sort.Strings(bad)
			if len(bad) > 0 {
				t.Errorf("hostile frames that did not all arrive byte for byte:\n  %s", strings.Join(bad, "\n  "))
			}
			if len(res.altered) > 0 {
				t.Errorf("%d frames from the hostile source arrived matching nothing sent (altered), e.g.:\n  %s", len(res.altered), strings.Join(res.altered, "\n  "))
			}
			if res.dups > 0 {
				t.Errorf("%d hostile frames arrived more than once", res.dups)
			}
			if c := after[d.in].ChecksumsCompleted - before[d.in].ChecksumsCompleted; c < repeat {
				t.Errorf("checksums completed grew by %d, want ≥ %d (the partial-checksum frame): is completion on?", c, repeat)
			}
		})
	}

	t.Run("under-14-bytes", func(t *testing.T) {
		// AF_PACKET refuses a frame shorter than the link-layer header.
		var perr error
		if err := p.A.Do(func() error {
			fd, ifi, err := hostileSocket(p.PeerA, false)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			to := &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}
			perr = unix.Sendto(fd, make([]byte, 13), 0, to)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("AF_PACKET sendto of a 13-byte frame: %v", perr)
		if perr == nil {
			t.Errorf("AF_PACKET sent a 13-byte frame; the comment on this test is out of date")
		}
		// AF_XDP sends them; veth drops them in its xmit (it needs an
		// Ethernet header), so they never reach the forwarder.
		dst := macOf(t, p.B, p.PeerB)
		stop := make(chan struct{})
		rv := startHostileReceiver(t, p.B, p.PeerB, srcMAC, nil, stop, 5*time.Second)
		var s *inline.Sender
		var ifindex int
		if err := p.A.Do(func() error {
			ifi, err := net.InterfaceByName(p.PeerA)
			if err != nil {
				return err
			}
			ifindex = ifi.Index
			s, err = inline.NewSender(inline.SenderConfig{Ifname: p.PeerA, Ifindex: ifi.Index, Queue: 0, RingSize: 256})
			return err
		}); err != nil {
			close(stop)
			<-rv.done
			t.Fatalf("AF_XDP sender in %s: %v", p.A.Name, err)
		}
		droppedBefore := txDropped(t, p.A, p.PeerA)
		before := r.f.LinkStats(0)
		sent := 0
		frame := append(append([]byte{}, dst...), srcMAC...)
		frame = append(frame, 0x08)
		for range 20 {
			for _, n := range []int{1, 6, 12, 13} {
				if ok, err := s.Send(frame[:n]); err != nil || !ok {
					t.Errorf("AF_XDP send of %d bytes: ok %v, %v", n, ok, err)
					continue
				}
				sent++
			}
		}
		if err := s.Wait(2 * time.Second); err != nil {
			t.Error(err)
		}
		s.Close()
		time.Sleep(200 * time.Millisecond)
		close(stop)
		<-rv.done
		after := r.f.LinkStats(0)
		dropped := txDropped(t, p.A, p.PeerA) - droppedBefore
		t.Logf("AF_XDP on %s (ifindex %d): %d frames of 1..13 bytes sent; %s tx_dropped grew by %d; forwarder rx on %s grew by %d (the namespace's own traffic); %d frames under 14 bytes arrived in B",
			p.PeerA, ifindex, sent, p.PeerA, dropped, p.LinkA, after.RXPackets-before.RXPackets, rv.res.runts)
		if rv.res.runts != 0 {
			t.Errorf("%d frames under 14 bytes crossed", rv.res.runts)
		}
		if dropped < uint64(sent) {
			t.Logf("veth counted %d drops for %d runts sent: where did the rest go?", dropped, sent)
		}
	})

	// Ordinary traffic still crosses, both ways, TCP included.
	requirePing(t, "after the hostile frames", p.A, p.V4B, 3)
	requirePing(t, "after the hostile frames, B→A", p.B, p.V4A, 3)
	requireBurst(t, "after the hostile frames", p.A, p.B, p.V4B, 2000, 90)
	if _, err := topo.TCPTransfer(p.B, p.A, p.V4A, 4<<20, 20*time.Second); err != nil {
		t.Errorf("TCP after the hostile frames: %v", err)
	}
	s := r.stop(t)
	t.Logf("xps after the hostile frames: %+v", s.XPS)
}

// txDropped reads the tx_dropped counter of a link inside ns.
func txDropped(t *testing.T, ns *topo.NS, name string) uint64 {
	t.Helper()
	var n atomic.Uint64
	if err := ns.Do(func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return err
		}
		if st := l.Attrs().Statistics; st != nil {
			n.Store(st.TxDropped)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n.Load()
}
