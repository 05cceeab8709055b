package xps

import (
	"encoding/binary"
	"math/bits"
	"testing"
)

func TestParseKey(t *testing.T) {
	ethIP4 := eth(macB, macA, EtherTypeIPv4)
	ethIP6 := eth(macB, macA, EtherTypeIPv6)
	udpPayload := udp(5353, 53, make([]byte, 32))
	eightExt := cat(ext6(ProtoDestOpts), ext6(ProtoDestOpts), ext6(ProtoDestOpts), ext6(ProtoDestOpts),
		ext6(ProtoDestOpts), ext6(ProtoDestOpts), ext6(ProtoDestOpts), ext6(ProtoTCP))
	type want struct {
		kind         KeyKind
		proto        int // -1: don't check
		sport, dport uint16
		et           uint16
	}
	l4 := func(proto int, sp, dp uint16, et uint16) want { return want{KindL4, proto, sp, dp, et} }
	l3 := func(proto int, et uint16) want { return want{KindL3, proto, 0, 0, et} }
	l2 := func(et uint16) want { return want{KindL2, -1, 0, 0, et} }
	const v4, v6 = EtherTypeIPv4, EtherTypeIPv6
	tests := []struct {
		name  string
		frame []byte
		want  want
	}{
		{"ipv4 tcp", tcp4(40000, 80), l4(6, 40000, 80, v4)},
		{"ipv4 udp", cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0, udpPayload)), l4(17, 5353, 53, v4)},
		{"ipv4 sctp", cat(ethIP4, ipv4(ProtoSCTP, ip4A, ip4B, 0, sctp(36412, 36412))), l4(132, 36412, 36412, v4)},
		{"ipv4 icmp", cat(ethIP4, ipv4(1, ip4A, ip4B, 0, icmp())), l3(1, v4)},
		{"ipv4 gre", cat(ethIP4, ipv4(47, ip4A, ip4B, 0, make([]byte, 24))), l3(47, v4)},
		{"ipv4 fragment first", cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0x2000, udpPayload)), l3(17, v4)},
		{"ipv4 fragment middle", cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0x2000|185, make([]byte, 40))), l3(17, v4)},
		{"ipv4 fragment last", cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 370, make([]byte, 40))), l3(17, v4)},
		{"ipv4 options ihl 6", with(cat(ethIP4, ipv4(ProtoTCP, ip4A, ip4B, 0, cat([]byte{1, 1, 1, 1}, tcp(1, 2)))),
			func(b []byte) { b[14] = 0x46 }), l4(6, 1, 2, v4)},
		{"ipv4 ethernet padding", cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0, udp(7, 9, nil)), make([]byte, 18)), l4(17, 7, 9, v4)},
		{"ipv4 ihl < 5", with(tcp4(1, 2), func(b []byte) { b[14] = 0x44 }), l3(6, v4)},
		{"ipv4 ihl 0", with(tcp4(1, 2), func(b []byte) { b[14] = 0x40 }), l3(6, v4)},
		{"ipv4 ihl beyond frame", with(tcp4(1, 2), func(b []byte) { b[14] = 0x4f }), l3(6, v4)},
		{"ipv4 ihl and total beyond frame", with(tcp4(1, 2), func(b []byte) {
			b[14] = 0x4f
			binary.BigEndian.PutUint16(b[16:], 80)
		}), l3(6, v4)},
		{"ipv4 total length beyond frame", with(tcp4(1, 2), func(b []byte) { binary.BigEndian.PutUint16(b[16:], 41) }), l3(6, v4)},
		{"ipv4 total length < ihl", with(tcp4(1, 2), func(b []byte) { binary.BigEndian.PutUint16(b[16:], 19) }), l3(6, v4)},
		{"ipv4 total length 0", with(tcp4(1, 2), func(b []byte) { binary.BigEndian.PutUint16(b[16:], 0) }), l3(6, v4)},
		{"ipv4 truncated tcp header", cat(ethIP4, ipv4(ProtoTCP, ip4A, ip4B, 0, tcp(1, 2)[:10])), l3(6, v4)},
		{"ipv4 tcp header cut by total length", with(cat(tcp4(1, 2)), func(b []byte) { binary.BigEndian.PutUint16(b[16:], 39) }), l3(6, v4)},
		{"ipv4 truncated udp header", cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0, udp(1, 2, nil)[:7])), l3(17, v4)},
		{"ipv4 truncated sctp header", cat(ethIP4, ipv4(ProtoSCTP, ip4A, ip4B, 0, sctp(1, 2)[:11])), l3(132, v4)},
		{"ipv4 frame cut in header", tcp4(1, 2)[:14+19], l2(v4)},
		{"ipv4 frame cut in tcp", tcp4(1, 2)[:14+20+19], l3(6, v4)},
		{"ipv4 wrong version", with(tcp4(1, 2), func(b []byte) { b[14] = 0x65 }), l2(v4)},
		{"ipv6 tcp", cat(ethIP6, ipv6(ProtoTCP, ip6A, ip6B, tcp(40000, 443))), l4(6, 40000, 443, v6)},
		{"ipv6 udp", cat(ethIP6, ipv6(ProtoUDP, ip6A, ip6B, udpPayload)), l4(17, 5353, 53, v6)},
		{"ipv6 sctp", cat(ethIP6, ipv6(ProtoSCTP, ip6A, ip6B, sctp(9, 10))), l4(132, 9, 10, v6)},
		{"ipv6 icmpv6", cat(ethIP6, ipv6(58, ip6A, ip6B, icmp())), l3(58, v6)},
		{"ipv6 no next header", cat(ethIP6, ipv6(59, ip6A, ip6B, nil)), l3(59, v6)},
		{"ipv6 hbh+dst+rt tcp", tcp6ext(), l4(6, 40000, 443, v6)},
		{"ipv6 hbh+dst+frag first", cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B,
			cat(ext6(ProtoDestOpts), ext6(ProtoFragment), frag6(ProtoUDP, 0, true), udpPayload))), l3(17, v6)},
		{"ipv6 hbh+dst+frag middle", cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B,
			cat(ext6(ProtoDestOpts), ext6(ProtoFragment), frag6(ProtoUDP, 5, true), make([]byte, 40)))), l3(17, v6)},
		{"ipv6 frag last", cat(ethIP6, ipv6(ProtoFragment, ip6A, ip6B, cat(frag6(ProtoUDP, 10, false), make([]byte, 16)))), l3(17, v6)},
		{"ipv6 atomic fragment", cat(ethIP6, ipv6(ProtoFragment, ip6A, ip6B, cat(frag6(ProtoTCP, 0, false), tcp(5, 6)))), l4(6, 5, 6, v6)},
		{"ipv6 ah", cat(ethIP6, ipv6(ProtoAH, ip6A, ip6B, cat(ah6(ProtoUDP), udp(11, 12, nil)))), l4(17, 11, 12, v6)},
		{"ipv6 ah truncated", cat(ethIP6, ipv6(ProtoAH, ip6A, ip6B, ah6(ProtoUDP)[:10])), l3(51, v6)},
		{"ipv6 esp", cat(ethIP6, ipv6(50, ip6A, ip6B, make([]byte, 16))), l3(50, v6)},
		{"ipv6 8 ext headers", cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(eightExt, tcp(1, 2)))), l4(6, 1, 2, v6)},
		{"ipv6 9 ext headers", cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), eightExt, tcp(1, 2)))), l3(60, v6)},
		{"ipv6 ext header length beyond payload", cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B,
			with(ext6(ProtoTCP), func(b []byte) { b[1] = 3 }))), l3(0, v6)},
		{"ipv6 ext header cut", cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, []byte{ProtoTCP})), l3(0, v6)},
		{"ipv6 truncated ext chain", cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), ext6(ProtoTCP)[:5]))), l3(60, v6)},
		{"ipv6 frag header cut", cat(ethIP6, ipv6(ProtoFragment, ip6A, ip6B, frag6(ProtoUDP, 1, true)[:4])), l3(44, v6)},
		{"ipv6 payload length beyond frame", with(tcp6ext(), func(b []byte) { b[14+5]++ }), l3(0, v6)},
		{"ipv6 payload length 0 (jumbo)", with(tcp6ext(), func(b []byte) { b[14+4], b[14+5] = 0, 0 }), l3(0, v6)},
		{"ipv6 truncated tcp", cat(ethIP6, ipv6(ProtoTCP, ip6A, ip6B, tcp(1, 2)[:19])), l3(6, v6)},
		{"ipv6 frame cut in header", tcp6ext()[:14+39], l2(v6)},
		{"ipv6 wrong version", with(tcp6ext(), func(b []byte) { b[14] = 0x40 }), l2(v6)},
		{"vlan tcp", cat(eth(macB, macA, EtherTypeIPv4, EtherTypeVLAN), ipv4(ProtoTCP, ip4A, ip4B, 0, tcp(1, 2))), l4(6, 1, 2, v4)},
		{"double vlan tcp6", cat(eth(macB, macA, EtherTypeIPv6, EtherTypeVLAN, EtherTypeVLAN), ipv6(ProtoTCP, ip6A, ip6B, tcp(1, 2))), l4(6, 1, 2, v6)},
		{"qinq 802.1ad+802.1q udp", cat(eth(macB, macA, EtherTypeIPv4, EtherTypeQinQ, EtherTypeVLAN), ipv4(ProtoUDP, ip4A, ip4B, 0, udpPayload)), l4(17, 5353, 53, v4)},
		{"8 tags", cat(eth(macB, macA, EtherTypeIPv4, EtherTypeQinQ, EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN,
			EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN), ipv4(ProtoTCP, ip4A, ip4B, 0, tcp(1, 2))), l4(6, 1, 2, v4)},
		{"9 tags", cat(eth(macB, macA, EtherTypeIPv4, EtherTypeQinQ, EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN,
			EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN, EtherTypeVLAN), ipv4(ProtoTCP, ip4A, ip4B, 0, tcp(1, 2))), l2(EtherTypeVLAN)},
		{"vlan tag truncated", eth(macB, macA, EtherTypeIPv4, EtherTypeVLAN)[:16], l2(EtherTypeVLAN)},
		{"vlan only", eth(macB, macA, EtherTypeIPv4, EtherTypeVLAN), l2(v4)},
		{"arp", cat(eth(macB, macA, 0x0806), make([]byte, 28)), l2(0x0806)},
		{"lldp", eth(macB, macA, 0x88cc), l2(0x88cc)},
		{"ethernet header only ipv4", ethIP4, l2(v4)},
		{"runt 13", tcp4(1, 2)[:13], want{KindInvalid, -1, 0, 0, 0}},
		{"empty", nil, want{KindInvalid, -1, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, kind := ParseKey(tt.frame, false)
			w := tt.want
			if kind != w.kind || k.Kind != kind {
				t.Fatalf("kind %v (key %v), want %v; key %+v", kind, k.Kind, w.kind, k)
			}
			if w.proto >= 0 && int(k.Proto) != w.proto {
				t.Errorf("proto %d, want %d", k.Proto, w.proto)
			}
			if k.SrcPort != w.sport || k.DstPort != w.dport {
				t.Errorf("ports %d→%d, want %d→%d", k.SrcPort, k.DstPort, w.sport, w.dport)
			}
			if k.EtherType != w.et {
				t.Errorf("ethertype %#04x, want %#04x", k.EtherType, w.et)
			}
			checkAddrs(t, k, tt.frame)
			// Determinism, and the symmetric key differs at most by order.
			if k2, _ := ParseKey(tt.frame, false); k2 != k {
				t.Errorf("not deterministic: %+v vs %+v", k, k2)
			}
			if ks, _ := ParseKey(tt.frame, true); ks != k && ks != mirror(k) {
				t.Errorf("symmetric key %+v is neither %+v nor its mirror", ks, k)
			}
		})
	}
}

