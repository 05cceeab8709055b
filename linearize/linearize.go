// Package linearize decides, per packet, which TX layout needs the fewest
// descriptors and pages, and does the copies that layout needs. Everything
// here is a pure, allocation-free function over descriptor lists and byte
// slices: no rings, no kernel, no state, so it is unit-tested and fuzzed on
// its own.
//
// The rules come from three netdev threads. A packet small enough to fit
// an inline slot is copied whole into one (one descriptor, one premapped
// page, the receive buffer freed at once), as Eric Dumazet proposes in
// "[RFC net] tcp: Fix performance regression for request-response
// workloads" (2022). A multi-buffer packet that arrived as more descriptors
// than a device should be asked to gather is repacked into adjacent chunks
// of a frag block (the fewest descriptors its length allows), as TCP's
// order-3 pages gave "two frags of 32KB, instead of 16 frags of 4KB"
// ("Re: [RFC] tcp: use order-3 pages in tcp_sendmsg()", 2012) and
// order-4 page frags would put a TSO payload in one page ("Re: [PATCH RFC
// 0/7] add socket to netdev page frag recycling support", 2021). Anything
// else leaves as it arrived, without a copy.
//
// # Concurrency
//
// Every function may be called from any goroutine. The caller owns the
// bytes it passes: held frames and slots it allocated, never a unit on the
// kernel's side of a ring.
package linearize

import (
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Path is the TX layout chosen for a packet.
type Path uint8

const (
	// Frame: a single-buffer packet leaves from the RX frame it arrived in.
	Frame Path = iota
	// Inline: the packet is copied whole into one inline slot.
	Inline
	// Frag: the packet is copied into a frag block as adjacent chunks.
	Frag
	// Chain: a multi-buffer packet leaves as the descriptors it arrived as.
	Chain
	NumPaths
)

var pathNames = [NumPaths]string{"frame", "inline", "frag", "chain"}

func (p Path) String() string {
	if p < NumPaths {
		return pathNames[p]
	}
	return "invalid"
}

// MaxDescs is the most descriptors one packet may use, in or out: the
// kernel's MAX_SKB_FRAGS (17) plus the head, the portable limit.
const MaxDescs = 18

// Policy holds the limits the decision depends on.
type Policy struct {
	InlineMax  int  // largest packet copied into an inline slot; 0 disables
	MaxTxFrags int  // most descriptors a packet may leave as before it is repacked
	ChunkSize  int  // most bytes one TX descriptor may carry (the UMEM chunk size)
	FragBlocks bool // a frag zone exists to repack into
}

// Decide returns the path for a packet of total bytes that arrived as n
// descriptors (n ≥ 1).
func (p Policy) Decide(total, n int) Path {
	switch {
	case p.InlineMax > 0 && total <= p.InlineMax:
		return Inline
	case n <= 1:
		return Frame
	case n > p.MaxTxFrags && p.FragBlocks && Count(total, p.ChunkSize) < n:
		return Frag
	}
	return Chain
}

// Count is the fewest descriptors of at most chunk bytes that carry total
// bytes.
func Count(total, chunk int) int {
	if total <= 0 || chunk <= 0 {
		return 1
	}
	return (total + chunk - 1) / chunk
}

// Total sums the lengths of descs.
func Total(descs []xsk.Desc) int {
	n := 0
	for _, d := range descs {
		n += int(d.Len)
	}
	return n
}

// Gather copies the data of descs, in order, from mem into dst and returns
// the number of bytes copied. Descriptor addresses are offsets into mem
// (already flattened with xsk.Flat). It stops, short, at the first
// descriptor that falls outside mem or when dst is full, so a bad
// descriptor can never make it read or write out of bounds; the caller
// compares the result with Total.
func Gather(dst, mem []byte, descs []xsk.Desc) int {
	n := 0
	for _, d := range descs {
		end := d.Addr + uint64(d.Len)
		if end > uint64(len(mem)) || end < d.Addr {
			return n
		}
		c := copy(dst[n:], mem[d.Addr:end])
		n += c
		if c < int(d.Len) {
			return n
		}
	}
	return n
}

// Cut describes total bytes at region offset addr as adjacent descriptors
// of at most chunk bytes each, written to out, with XDP_PKT_CONTD on all but
// the last. It returns how many it wrote, or 0 if out is too short.
func Cut(out []xsk.Desc, addr uint64, total, chunk int) int {
	n := Count(total, chunk)
	if n > len(out) {
		return 0
	}
	for i := range n {
		l := min(chunk, total-i*chunk)
		out[i] = xsk.Desc{Addr: addr + uint64(i*chunk), Len: uint32(max(l, 0)), Options: xsk.PktContd}
	}
	out[n-1].Options = 0
	return n
}
