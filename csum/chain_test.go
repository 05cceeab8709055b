package csum

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// split copies frame into segments of the given lengths (the last takes
// the rest), each with no spare capacity, so a write past a segment's end
// panics instead of landing in the next one.
func split(frame []byte, lens ...int) [][]byte {
	return splitInto(make([]byte, len(frame)), nil, frame, lens...)
}

// splitInto is split into buf (len(frame) bytes) and segs' storage.
func splitInto(buf []byte, segs [][]byte, frame []byte, lens ...int) [][]byte {
	copy(buf, frame)
	segs = segs[:0]
	off := 0
	for _, l := range lens {
		l = min(l, len(frame)-off)
		segs = append(segs, buf[off:off+l:off+l])
		off += l
	}
	return append(segs, buf[off:len(frame):len(frame)])
}

// headerSpan is how many bytes CompleteChain parses headers from for a
// chain: the first segment, or the first HeaderGather bytes when that is
// shorter.
func headerSpan(segs [][]byte, total int) int {
	if len(segs) == 0 {
		return 0
	}
	if n := len(segs[0]); n >= min(total, HeaderGather) {
		return n
	}
	return min(total, HeaderGather)
}

// refChain is what the reference does to a frame in one piece, and where
// its TCP or UDP header ends (0: the reference cannot parse it).
type refChain struct {
	frame, out []byte
	want       Result
	hdrEnd     int
	buf        []byte   // scratch for the split frame
	segs       [][]byte // scratch for its segments
}

func newRefChain(frame []byte) *refChain {
	rc := &refChain{frame: frame, buf: make([]byte, len(frame))}
	rc.want, rc.out = refComplete(frame)
	if loc, ok := refLocate(bytes.Clone(frame)); ok {
		rc.hdrEnd = loc.field + 4 // the TCP header's end: 20 bytes from its start
		if loc.udp {
			rc.hdrEnd = loc.field + 2 // the UDP header's end
		}
	}
	return rc
}

// wantFor is what CompleteChain must do to the frame split as segs: what
// the reference does to it in one piece, unless its headers, through the
// TCP or UDP header, extend beyond what CompleteChain parses: then NotL4,
// untouched.
func (rc *refChain) wantFor(segs [][]byte) (Result, []byte) {
	if rc.hdrEnd > headerSpan(segs, len(rc.frame)) {
		return NotL4, rc.frame
	}
	return rc.want, rc.out
}

// checkChain runs CompleteChain on frame split at lens and checks result
// and bytes against the reference, then that a second call leaves it
// alone.
func checkChain(t *testing.T, frame []byte, lens ...int) {
	t.Helper()
	newRefChain(frame).check(t, lens...)
}

func (rc *refChain) check(t *testing.T, lens ...int) {
	t.Helper()
	segs := splitInto(rc.buf, rc.segs, rc.frame, lens...)
	rc.segs = segs
	want, wantOut := rc.wantFor(segs)
	got := CompleteChain(segs)
	if got != want || !bytes.Equal(rc.buf, wantOut) {
		t.Fatalf("split %v of %d bytes: CompleteChain = %v, want %v; bytes equal: %v",
			lens, len(rc.frame), got, want, bytes.Equal(rc.buf, wantOut))
	}
	second := CompleteChain(segs)
	if !bytes.Equal(rc.buf, wantOut) {
		t.Fatalf("split %v: second CompleteChain modified the frame", lens)
	}
	if got == Completed && second != AlreadyComplete || got != Completed && second != got {
		t.Fatalf("split %v: second CompleteChain = %v after %v", lens, second, got)
	}
}

// chainFrames is every frame shape the Complete tests use: partial,
// correct, corrupted, zero and malformed.
func chainFrames(t *testing.T) map[string][]byte {
	frames := map[string][]byte{}
	for _, c := range goodCases() {
		p := buildCase(t, c)
		frames[c.name+"/partial"] = p.partialFrame()
		frames[c.name+"/correct"] = p.frame
		q := p.clone()
		q.setField(p.full ^ 0x0101)
		frames[c.name+"/corrupted"] = q.frame
		if p.udp && p.ip4 {
			q.setField(0)
			frames[c.name+"/zero"] = q.frame
		}
	}
	for _, c := range badCases() {
		frames["bad-"+c.name] = c.edit(build(c.spec))
	}
	return frames
}

// TestCompleteChainEverySplit cuts every frame shape in two at every
// point, and the short ones in three at every pair of points: the result
// and the bytes are those of Complete on the frame in one piece, whether
// the cut falls in the headers, in the checksum field, or at an odd
// offset of the payload.
func TestCompleteChainEverySplit(t *testing.T) {
	for name, frame := range chainFrames(t) {
		t.Run(name, func(t *testing.T) {
			rc := newRefChain(frame)
			for i := 0; i <= len(frame); i++ {
				rc.check(t, i)
			}
			if len(frame) > 200 {
				return
			}
			for i := 0; i <= len(frame); i++ {
				for j := 0; i+j <= len(frame); j++ {
					rc.check(t, i, j)
				}
			}
		})
	}
}

// TestCompleteChainMatchesComplete: for every frame shape the result
// equals Complete's on the frame in one piece when the headers lie in the
// first segment, as they do for every AF_XDP chain.
func TestCompleteChainMatchesComplete(t *testing.T) {
	for name, frame := range chainFrames(t) {
		lin := bytes.Clone(frame)
		want := Complete(lin)
		for _, first := range []int{len(frame) / 2, len(frame) - 1, len(frame)} {
			if first < HeaderGather && first < len(frame) {
				first = min(HeaderGather, len(frame))
			}
			segs := split(frame, first)
			if got := CompleteChain(segs); got != want || !bytes.Equal(bytes.Join(segs, nil), lin) {
				t.Errorf("%s split at %d: %v, Complete %v", name, first, got, want)
			}
		}
	}
}