// checkAddrs checks the address fields against the test endpoints.
func checkAddrs(t *testing.T, k Key, frame []byte) {
	t.Helper()
	var src, dst [16]byte
	switch {
	case k.Kind == KindInvalid:
	case k.Kind == KindL2:
		copy(src[:], macA[:])
		copy(dst[:], macB[:])
	case k.EtherType == EtherTypeIPv4:
		copy(src[:], ip4A[:])
		copy(dst[:], ip4B[:])
	default:
		src, dst = ip6A, ip6B
	}
	if k.Src != src || k.Dst != dst {
		t.Errorf("addresses %x → %x, want %x → %x", k.Src, k.Dst, src, dst)
	}
	if k.Kind != KindL4 && (k.SrcPort != 0 || k.DstPort != 0) {
		t.Errorf("%v key with ports %d, %d", k.Kind, k.SrcPort, k.DstPort)
	}
}

func mirror(k Key) Key {
	k.Src, k.Dst = k.Dst, k.Src
	k.SrcPort, k.DstPort = k.DstPort, k.SrcPort
	return k
}

// TestFragmentsHashAlike: every fragment of a datagram, first included, gives
// one key.
func TestFragmentsHashAlike(t *testing.T) {
	ethIP4 := eth(macB, macA, EtherTypeIPv4)
	ethIP6 := eth(macB, macA, EtherTypeIPv6)
	groups := map[string][][]byte{
		"ipv4": {
			cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0x2000, udp(1000, 2000, make([]byte, 1472)))),
			cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0x2000|185, make([]byte, 1480))),
			cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 370, make([]byte, 100))),
		},
		"ipv6": {
			cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), ext6(ProtoFragment), frag6(ProtoUDP, 0, true), udp(1000, 2000, make([]byte, 1200))))),
			cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), ext6(ProtoFragment), frag6(ProtoUDP, 151, true), make([]byte, 1208)))),
			cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), ext6(ProtoFragment), frag6(ProtoUDP, 302, false), make([]byte, 8)))),
		},
	}
	for name, frames := range groups {
		for _, sym := range []bool{false, true} {
			k0, kind0 := ParseKey(frames[0], sym)
			if kind0 != KindL3 {
				t.Fatalf("%s: first fragment kind %v, want l3", name, kind0)
			}
			for i, f := range frames[1:] {
				if k, _ := ParseKey(f, sym); k != k0 || k.Hash() != k0.Hash() {
					t.Errorf("%s sym=%v: fragment %d key %+v, first %+v", name, sym, i+1, k, k0)
				}
			}
		}
	}
}

