package fwd_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestDefaultOffloads leaves TX checksum offload on in the namespaces, as a
// container's veth has it: TCP and UDP, over IPv4 and IPv6, must cross
// byte for byte with checksum completion on (the default for veth), and
// the completions are counted. With it off, TCP does not get through.
func TestDefaultOffloads(t *testing.T) {
	p := newPair(t, topo.Options{TxChecksum: true})
	r := start(t, p, fwd.Config{})
	for _, c := range []struct {
		name     string
		src, dst *topo.NS
		addr     netip.Addr
	}{{"v4 A→B", p.A, p.B, p.V4B}, {"v6 B→A", p.B, p.A, p.V6A}} {
		res, err := topo.TCPTransfer(c.src, c.dst, c.addr, 16<<20, 30*time.Second)
		if err != nil {
			t.Fatalf("TCP %s with default offloads: %v", c.name, err)
		}
		t.Logf("TCP %s: %d MiB byte-exact, %.2f Gbit/s", c.name, res.Bytes>>20, res.Gbps)
		u, err := topo.UDPBurst(c.src, c.dst, c.addr, 5000, 512, 10*time.Second)
		if err != nil || u.Received < 2500 {
			t.Fatalf("UDP %s with default offloads: %+v %v", c.name, u, err)
		}
	}
	s := r.stop(t)
	done := s.Links[p.LinkA].ChecksumsCompleted + s.Links[p.LinkB].ChecksumsCompleted
	t.Logf("checksums completed: %s %d, %s %d", p.LinkA, s.Links[p.LinkA].ChecksumsCompleted, p.LinkB, s.Links[p.LinkB].ChecksumsCompleted)
	if done < 10000 {
		t.Errorf("only %d checksums completed; expected every offloaded segment", done)
	}

	t.Run("off", func(t *testing.T) {
		p := newPair(t, topo.Options{TxChecksum: true})
		start(t, p, fwd.Config{Checksums: fwd.ChecksumsOff})
		if _, err := topo.TCPTransfer(p.A, p.B, p.V4B, 1<<20, 3*time.Second); err == nil {
			t.Error("TCP crossed with partial checksums left unfinished: the test does not test what it claims")
		}
	})
}

// TestFakeChecksumCompletion: on a veth (ChecksumsAuto) a TCP or UDP
// checksum left partial by the sender leaves complete; a complete one
// untouched; each completion counted. From a veth to a zero-copy NIC too,
// where the copy across UMEM domains is what is completed.
func TestFakeChecksumCompletion(t *testing.T) {
	for _, links := range []struct {
		name string
		out  fwdtest.LinkOptions
	}{{"veth-veth", fwdtest.LinkOptions{Veth: true}}, {"veth-zerocopy-nic", zcNIC(1, 0)}} {
		for _, tc := range []struct {
			name  string
			proto uint8
			size  int
		}{{"udp-small", 17, 100}, {"udp", 17, 1400}, {"tcp-small", 6, 80}, {"tcp", 6, 1514}} {
			t.Run(links.name+"/"+tc.name, func(t *testing.T) { testChecksumCompletion(t, links.out, tc.proto, tc.size) })
		}
	}
}

func testChecksumCompletion(t *testing.T, out fwdtest.LinkOptions, proto uint8, size int) {
	r := startFake(t, fwd.Config{}, fwdtest.LinkOptions{Veth: true}, out)
	correct, partial := l4v4(proto, size)
	r.inject(0, 0, partial, fwdtest.RX{})
	r.inject(0, 0, correct, fwdtest.RX{})
	got := r.links[1].CollectN(2, 5*time.Second)
	if len(got) != 2 {
		t.Fatalf("%d frames out, want 2", len(got))
	}
	for i, g := range got {
		if !bytes.Equal(g.Data, correct) {
			t.Errorf("frame %d out: checksum %x, want %x", i, g.Data[len(g.Data)-len(correct):][l4Field(proto):][:2], correct[l4Field(proto):][:2])
		}
	}
	if n := r.f.LinkStats(0).ChecksumsCompleted; n != 1 {
		t.Errorf("checksums completed %d, want 1", n)
	}
	if across := len(r.f.Plan().Domains) > 1; across != (r.f.LinkStats(1).DomainCopyBytes == uint64(2*size)) {
		t.Errorf("%d bytes copied across domains, with %d domains", r.f.LinkStats(1).DomainCopyBytes, len(r.f.Plan().Domains))
	}
}

// l4Field is where the checksum of an IPv4 TCP or UDP frame is.
func l4Field(proto uint8) int {
	if proto == 6 {
		return 34 + 16
	}
	return 34 + 6
}

// l4v4 is an Ethernet/IPv4 TCP or UDP frame of size bytes with its
// checksum correct, and as an offloading sender leaves it (the folded
// pseudo-header sum in the field).
func l4v4(proto uint8, size int) (correct, partial []byte) {
	f := make([]byte, size)
	copy(f, macB)
	copy(f[6:], macA)
	binary.BigEndian.PutUint16(f[12:], 0x0800)
	ip := f[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(size-14))
	ip[8], ip[9] = 64, proto
	copy(ip[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ^fold(sum(ip)))
	l4 := f[34:]
	for i := range l4 {
		l4[i] = byte(i*131 + i>>8)
	}
	binary.BigEndian.PutUint16(l4, 40000)
	binary.BigEndian.PutUint16(l4[2:], 5201)
	if proto == 6 {
		l4[12] = 5 << 4
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	}
	field := l4Field(proto)
	pseudo := sum(ip[12:20]) + uint32(proto) + uint32(len(l4))
	binary.BigEndian.PutUint16(f[field:], 0)
	c := ^fold(pseudo + sum(l4))
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	partial = bytes.Clone(f)
	binary.BigEndian.PutUint16(partial[field:], fold(pseudo))
	binary.BigEndian.PutUint16(f[field:], c)
	return f, partial
}

func sum(b []byte) uint32 {
	var s uint32
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}
