package linearize

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// insertVLANRef is the obvious construction of the tagged frame.
func insertVLANRef(frame []byte, tpid, tci uint16) []byte {
	out := append([]byte(nil), frame[:12]...)
	out = binary.BigEndian.AppendUint16(out, tpid)
	out = binary.BigEndian.AppendUint16(out, tci)
	return append(out, frame[12:]...)
}

// checkInsertVLAN runs InsertVLAN on a copy of mem and checks it against
// the reference: the tagged frame at the new address, every byte outside
// [addr-4, addr+12) untouched; or, when it refuses, nothing touched.
func checkInsertVLAN(t *testing.T, mem []byte, addr uint64, n int, floor uint64, tpid, tci uint16) bool {
	t.Helper()
	got := append([]byte(nil), mem...)
	na, nl, ok := InsertVLAN(got, addr, n, floor, tpid, tci)
	valid := (tpid == TPID8021Q || tpid == TPID8021AD) && n >= 12 && addr >= floor+4 && floor+4 > floor &&
		addr <= uint64(len(mem)) && uint64(n) <= uint64(len(mem))-addr
	if ok != valid {
		t.Fatalf("InsertVLAN(len %d, addr %d, n %d, floor %d, tpid %#x) ok = %v, want %v", len(mem), addr, n, floor, tpid, ok, valid)
	}
	if !ok {
		if na != addr || nl != n || !bytes.Equal(got, mem) {
			t.Fatalf("refused InsertVLAN changed something: addr %d→%d len %d→%d", addr, na, n, nl)
		}
		return false
	}
	want := insertVLANRef(mem[addr:addr+uint64(n)], tpid, tci)
	if na != addr-4 || nl != n+4 || !bytes.Equal(got[na:na+uint64(nl)], want) {
		t.Fatalf("InsertVLAN(addr %d, n %d): frame at %d (%d bytes) = %x, want at %d: %x", addr, n, na, nl, got[na:na+uint64(nl)], addr-4, want)
	}
	if !bytes.Equal(got[:na], mem[:na]) || !bytes.Equal(got[addr+12:], mem[addr+12:]) {
		t.Fatal("InsertVLAN wrote outside the moved addresses and the tag")
	}
	return true
}

func TestInsertVLAN(t *testing.T) {
	mem := make([]byte, 256)
	for i := range mem {
		mem[i] = byte(i)
	}
	for _, c := range []struct {
		name        string
		addr        uint64
		n           int
		floor       uint64
		tpid, tci   uint16
		wantOK      bool
		wantAddr    uint64
		wantTagByte []byte
	}{
		{"802.1Q", 64, 60, 0, TPID8021Q, 100, true, 60, []byte{0x81, 0x00, 0x00, 0x64}},
		{"802.1ad PCP and DEI kept", 64, 60, 0, TPID8021AD, 0xf123, true, 60, []byte{0x88, 0xa8, 0xf1, 0x23}},
		{"headroom exactly 4", 20, 60, 16, TPID8021Q, 1, true, 16, []byte{0x81, 0x00, 0x00, 0x01}},
		{"frame exactly the MACs", 64, 12, 0, TPID8021Q, 7, true, 60, []byte{0x81, 0x00, 0x00, 0x07}},
		{"frame to the end of mem", 200, 56, 0, TPID8021Q, 7, true, 196, []byte{0x81, 0x00, 0x00, 0x07}},
		{"headroom 3", 19, 60, 16, TPID8021Q, 1, false, 0, nil},
		{"addr below floor", 10, 60, 16, TPID8021Q, 1, false, 0, nil},
		{"addr 0", 0, 60, 0, TPID8021Q, 1, false, 0, nil},
		{"runt", 64, 11, 0, TPID8021Q, 1, false, 0, nil},
		{"past the end of mem", 200, 57, 0, TPID8021Q, 1, false, 0, nil},
		{"addr past mem", 300, 12, 0, TPID8021Q, 1, false, 0, nil},
		{"huge n", 64, int(^uint(0) >> 1), 0, TPID8021Q, 1, false, 0, nil},
		{"unknown TPID", 64, 60, 0, 0x9100, 1, false, 0, nil},
		{"zero TPID", 64, 60, 0, 0, 1, false, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ok := checkInsertVLAN(t, mem, c.addr, c.n, c.floor, c.tpid, c.tci)
			if ok != c.wantOK {
				t.Fatalf("ok = %v, want %v", ok, c.wantOK)
			}
			if !ok {
				return
			}
			got := append([]byte(nil), mem...)
			na, _, _ := InsertVLAN(got, c.addr, c.n, c.floor, c.tpid, c.tci)
			if na != c.wantAddr || !bytes.Equal(got[na+12:na+16], c.wantTagByte) || !bytes.Equal(got[na:na+12], mem[c.addr:c.addr+12]) {
				t.Errorf("frame at %d starts %x, want at %d: MACs %x then tag %x", na, got[na:na+16], c.wantAddr, mem[c.addr:c.addr+12], c.wantTagByte)
			}
		})
	}
}

func FuzzInsertVLAN(f *testing.F) {
	f.Add(uint16(256), uint64(64), 60, uint64(0), uint16(TPID8021Q), uint16(100))
	f.Add(uint16(80), uint64(20), 60, uint64(16), uint16(TPID8021AD), uint16(0xffff))
	f.Add(uint16(80), uint64(19), 60, uint64(16), uint16(TPID8021Q), uint16(1))
	f.Add(uint16(16), uint64(4), 12, uint64(0), uint16(TPID8021Q), uint16(1))
	f.Add(uint16(16), ^uint64(0), 12, ^uint64(0)-3, uint16(TPID8021Q), uint16(1))
	f.Fuzz(func(t *testing.T, size uint16, addr uint64, n int, floor uint64, tpid, tci uint16) {
		mem := make([]byte, size%4096)
		for i := range mem {
			mem[i] = byte(i*7 + 3)
		}
		checkInsertVLAN(t, mem, addr, n, floor, tpid, tci)
	})
}