// TestVLANTagsNotInKey: tags are skipped, so a flow bridged between VLANs
// keeps its key.
func TestVLANTagsNotInKey(t *testing.T) {
	plain := tcp4(1234, 80)
	tagged := cat(eth(macB, macA, EtherTypeIPv4, EtherTypeQinQ, EtherTypeVLAN), plain[14:])
	k1, _ := ParseKey(plain, false)
	k2, _ := ParseKey(tagged, false)
	if k1 != k2 {
		t.Fatalf("tagged %+v != untagged %+v", k2, k1)
	}
}

// swapEndpoints returns frame with source and destination swapped at the
// places parse read them: MACs, IP addresses, ports.
func swapEndpoints(frame []byte) []byte {
	k, lay := parse(frame, false)
	c := append([]byte(nil), frame...)
	if k.Kind == KindInvalid {
		return c
	}
	swapBytes(c[0:6], c[6:12])
	if lay.l3 >= 0 {
		if k.EtherType == EtherTypeIPv4 {
			swapBytes(c[lay.l3+12:lay.l3+16], c[lay.l3+16:lay.l3+20])
		} else {
			swapBytes(c[lay.l3+8:lay.l3+24], c[lay.l3+24:lay.l3+40])
		}
	}
	if lay.l4 >= 0 {
		swapBytes(c[lay.l4:lay.l4+2], c[lay.l4+2:lay.l4+4])
	}
	return c
}

