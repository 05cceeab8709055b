package xps

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// corpusFrames are the header shapes of the seed corpus (also committed under
// testdata/fuzz/FuzzParseKey; regenerate with XPS_WRITE_CORPUS=1 go test
// -run TestWriteFuzzCorpus ./xps/).
func corpusFrames() map[string][]byte {
	ethIP4 := eth(macB, macA, EtherTypeIPv4)
	ethIP6 := eth(macB, macA, EtherTypeIPv6)
	udpP := udp(5353, 53, make([]byte, 8))
	return map[string][]byte{
		"ipv4-tcp":             tcp4(40000, 80),
		"ipv4-udp":             cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0, udpP)),
		"ipv4-sctp":            cat(ethIP4, ipv4(ProtoSCTP, ip4A, ip4B, 0, sctp(36412, 36412))),
		"ipv4-icmp":            cat(ethIP4, ipv4(1, ip4A, ip4B, 0, icmp())),
		"ipv4-frag-first":      cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0x2000, udpP)),
		"ipv4-frag-middle":     cat(ethIP4, ipv4(ProtoUDP, ip4A, ip4B, 0x2000|185, make([]byte, 16))),
		"ipv4-options":         with(cat(ethIP4, ipv4(ProtoTCP, ip4A, ip4B, 0, cat([]byte{1, 1, 1, 1}, tcp(1, 2)))), func(b []byte) { b[14] = 0x46 }),
		"ipv4-ihl-lt-5":        with(tcp4(1, 2), func(b []byte) { b[14] = 0x44 }),
		"ipv4-ihl-beyond":      with(tcp4(1, 2), func(b []byte) { b[14] = 0x4f }),
		"ipv4-totlen-beyond":   with(tcp4(1, 2), func(b []byte) { b[16], b[17] = 0xff, 0xff }),
		"ipv4-tcp-truncated":   cat(ethIP4, ipv4(ProtoTCP, ip4A, ip4B, 0, tcp(1, 2)[:10])),
		"ipv6-tcp":             cat(ethIP6, ipv6(ProtoTCP, ip6A, ip6B, tcp(40000, 443))),
		"ipv6-icmpv6":          cat(ethIP6, ipv6(58, ip6A, ip6B, icmp())),
		"ipv6-hbh-dst-rt-tcp":  tcp6ext(),
		"ipv6-hbh-dst-frag":    cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), ext6(ProtoFragment), frag6(ProtoUDP, 0, true), udpP))),
		"ipv6-frag-middle":     cat(ethIP6, ipv6(ProtoFragment, ip6A, ip6B, cat(frag6(ProtoUDP, 5, true), make([]byte, 16)))),
		"ipv6-atomic-frag":     cat(ethIP6, ipv6(ProtoFragment, ip6A, ip6B, cat(frag6(ProtoTCP, 0, false), tcp(5, 6)))),
		"ipv6-ah-udp":          cat(ethIP6, ipv6(ProtoAH, ip6A, ip6B, cat(ah6(ProtoUDP), udp(11, 12, nil)))),
		"ipv6-ext-truncated":   cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(ProtoDestOpts), ext6(ProtoTCP)[:5]))),
		"ipv6-plen-beyond":     with(tcp6ext(), func(b []byte) { b[14+5]++ }),
		"vlan-tcp4":            cat(eth(macB, macA, EtherTypeIPv4, EtherTypeVLAN), ipv4(ProtoTCP, ip4A, ip4B, 0, tcp(1, 2))),
		"vlan-vlan-tcp6":       cat(eth(macB, macA, EtherTypeIPv6, EtherTypeVLAN, EtherTypeVLAN), ipv6(ProtoTCP, ip6A, ip6B, tcp(1, 2))),
		"qinq-udp4":            cat(eth(macB, macA, EtherTypeIPv4, EtherTypeQinQ, EtherTypeVLAN), ipv4(ProtoUDP, ip4A, ip4B, 0, udpP)),
		"vlan-9-tags":          eth(macB, macA, EtherTypeIPv4, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100, 0x8100),
		"vlan-truncated":       eth(macB, macA, EtherTypeIPv4, EtherTypeVLAN)[:16],
		"arp":                  cat(eth(macB, macA, 0x0806), make([]byte, 28)),
		"runt":                 tcp4(1, 2)[:13],
		"empty":                {},
		"ipv6-9-ext":           cat(ethIP6, ipv6(ProtoHopByHop, ip6A, ip6B, cat(ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(60), ext6(ProtoTCP), tcp(1, 2)))),
		"ipv4-same-addr-ports": cat(eth(macA, macA, EtherTypeIPv4), ipv4(ProtoUDP, ip4A, ip4A, 0, udp(9000, 53, nil))),
	}
}

