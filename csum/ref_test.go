package csum

import (
	"bytes"
	"encoding/binary"
)

// This file holds the slow, obvious reference implementations the tests
// compare against: a byte-at-a-time checksum, and a second, independently
// written parser and completion (refComplete) used differentially by the
// fuzz target.

// refSum is the one's-complement sum of b, byte at a time: even offsets
// are the high byte of a big-endian 16-bit word, odd offsets the low byte.
func refSum(b []byte) uint64 {
	var s uint64
	for i, x := range b {
		if i%2 == 0 {
			s += uint64(x) << 8
		} else {
			s += uint64(x)
		}
	}
	return s
}

// refFold folds a sum to 16 bits by repeated end-around carry.
func refFold(s uint64) uint16 {
	for s>>16 != 0 {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// refLoc is what the reference parser finds.
type refLoc struct {
	field  int    // offset in the frame of the checksum field
	l4     []byte // the segment, aliasing the frame
	pseudo []byte // the pseudo-header, spelled out
	udp    bool
	v4     bool
}

// reader is a bounds-checked cursor.
type reader struct {
	b   []byte
	pos int
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || n < 0 || r.pos+n > len(r.b) {
		r.bad = true
		return make([]byte, n&0xffff)
	}
	p := r.b[r.pos : r.pos+n]
	r.pos += n
	return p
}

func (r *reader) u8() int  { return int(r.take(1)[0]) }
func (r *reader) u16() int { p := r.take(2); return int(p[0])<<8 | int(p[1]) }

func refLocate(frame []byte) (refLoc, bool) {
	var loc refLoc
	r := &reader{b: frame}
	r.take(12)
	etype := r.u16()
	for i := 0; i <= 4; i++ {
		if etype != 0x8100 && etype != 0x88a8 && etype != 0x9100 {
			break
		}
		if i == 4 {
			return loc, false
		}
		r.take(2)
		etype = r.u16()
	}
	if r.bad {
		return loc, false
	}
	ipStart := r.pos
	var proto, l4Start, l4End int
	switch etype {
	case 0x0800:
		vihl := r.u8()
		r.take(1)
		total := r.u16()
		r.take(2)
		frag := r.u16()
		r.take(1)
		proto = r.u8()
		r.take(2)
		src, dst := r.take(4), r.take(4)
		if r.bad || vihl>>4 != 4 || (vihl&15) < 5 || frag&0x1fff != 0 || frag&0x2000 != 0 {
			return loc, false
		}
		ihl := (vihl & 15) * 4
		if total < ihl || ipStart+total > len(frame) {
			return loc, false
		}
		l4Start, l4End = ipStart+ihl, ipStart+total
		loc.pseudo = cat(src, dst, []byte{0, byte(proto)})
		loc.v4 = true
	case 0x86dd:
		if r.u8()>>4 != 6 {
			return loc, false
		}
		r.take(3)
		plen := r.u16()
		next := r.u8()
		r.take(1)
		src, dst := r.take(16), r.take(16)
		if r.bad || ipStart+40+plen > len(frame) {
			return loc, false
		}
		end := ipStart + 40 + plen
		e := &reader{b: frame[:end], pos: r.pos}
		for n := 0; next != 6 && next != 17; n++ {
			if n >= 8 || (next != 0 && next != 43 && next != 60) {
				return loc, false
			}
			start := e.pos
			nn := e.u8()
			hel := e.u8()
			rtype := e.u8()
			left := e.u8()
			e.pos = start
			h := e.take(8 + 8*hel)
			if e.bad {
				return loc, false
			}
			if next == 43 && left > 0 {
				switch rtype {
				case 0, 2:
					if hel/2 < 1 {
						return loc, false
					}
					dst = h[8+16*(hel/2-1) : 8+16*(hel/2)]
				case 4:
					if hel < 2 {
						return loc, false
					}
					dst = h[8:24]
				default:
					return loc, false
				}
			}
			next = nn
		}
		proto = next
		l4Start, l4End = e.pos, end
		loc.pseudo = cat(src, dst, []byte{0, 0}) // then length (4 bytes) below; 0,0,0,next
	default:
		return loc, false
	}
	l4 := frame[l4Start:l4End]
	switch proto {
	case 6:
		if len(l4) < 20 || int(l4[12]>>4) < 5 || int(l4[12]>>4)*4 > len(l4) {
			return loc, false
		}
		loc.field = l4Start + 16
	case 17:
		if len(l4) < 8 {
			return loc, false
		}
		ulen := int(binary.BigEndian.Uint16(l4[4:]))
		if ulen < 8 || ulen > len(l4) {
			return loc, false
		}
		l4 = l4[:ulen]
		loc.field = l4Start + 6
		loc.udp = true
	default:
		return loc, false
	}
	loc.l4 = l4
	n := len(l4)
	if loc.v4 {
		loc.pseudo = cat(loc.pseudo, []byte{byte(n >> 8), byte(n)})
	} else {
		loc.pseudo = cat(loc.pseudo, []byte{byte(n >> 8), byte(n), 0, 0, 0, byte(proto)})
	}
	return loc, true
}

// refComplete is Complete done slowly on a copy: it returns the result and
// the frame as Complete should leave it.
func refComplete(in []byte) (Result, []byte) {
	out := bytes.Clone(in)
	loc, ok := refLocate(out)
	if !ok {
		return NotL4, out
	}
	// Re-derive l4 from out (refLocate aliased out).
	field := uint16(out[loc.field])<<8 | uint16(out[loc.field+1])
	if loc.udp && loc.v4 && field == 0 {
		return UDPZero, out
	}
	if field != refFold(refSum(loc.pseudo)) {
		return AlreadyComplete, out
	}
	if refFold(refSum(cat(loc.pseudo, loc.l4))) == 0xffff {
		return AlreadyComplete, out
	}
	out[loc.field], out[loc.field+1] = 0, 0
	c := ^refFold(refSum(cat(loc.pseudo, loc.l4)))
	if loc.udp && c == 0 {
		c = 0xffff
	}
	out[loc.field], out[loc.field+1] = byte(c>>8), byte(c)
	return Completed, out
}
