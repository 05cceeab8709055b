package xps

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"
	"time"
)

// hashSeed is drawn once per process, so remote peers cannot predict which
// table bucket (or, in ModeHash, which queue) a flow lands in.
var hashSeed = newSeed()

func newSeed() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return uint64(time.Now().UnixNano()) | 1
	}
	return binary.LittleEndian.Uint64(b[:])
}

const (
	p0 = 0xa0761d6478bd642f
	p1 = 0xe7037ed1a0b428db
	p2 = 0x8ebc6af09c88c6e3
	p3 = 0x589965cc75374cc3
	p4 = 0x1d8e4e27c47d124f
)

// mum is wyhash's mixing step: the two halves of the 128-bit product, xored.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// Hash returns a well-mixed 64-bit hash of k (all 64 bits usable: the table
// indexes buckets with the top bits, ModeHash takes Hash % nqueues). It is
// seeded once per process, stable within it, allocation-free, and equal for
// equal keys — so for both directions of a connection when the keys were
// parsed with symmetric set.
func (k Key) Hash() uint64 {
	a := binary.LittleEndian.Uint64(k.Src[0:8])
	b := binary.LittleEndian.Uint64(k.Src[8:16])
	c := binary.LittleEndian.Uint64(k.Dst[0:8])
	d := binary.LittleEndian.Uint64(k.Dst[8:16])
	e := uint64(k.SrcPort) | uint64(k.DstPort)<<16 | uint64(k.EtherType)<<32 |
		uint64(k.Proto)<<48 | uint64(k.Kind)<<56
	s := hashSeed
	x := mum(a^s^p0, b^s^p1)
	y := mum(c^s^p2, d^s^p3)
	z := mum(e^p4^x, y^s^p0)
	// Final avalanche (murmur3 fmix64) so that every output bit depends on
	// every input bit.
	z ^= z >> 33
	z *= 0xff51afd7ed558ccd
	z ^= z >> 33
	z *= 0xc4ceb9fe1a85ec53
	z ^= z >> 33
	return z
}
