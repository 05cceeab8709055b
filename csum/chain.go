package csum

import (
	"encoding/binary"
	"math/bits"
)

// HeaderGather is how many leading bytes of a chain CompleteChain copies
// to parse when its first segment is shorter: headers up to the checksum
// field must lie within the first segment or within this many bytes.
const HeaderGather = 512

// CompleteChain is Complete for a frame held in pieces: segs are its bytes
// in order (a multi-buffer packet's descriptors, say), of any lengths,
// even or odd, empty ones included. The checksum covers the segment across
// all of them, and the 16-bit sum's byte alignment carries across their
// boundaries. The headers are read from the first segment, or, when that
// is shorter than HeaderGather bytes (and than the frame), from a copy of
// the frame's first HeaderGather bytes; a frame whose headers extend
// beyond both is NotL4. It writes at most the two bytes of the checksum
// field, which may straddle two segments, and only when it returns
// Completed. It does not allocate.
func CompleteChain(segs [][]byte) Result {
	if len(segs) == 1 {
		return Complete(segs[0])
	}
	total := 0
	for _, s := range segs {
		total += len(s)
	}
	if len(segs) == 0 || len(segs[0]) >= min(total, HeaderGather) {
		var hdr []byte
		if len(segs) > 0 {
			hdr = segs[0]
		}
		return completeChain(segs, hdr, total)
	}
	return completeGathered(segs, total)
}

// completeGathered copies the first bytes of the chain to parse them: the
// first segment alone is too short to hold every header.
func completeGathered(segs [][]byte, total int) Result {
	var buf [HeaderGather]byte
	n := 0
	for _, s := range segs {
		n += copy(buf[n:], s)
		if n == len(buf) {
			break
		}
	}
	return completeChain(segs, buf[:n], total)
}

// completeChain completes the frame in segs, total bytes long, whose first
// bytes are hdr (the first segment itself, or a copy).
func completeChain(segs [][]byte, hdr []byte, total int) Result {
	var loc where
	if !locate(&loc, hdr, total) {
		return NotL4
	}
	field := binary.BigEndian.Uint16(hdr[loc.field:])
	if r, partial := loc.classify(field); !partial {
		return r
	}
	c, ok := loc.finish(sumChain(segs, loc.l4, loc.l4+loc.l4Len, loc.pseudo), field)
	if !ok {
		return AlreadyComplete
	}
	put16Chain(segs, loc.field, c)
	return Completed
}

// sumChain adds to initial the bytes from frame offset from to to, held in
// segs, as big-endian 16-bit words counted from from. A piece that starts
// an odd number of bytes after from is summed as if even and its folded
// sum byte-swapped: the one's-complement sum is byte-order independent
// (RFC 1071, 2(B)), so swapping every word's bytes swaps the sum's.
func sumChain(segs [][]byte, from, to int, initial uint64) uint64 {
	s := initial
	base := 0 // frame offset of the current segment
	for _, seg := range segs {
		if base >= to {
			break
		}
		lo, hi := max(from-base, 0), min(to-base, len(seg))
		if lo < hi {
			p := sum(seg[lo:hi], 0)
			if (base+lo-from)&1 != 0 {
				p = uint64(bits.ReverseBytes16(fold(p)))
			}
			s = add(s, p)
		}
		base += len(seg)
	}
	return s
}

// put16Chain writes v, big-endian, at frame offset off of the frame held
// in segs; the two bytes may lie in two segments.
func put16Chain(segs [][]byte, off int, v uint16) {
	b := [2]byte{byte(v >> 8), byte(v)}
	k := 0
	for _, seg := range segs {
		for ; off < len(seg) && k < len(b); off, k = off+1, k+1 {
			seg[off] = b[k]
		}
		if k == len(b) {
			return
		}
		off -= len(seg)
	}
}
