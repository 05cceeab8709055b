package fwd

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestRestoreVLAN: a packet whose metadata says a tag was recovered gets
// it back after its MAC addresses, starts 4 bytes earlier, and keeps its
// arrival stamp where stampOf looks; a packet without a recovered tag, or
// without room for metadata in front of it, is left alone.
func TestRestoreVLAN(t *testing.T) {
	r, err := umem.New(umem.Config{FrameSize: 2048, Frames: 16, HugePages: umem.HugePagesOff})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := &worker{}
	w.rx.mem, w.rx.frameSize, w.flows.now = r.Mem(), 2048, 1<<40
	unit := r.Frames.Base() + 2048
	frame := make([]byte, 60)
	for i := range frame {
		frame[i] = byte(i + 1)
	}
	const stamp = int64(1 << 39)
	put := func(addr uint64, flags uint32, tpid, tci uint16) {
		m := w.rx.mem[addr-xsk.MetaLen : addr]
		binary.BigEndian.PutUint16(m[0:], tpid)
		binary.NativeEndian.PutUint16(m[2:], tci)
		binary.NativeEndian.PutUint32(m[4:], flags)
		binary.NativeEndian.PutUint64(m[8:], uint64(stamp))
		copy(w.rx.mem[addr:], frame)
	}

	addr := unit + 256
	put(addr, xsk.MetaVLANValid, 0x8100, 0x2064) // PCP 1, VID 100
	d := xsk.Desc{Addr: addr, Len: uint32(len(frame))}
	if !w.restoreVLAN(&d) {
		t.Fatal("tag not restored")
	}
	want := append(append(append([]byte(nil), frame[:12]...), 0x81, 0x00, 0x20, 0x64), frame[12:]...)
	if d.Addr != addr-4 || d.Len != uint32(len(want)) || !bytes.Equal(w.rx.mem[d.Addr:d.Addr+uint64(d.Len)], want) {
		t.Fatalf("after restoreVLAN: %+v %x, want addr %d: %x", d, w.rx.mem[d.Addr:d.Addr+uint64(d.Len)], addr-4, want)
	}
	if got := w.stampOf(d.Addr); got != stamp {
		t.Errorf("stamp after restoreVLAN: %d, want %d", got, stamp)
	}

	for _, c := range []struct {
		name  string
		addr  uint64
		flags uint32
	}{
		{"no tag recovered", unit + 256, 0},
		{"flags word not the program's", unit + 256, 1},
		{"no room for metadata", unit + xsk.MetaLen - 4, xsk.MetaVLANValid},
	} {
		if c.addr >= unit+xsk.MetaLen {
			put(c.addr, c.flags, 0x8100, 100)
		} else {
			copy(w.rx.mem[c.addr:], frame)
		}
		before := append([]byte(nil), w.rx.mem[unit:unit+2048]...)
		d := xsk.Desc{Addr: c.addr, Len: uint32(len(frame))}
		if w.restoreVLAN(&d) || d.Addr != c.addr || d.Len != uint32(len(frame)) || !bytes.Equal(before, w.rx.mem[unit:unit+2048]) {
			t.Errorf("%s: restoreVLAN changed the packet: %+v", c.name, d)
		}
	}
}