// TestCompleteChainRandomSplits cuts jumbo and odd-sized frames into many
// random segments, empty and one-byte ones included, and into the pieces
// AF_XDP delivers (1792 bytes for 2048-byte frames, 3840 for 4096).
func TestCompleteChainRandomSplits(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var frames [][]byte
	for _, s := range []spec{
		{proto: 6, payload: payload(8948, 40)},
		{proto: 6, payload: payload(8947, 41)},
		{v6: true, proto: 6, payload: payload(8928, 42)},
		{v6: true, proto: 17, exts: []ext{optsHeader(0, 3)}, payload: payload(7001, 43)},
		{tpids: []uint16{0x8100}, proto: 17, payload: payload(4093, 44)},
		{proto: 17, payload: payload(2999, 45), pad: 3},
	} {
		p := build(s)
		frames = append(frames, p.partialFrame(), p.frame)
	}
	iters := 200
	if testing.Short() {
		iters = 20
	}
	for _, frame := range frames {
		for _, chunk := range []int{1792, 3840, 2048, 1801, 1} {
			var lens []int
			for off := chunk; off < len(frame) && len(lens) < 100; off += chunk {
				lens = append(lens, chunk)
			}
			if chunk == 1 {
				lens = nil
				for range 64 {
					lens = append(lens, 1) // one byte at a time through the headers
				}
			}
			checkChain(t, frame, lens...)
		}
		for range iters {
			lens := make([]int, 1+r.IntN(17))
			for k := range lens {
				switch r.IntN(4) {
				case 0:
					lens[k] = r.IntN(3) // empty, one or two bytes
				default:
					lens[k] = r.IntN(2 * len(frame) / len(lens))
				}
			}
			checkChain(t, frame, lens...)
		}
	}
}

// TestCompleteChainHeaderLimit: headers extending past both the first
// segment and HeaderGather bytes are not parsed (NotL4, untouched); the
// same frame with them in its first segment is completed.
func TestCompleteChainHeaderLimit(t *testing.T) {
	p := build(spec{v6: true, proto: 17, exts: []ext{optsHeader(60, 80)}, payload: payload(100, 46)})
	frame := p.partialFrame()
	if p.l4 <= HeaderGather {
		t.Fatalf("headers end at %d, within HeaderGather", p.l4)
	}
	for _, c := range []struct {
		first int
		want  Result
	}{{100, NotL4}, {p.l4, NotL4}, {p.l4 + 7, NotL4}, {p.l4 + 8, Completed}, {len(frame), Completed}} {
		segs := split(frame, c.first)
		got := CompleteChain(segs)
		if got != c.want {
			t.Errorf("first segment %d bytes: %v, want %v", c.first, got, c.want)
		}
		if out := bytes.Join(segs, nil); (got == NotL4) != bytes.Equal(out, frame) {
			t.Errorf("first segment %d bytes: %v, and the frame changed: %v", c.first, got, !bytes.Equal(out, frame))
		}
	}
}

func TestCompleteChainEmpty(t *testing.T) {
	for _, segs := range [][][]byte{nil, {}, {nil}, {nil, nil}, {{1, 2, 3}, nil}} {
		if got := CompleteChain(segs); got != NotL4 {
			t.Errorf("CompleteChain(%v) = %v", segs, got)
		}
	}
}

func TestCompleteChainAllocs(t *testing.T) {
	p := build(spec{proto: 6, payload: payload(8948, 47)})
	partial := p.partialFrame()
	for _, first := range []int{1792, 100} { // headers in the first segment; gathered
		segs := split(partial, first, 1792, 1792, 1792, 1792)
		if n := testing.AllocsPerRun(100, func() {
			segs[0][p.field-0] = byte(p.partial >> 8) // headers in segs[0] in both cases
			segs[0][p.field+1] = byte(p.partial)
			if first < p.field+2 {
				panic("field not in the first segment")
			}
			if CompleteChain(segs) != Completed {
				panic("not completed")
			}
		}); n != 0 {
			t.Errorf("first segment %d bytes: %v allocs per CompleteChain", first, n)
		}
	}
}

// TestSumChainParity checks the odd-offset rule on its own: any cut of a
// buffer into pieces sums, across them, to the sum of the whole.
func TestSumChainParity(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	b := payload(301, 48)
	for i := range 2000 {
		var lens []int
		for range r.IntN(8) {
			lens = append(lens, r.IntN(80))
		}
		segs := split(b, lens...)
		from := r.IntN(len(b))
		to := from + r.IntN(len(b)-from+1)
		init := uint64(0)
		if i%2 == 0 {
			init = r.Uint64()
		}
		want := refFold(refSum(b[from:to]) + uint64(refFold(init)))
		if got := fold(sumChain(segs, from, to, init)); got != want {
			t.Fatalf("cuts %v, bytes %d..%d: %#04x, want %#04x", lens, from, to, got, want)
		}
	}
}

func ExampleCompleteChain() {
	// A jumbo IPv4 TCP frame, partial, as three AF_XDP descriptors.
	p := build(spec{proto: 6, payload: payload(8948, 1)})
	f := p.partialFrame()
	segs := [][]byte{f[:3840], f[3840:7680], f[7680:]}
	fmt.Println(CompleteChain(segs), CompleteChain(segs), bytes.Equal(f, p.frame))
	// Output: completed already-complete true
}