// TestWriteFuzzCorpus (re)writes the committed seed corpus; it runs only with
// XPS_WRITE_CORPUS=1.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("XPS_WRITE_CORPUS") != "1" {
		t.Skip("set XPS_WRITE_CORPUS=1 to rewrite testdata/fuzz/FuzzParseKey")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParseKey")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, f := range corpusFrames() {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", f)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzParseKey: ParseKey never panics, is deterministic, returns a
// well-formed key, only gets coarser on truncation, and swapping the
// endpoints of a frame mirrors its key (and leaves the symmetric key alone).
func FuzzParseKey(f *testing.F) {
	for _, fr := range corpusFrames() {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		orig := append([]byte(nil), frame...)
		k, kind := ParseKey(frame, false)
		ks, kinds := ParseKey(frame, true)
		if string(frame) != string(orig) {
			t.Fatal("ParseKey modified the frame")
		}
		if k.Kind != kind || ks.Kind != kinds || kind != kinds {
			t.Fatalf("kinds %v/%v, symmetric %v/%v", k.Kind, kind, ks.Kind, kinds)
		}
		if k2, _ := ParseKey(frame, false); k2 != k || k2.Hash() != k.Hash() {
			t.Fatalf("not deterministic: %+v vs %+v", k, k2)
		}
		if ks != k && ks != mirror(k) {
			t.Fatalf("symmetric key %+v neither %+v nor its mirror", ks, k)
		}
		wellFormed(t, k)

		// Truncation never makes a key more specific.
		for _, n := range []int{len(frame) - 1, len(frame) / 2, 14, 13} {
			if n >= 0 && n < len(frame) {
				if _, kp := ParseKey(frame[:n], false); kp > kind {
					t.Fatalf("prefix of %d bytes is %v, whole frame %v", n, kp, kind)
				}
			}
		}

		if kind == KindInvalid {
			return
		}
		r := swapEndpoints(frame)
		rk, rkind := ParseKey(r, false)
		if rkind != kind || rk != mirror(k) {
			t.Fatalf("swapped frame key %+v (%v), want mirror of %+v", rk, rkind, k)
		}
		if rs, _ := ParseKey(r, true); rs != ks || rs.Hash() != ks.Hash() {
			t.Fatalf("symmetric key of swapped frame %+v, want %+v", rs, ks)
		}
	})
}

// wellFormed checks the zero fields of k's kind.
func wellFormed(t *testing.T, k Key) {
	t.Helper()
	var zero [16]byte
	switch k.Kind {
	case KindInvalid:
		if k != (Key{}) {
			t.Fatalf("invalid key not zero: %+v", k)
		}
		return
	case KindL2:
		if [10]byte(k.Src[6:]) != [10]byte(zero[6:]) || [10]byte(k.Dst[6:]) != [10]byte(zero[6:]) || k.Proto != 0 {
			t.Fatalf("L2 key with more than MACs: %+v", k)
		}
	case KindL3, KindL4:
		if k.EtherType != EtherTypeIPv4 && k.EtherType != EtherTypeIPv6 {
			t.Fatalf("%v key with EtherType %#x", k.Kind, k.EtherType)
		}
		if k.EtherType == EtherTypeIPv4 && ([12]byte(k.Src[4:]) != [12]byte(zero[4:]) || [12]byte(k.Dst[4:]) != [12]byte(zero[4:])) {
			t.Fatalf("IPv4 key with more than 4 address bytes: %+v", k)
		}
	default:
		t.Fatalf("kind %v", k.Kind)
	}
	if k.Kind != KindL4 && (k.SrcPort != 0 || k.DstPort != 0) {
		t.Fatalf("%v key with ports: %+v", k.Kind, k)
	}
	if k.Kind == KindL4 && k.Proto != ProtoTCP && k.Proto != ProtoUDP && k.Proto != ProtoSCTP {
		t.Fatalf("L4 key with protocol %d", k.Proto)
	}
}
