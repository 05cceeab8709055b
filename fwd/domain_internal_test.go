package fwd

import (
	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
)

// oneDomain is a worker's part of one domain over r, as a forwarder with
// one UMEM gives it, for tests that build workers by hand.
func oneDomain(r *umem.Region, policy linearize.Policy, cache int) workerDomains {
	return workerDomains{dom: []workerDomain{{region: r, frames: r.Frames.NewCache(cache), build: inline.NewBuilder(r, policy, cache, 64)}}}
}
