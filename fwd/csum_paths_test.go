package fwd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/rxring"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
	"github.com/xdpfwd/xdpfwd/xsk/xsktest"
)

// l4Frame builds an Ethernet frame carrying TCP or UDP over IPv4 or IPv6
// with frameLen bytes in all, and returns it with a correct checksum and
// as an offloading sender leaves it: the field holding the folded
// pseudo-header sum.
func l4Frame(v6 bool, proto uint8, frameLen int) (correct, partial []byte) {
	f := make([]byte, frameLen)
	copy(f, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1})
	ip := 14
	var l4, field int
	var pseudo uint32
	if v6 {
		binary.BigEndian.PutUint16(f[12:], 0x86dd)
		l4 = ip + 40
		f[ip] = 0x60
		binary.BigEndian.PutUint16(f[ip+4:], uint16(frameLen-l4))
		f[ip+6], f[ip+7] = proto, 64
		for i := 8; i < 40; i++ {
			f[ip+i] = byte(0xfd + i*7)
		}
		for i := 8; i < 40; i += 2 {
			pseudo += uint32(binary.BigEndian.Uint16(f[ip+i:]))
		}
	} else {
		binary.BigEndian.PutUint16(f[12:], 0x0800)
		l4 = ip + 20
		f[ip] = 0x45
		binary.BigEndian.PutUint16(f[ip+2:], uint16(frameLen-ip))
		f[ip+8], f[ip+9] = 64, proto
		copy(f[ip+12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
		for i := 12; i < 20; i += 2 {
			pseudo += uint32(binary.BigEndian.Uint16(f[ip+i:]))
		}
	}
	n := frameLen - l4
	pseudo += uint32(proto) + uint32(n)
	for i := l4; i < frameLen; i++ {
		f[i] = byte(i*131 + i>>8)
	}
	binary.BigEndian.PutUint16(f[l4:], 40000)
	binary.BigEndian.PutUint16(f[l4+2:], 5201)
	if proto == 6 {
		f[l4+12] = 5 << 4
		field = l4 + 16
	} else {
		binary.BigEndian.PutUint16(f[l4+4:], uint16(n))
		field = l4 + 6
	}
	fold := func(s uint32) uint16 {
		for s>>16 != 0 {
			s = s>>16 + s&0xffff
		}
		return uint16(s)
	}
	binary.BigEndian.PutUint16(f[field:], 0)
	s := pseudo
	for i := l4; i < frameLen; i += 2 {
		w := uint32(f[i]) << 8
		if i+1 < frameLen {
			w |= uint32(f[i+1])
		}
		s += w
	}
	c := ^fold(s)
	if c == 0 && proto == 17 {
		c = 0xffff
	}
	partial = bytes.Clone(f)
	binary.BigEndian.PutUint16(partial[field:], fold(pseudo))
	binary.BigEndian.PutUint16(f[field:], c)
	return f, partial
}

// testWorker is a worker with no sockets: enough for layOut.
func testWorker(t *testing.T, frameSize int) *worker {
	t.Helper()
	r, err := umem.New(umem.Config{
		FrameSize: frameSize, Frames: 64, InlineSlots: 16,
		FragOrder: 4, FragBlocks: 2, HugePages: umem.HugePagesOff,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	policy := linearize.Policy{InlineMax: 256, MaxTxFrags: 4, ChunkSize: frameSize}
	w := &worker{}
	w.rx.mem, w.rx.frameSize = r.Mem(), uint64(frameSize)
	w.rx.chain = make([]xsk.Desc, 0, linearize.MaxDescs)
	w.umems = oneDomain(r, policy, 16)
	w.layout.out = make([]xsk.Desc, linearize.MaxDescs)
	return w
}

// testPort is a port with an RX ring on an in-memory socket, for the
// frames layOut recycles, whose packets get their checksums finished.
func testPort(w *worker) *port {
	return &port{rx: rxring.New(xsktest.New(64, 0, 0).Socket, w.umems.dom[0].frames), csum: true}
}

// receive places frame in fresh frames of w as a received packet of the
// given piece lengths (the last takes the rest), 256 bytes into each
// frame, and collects it in w.rx.chain.
func (w *worker) receive(t *testing.T, frame []byte, lens ...int) {
	t.Helper()
	w.rx.chain = w.rx.chain[:0]
	for off, k := 0, 0; off < len(frame) || k == 0; k++ {
		l := len(frame) - off
		if k < len(lens) {
			l = min(lens[k], l)
		}
		a, ok := w.umems.dom[0].frames.Alloc(umem.Held) // as rxring's Next leaves it
		if !ok {
			t.Fatal("out of frames")
		}
		a += 256
		copy(w.rx.mem[a:], frame[off:off+l])
		w.rx.chain = append(w.rx.chain, xsk.Desc{Addr: a, Len: uint32(l), Options: xsk.PktContd})
		off += l
	}
	w.rx.chain[len(w.rx.chain)-1].Options = 0
}

// TestCompleteEveryPath lays out partial TCP and UDP packets, IPv4 and
// IPv6, on every TX path layOut has: the bytes that leave carry the full
// checksum and each packet is counted once. A complete packet is left
// alone and not counted.
func TestCompleteEveryPath(t *testing.T) {
	for _, c := range []struct {
		name      string
		frameSize int
		size      int
		lens      []int
		path      linearize.Path
	}{
		{"inline", 2048, 200, nil, linearize.Inline},
		{"inline-gathered", 2048, 200, []int{61, 77}, linearize.Inline},
		{"frame", 2048, 1400, nil, linearize.Frame},
		{"chain-odd-pieces", 2048, 5001, []int{1791, 1791}, linearize.Chain},
		{"chain-4096", 4096, 9014, []int{3840, 3840}, linearize.Chain},
		{"frag-repacked", 2048, 9014, []int{1792, 1792, 1792, 1792, 1792}, linearize.Frag},
		{"frag-repacked-odd", 2048, 9013, []int{1791, 1793, 1791, 1793, 1791}, linearize.Frag},
	} {
		for _, ft := range []struct {
			v6    bool
			proto uint8
		}{{false, 6}, {false, 17}, {true, 6}, {true, 17}} {
			name := fmt.Sprintf("%s/v%d-%d", c.name, map[bool]int{false: 4, true: 6}[ft.v6], ft.proto)
			t.Run(name, func(t *testing.T) {
				w := testWorker(t, c.frameSize)
				in := testPort(w)
				correct, partial := l4Frame(ft.v6, ft.proto, c.size)
				for _, pkt := range []struct {
					frame []byte
					count uint64
				}{{partial, 1}, {correct, 0}} {
					w.receive(t, pkt.frame, c.lens...)
					var bc batchCounts
					l := &lane{}
					tx := w.layOut(&rxPkt{in: in, descs: w.rx.chain, total: len(pkt.frame)}, l, &bc)
					bc.paths = l.bc.paths
					if tx == nil {
						t.Fatal("layOut dropped the packet")
					}
					if bc.paths[c.path] != 1 {
						t.Fatalf("paths %v, want one %v", bc.paths, c.path)
					}
					out := make([]byte, len(pkt.frame))
					if n := linearize.Gather(out, w.rx.mem, tx); n != len(out) {
						t.Fatalf("TX descriptors carry %d bytes, want %d", n, len(out))
					}
					if !bytes.Equal(out, correct) {
						t.Fatalf("the bytes that leave are not the packet with its full checksum")
					}
					if bc.n[cCsumCompleted] != pkt.count {
						t.Fatalf("%d completions counted, want %d", bc.n[cCsumCompleted], pkt.count)
					}
					w.release(tx)
					in.rx.Release() // the frames copied from go to the fake fill ring
					if v := w.umems.dom[0].region.Frames.Violations(); v != 0 {
						t.Fatalf("%d ownership violations", v)
					}
				}
			})
		}
	}
}

// TestCompleteNoAlloc: completing a chain of three or six frames in place
// (its segment list on the stack) allocates nothing.
func TestCompleteNoAlloc(t *testing.T) {
	for _, c := range []struct {
		frameSize int
		lens      []int
	}{{4096, []int{3840, 3840}}, {2048, []int{1792, 1792, 1792, 1792, 1792}}} {
		w := testWorker(t, c.frameSize)
		_, partial := l4Frame(false, 6, 9014)
		w.receive(t, partial, c.lens...)
		descs := append([]xsk.Desc(nil), w.rx.chain...)
		field := 14 + 20 + 16
		f := w.rx.mem[descs[0].Addr:]
		pf := binary.BigEndian.Uint16(partial[field:])
		if n := testing.AllocsPerRun(100, func() {
			binary.BigEndian.PutUint16(f[field:], pf)
			if !w.complete(descs) {
				panic("not completed")
			}
		}); n != 0 {
			t.Errorf("%d-byte frames: %v allocs per completion", c.frameSize, n)
		}
	}
}