func swapBytes(a, b []byte) {
	for i := range a {
		a[i], b[i] = b[i], a[i]
	}
}

func TestSymmetric(t *testing.T) {
	ethIP6 := eth(macB, macA, EtherTypeIPv6)
	frames := map[string][]byte{
		"tcp4":       tcp4(40000, 80),
		"tcp6 ext":   tcp6ext(),
		"udp6":       cat(ethIP6, ipv6(ProtoUDP, ip6A, ip6B, udp(1, 2, nil))),
		"icmp4":      cat(eth(macB, macA, EtherTypeIPv4), ipv4(1, ip4A, ip4B, 0, icmp())),
		"frag6":      cat(ethIP6, ipv6(ProtoFragment, ip6A, ip6B, cat(frag6(ProtoUDP, 3, true), make([]byte, 16)))),
		"arp":        cat(eth(macB, macA, 0x0806), make([]byte, 28)),
		"qinq tcp4":  cat(eth(macB, macA, EtherTypeIPv4, EtherTypeQinQ, EtherTypeVLAN), ipv4(ProtoTCP, ip4A, ip4B, 0, tcp(5, 6))),
		"same addrs": cat(eth(macA, macA, EtherTypeIPv4), ipv4(ProtoUDP, ip4A, ip4A, 0, udp(9000, 53, nil))),
	}
	for name, f := range frames {
		t.Run(name, func(t *testing.T) {
			r := swapEndpoints(f)
			if string(r) == string(f) {
				t.Fatal("swap changed nothing")
			}
			fk, _ := ParseKey(f, false)
			rk, _ := ParseKey(r, false)
			if fk == rk {
				t.Errorf("asymmetric keys equal for both directions: %+v", fk)
			}
			if rk != mirror(fk) {
				t.Errorf("reverse key %+v, want mirror of %+v", rk, fk)
			}
			fs, _ := ParseKey(f, true)
			rs, _ := ParseKey(r, true)
			if fs != rs || fs.Hash() != rs.Hash() {
				t.Errorf("symmetric keys differ: %+v vs %+v", fs, rs)
			}
			if fs != fk && fs != rk {
				t.Errorf("symmetric key %+v is neither direction", fs)
			}
		})
	}
}

