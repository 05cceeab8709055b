package fwd

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// UMEM domains. The kernel binds every socket sharing a zero-copy UMEM in
// zero-copy mode too (xp_assign_dev_shared), which a veth cannot take. So
// a forwarder with links that bind in zero-copy (NICs) and links that
// cannot (veths, drivers without it, and every link added while
// running) holds two UMEMs, its domains: zero-copy links share one, the
// rest the other. Within a domain a frame is handed over as ever; across
// domains the layout copies it (layOutAcross: whole into an inline slot
// when small, into frag blocks or frames when not), and the frame it came
// in goes back to its fill ring at once, while hot. A NIC thereby keeps
// the premapped UMEM's benefit (no IOMMU map per packet) when pods
// attach.
//
// The domains' regions lie back to back in one mapping (umem.NewSpace):
// an address names a byte of either, so what reads packets (the Handler,
// checksums, capture, the flow key) reads w.rx.mem and needs no word of the
// domain; only the rings translate (package xsk), and only the layout
// and the frees ask which domain an address is in (workerDomains.of).

// Domain is one UMEM of a Plan: the links given that bind in it, how its
// sockets bind, and its layout.
type Domain struct {
	// Name is "zerocopy" or "copy" with two domains, "" with one.
	Name string
	// ZeroCopy is the bind mode its sockets ask for.
	ZeroCopy xsk.ZeroCopy
	// Links are the links given that bind in it.
	Links []string
	// Added: the links added while running join it.
	Added bool
	UMEM  umem.Config
}

// Domain names.
const (
	DomainZeroCopy = "zerocopy"
	DomainCopy     = "copy"
)

// planDomains sorts the links given into domains and sizes each one's
// UMEM. There are two when zero-copy may be had (auto, or on with every
// link given able to) and some link reports it (the kernel's
// xdp-features), and some link cannot have it or links may be added
// while running: the first holds the zero-copy links alone, the second
// the others and the memory set aside for links to come. Otherwise there
// is one, as before domains (a link whose support is unknown tries
// zero-copy with the others; with on, a link that cannot fails its bind).
func (p *Plan) planDomains(links []linkInfo) {
	var zc, cp []linkInfo
	for _, l := range links {
		if l.zc.Known && l.zc.ZeroCopy && !l.veth {
			zc = append(zc, l)
		} else {
			cp = append(cp, l)
		}
	}
	added := p.Handler != nil && p.MaxLinks > len(links)
	// ZeroCopyOn asks every link given to bind in zero-copy mode: one
	// that cannot fails its bind, as before domains.
	on := p.ZeroCopy == xsk.ZeroCopyOn && len(cp) > 0
	if p.ZeroCopy == xsk.ZeroCopyOff || on || len(zc) == 0 || len(cp) == 0 && !added {
		p.UMEM = umemConfig(p, links)
		p.UMEMReserved = umemReserved(p, links)
		p.Domains = []Domain{{ZeroCopy: p.ZeroCopy, Links: linkNames(links), Added: true, UMEM: p.UMEM}}
		return
	}
	zq := *p
	zq.MaxLinks = len(zc)
	cq := *p
	cq.MaxLinks = p.MaxLinks - len(zc)
	cq.ZeroCopy = xsk.ZeroCopyOff
	cq.UMEM = umemConfig(&cq, cp)
	p.UMEM = cq.UMEM
	p.UMEMReserved = umemReserved(&cq, cp)
	p.Domains = []Domain{
		{Name: DomainZeroCopy, ZeroCopy: p.ZeroCopy, Links: linkNames(zc), UMEM: umemConfig(&zq, zc)},
		{Name: DomainCopy, ZeroCopy: xsk.ZeroCopyOff, Links: linkNames(cp), Added: true, UMEM: p.UMEM},
	}
	p.decide(slog.LevelInfo, "two UMEM domains", "zero-copy links "+joinNames(zc)+" share one UMEM; "+
		"the links that cannot bind in zero-copy ("+joinNames(cp)+", and those added while running) another, a frame crossing between them copied")
}

func linkNames(links []linkInfo) []string {
	out := make([]string, len(links))
	for i, l := range links {
		out[i] = l.name
	}
	return out
}

func joinNames(links []linkInfo) string {
	if len(links) == 0 {
		return "none given"
	}
	return strings.Join(linkNames(links), ", ")
}

// domainOf is the domain link name binds in: the one that lists it, or
// else the one links added while running join.
func (p *Plan) domainOf(name string) int {
	for i, d := range p.Domains {
		if slices.Contains(d.Links, name) {
			return i
		}
	}
	return p.addedDomain()
}

// addedDomain is the domain links added while running join.
func (p *Plan) addedDomain() int { return len(p.Domains) - 1 }

// domain is one UMEM of a running forwarder.
type domain struct {
	Domain
	region *umem.Region
	// zeroCopy: its sockets are bound in zero-copy mode (the first that
	// bound decides: the others inherit its mode). Written by New.
	zeroCopy bool
	// leaked and stranded are Close's accounting of its UMEM.
	leaked, stranded int
}

// String names the domain for logs and errors.
func (d *domain) String() string {
	return fmt.Sprintf("%s (%s bind, %d MiB)", cmp.Or(d.Name, "umem"), d.bindMode(), d.region.Size()>>20)
}

// bindMode is how the domain's sockets are bound: "zerocopy" or "copy".
func (d *domain) bindMode() string {
	if d.zeroCopy {
		return "zerocopy"
	}
	return "copy"
}

// workerDomain is a worker's part of one domain: its frame cache and the
// builder of its inline slots and frag blocks. The worker's alone.
type workerDomain struct {
	region *umem.Region
	frames *umem.Cache
	build  *inline.Builder
}

// workerDomains are a worker's parts of every domain, by domain index.
type workerDomains struct {
	dom []workerDomain
}

// of is the part of the domain addr lies in (the last if none: the frees
// that follow check the address against its zones).
func (d *workerDomains) of(addr uint64) *workerDomain {
	for i := range len(d.dom) - 1 {
		if d.dom[i].region.Contains(addr) {
			return &d.dom[i]
		}
	}
	return &d.dom[len(d.dom)-1]
}

// newWorkerDomains makes a worker's parts of f's domains. Packets copied
// into frag blocks start on a chunk in a zero-copy domain, where a
// descriptor may not cross into a page the device does not see as
// contiguous, on a cache line in a copy-mode one (inline.NewBuilder).
func (f *Forwarder) newWorkerDomains() workerDomains {
	var d workerDomains
	for _, dm := range f.doms {
		align := 64
		if dm.zeroCopy {
			align = umem.ChunkMax
		}
		d.dom = append(d.dom, workerDomain{
			region: dm.region,
			frames: dm.region.Frames.NewCache(frameCacheSize),
			build:  inline.NewBuilder(dm.region, f.policy, 1024, align),
		})
	}
	return d
}

// publish makes every cache's level visible to occupancy readers.
func (d *workerDomains) publish() {
	for i := range d.dom {
		d.dom[i].frames.Publish()
		d.dom[i].build.Publish()
	}
}
