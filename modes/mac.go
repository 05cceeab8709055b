package modes

import (
	"fmt"
	"net"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// MAC is testpmd's mac engine: every frame leaves with its destination MAC
// set to the configured peer's and its source MAC to that of the link it
// leaves by, everything else unchanged. Like testpmd's default (paired)
// port topology, links pair up in order, 0 with 1, 2 with 3, ...: a frame
// leaves by its link's partner, and a link without one (the only link, or
// the last of an odd number) sends it back out of the link and queue it
// came in on.
//
// Set the links' own addresses (SetLinkAddrs) before the forwarder runs:
// the handler reads them unlocked. It receives frames for other MACs, like
// Reflect: promiscuous under --promisc auto.
type MAC struct {
	links int
	src   [fwd.MaxLinks][6]byte // each link's own address
	peer  [fwd.MaxLinks][6]byte // the peer's address, by the link a frame leaves by
}

// NewMAC returns a mac handler over links links whose frames go to peers:
// one address for every link, or one per link.
func NewMAC(links int, peers []net.HardwareAddr) (*MAC, error) {
	if links < 1 || links > fwd.MaxLinks {
		return nil, fmt.Errorf("mac mode: %d links: want 1..%d", links, fwd.MaxLinks)
	}
	if len(peers) != 1 && len(peers) != links {
		return nil, fmt.Errorf("mac mode: %d peer addresses for %d links: want one, or one per link", len(peers), links)
	}
	m := &MAC{links: links}
	for i := range links {
		p := peers[min(i, len(peers)-1)]
		if len(p) != 6 {
			return nil, fmt.Errorf("mac mode: peer address %v: want a 6-byte Ethernet address", p)
		}
		copy(m.peer[i][:], p)
	}
	return m, nil
}

// SetLinkAddrs sets each link's own address, the source of the frames it
// sends: before the forwarder runs, not while it does.
func (m *MAC) SetLinkAddrs(addrs []net.HardwareAddr) error {
	if len(addrs) != m.links {
		return fmt.Errorf("mac mode: %d link addresses for %d links", len(addrs), m.links)
	}
	for i, a := range addrs {
		if len(a) != 6 {
			return fmt.Errorf("mac mode: link %d address %v: want a 6-byte Ethernet address", i, a)
		}
		copy(m.src[i][:], a)
	}
	return nil
}

// Out is the link a frame arriving on link in leaves by.
func (m *MAC) Out(in int) int {
	if o := in ^ 1; o < m.links {
		return o
	}
	return in
}

// Handle implements fwd.Handler.
func (m *MAC) Handle(pkts []fwd.Packet) {
	for i := range pkts {
		p := &pkts[i]
		if len(p.Data) < ethHeaderLen {
			p.Drop()
			continue
		}
		out := m.Out(p.Link)
		copy(p.Data[0:6], m.peer[out][:])
		copy(p.Data[6:12], m.src[out][:])
		if out == p.Link {
			p.Reflect()
		} else {
			p.Forward(out)
		}
	}
}