func TestHashMixing(t *testing.T) {
	const n = 1 << 16
	seen := make(map[uint64]bool, n)
	var perQueue [12]int
	var perBucket [64]int
	base, _ := ParseKey(tcp4(0, 443), false)
	for i := range n {
		k := base
		k.SrcPort = uint16(i)
		h := k.Hash()
		if seen[h] {
			t.Fatalf("64-bit hash collision at port %d", i)
		}
		seen[h] = true
		perQueue[HashQueue(h, len(perQueue))]++
		perBucket[h>>58]++
	}
	check := func(what string, counts []int) {
		exp := float64(n) / float64(len(counts))
		var chi float64
		for _, c := range counts {
			d := float64(c) - exp
			chi += d * d / exp
		}
		// ~4 standard deviations above the degrees of freedom.
		if df := float64(len(counts) - 1); chi > df+4*(2*df) {
			t.Errorf("%s: chi² %.1f for %d degrees of freedom: %v", what, chi, len(counts)-1, counts)
		}
	}
	check("h % 12", perQueue[:])
	check("top 6 bits", perBucket[:])

	// Avalanche: flipping one key bit flips about half of the hash bits.
	kb := base
	var total, flips int
	for field := range 5 {
		for bit := range 16 {
			k := kb
			switch field {
			case 0:
				k.Src[bit%16] ^= 1 << (bit % 8)
			case 1:
				k.Dst[15-bit%16] ^= 1 << (bit % 8)
			case 2:
				k.SrcPort ^= 1 << bit
			case 3:
				k.DstPort ^= 1 << bit
			case 4:
				k.Proto ^= 1 << (bit % 8)
			}
			total += bits.OnesCount64(k.Hash() ^ kb.Hash())
			flips++
		}
	}
	if avg := float64(total) / float64(flips); avg < 28 || avg > 36 {
		t.Errorf("avalanche: %.1f bits flip on average, want ≈32", avg)
	}
}

func TestParseKeyNoAlloc(t *testing.T) {
	frames := [][]byte{tcp4(1, 2), tcp6ext(), cat(eth(macB, macA, 0x0806), make([]byte, 28))}
	var sink uint64
	for _, f := range frames {
		if a := testing.AllocsPerRun(100, func() {
			k, _ := ParseKey(f, true)
			sink += k.Hash()
		}); a != 0 {
			t.Errorf("ParseKey+Hash allocates %.1f per run", a)
		}
	}
	_ = sink
}

func TestKindAndModeStrings(t *testing.T) {
	for k, s := range map[KeyKind]string{KindInvalid: "invalid", KindL2: "l2", KindL3: "l3", KindL4: "l4", 9: "KeyKind(9)"} {
		if k.String() != s {
			t.Errorf("%d: %q, want %q", k, k.String(), s)
		}
	}
	for _, m := range []Mode{ModeSticky, ModeHash, ModeCPU} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if m, err := ParseMode(""); err != nil || m != ModeSticky {
		t.Errorf(`ParseMode("") = %v, %v`, m, err)
	}
	if m, err := ParseMode(" HASH "); err != nil || m != ModeHash {
		t.Errorf(`ParseMode(" HASH ") = %v, %v`, m, err)
	}
	if _, err := ParseMode("rss"); err == nil {
		t.Error(`ParseMode("rss"): no error`)
	}
	if s := Mode(7).String(); s != "Mode(7)" {
		t.Errorf("Mode(7).String() = %q", s)
	}
}
