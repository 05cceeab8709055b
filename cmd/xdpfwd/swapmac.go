// --mode 5tswap and --mode mac: their flags and handlers.

package main

import (
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"

	"github.com/xdpfwd/xdpfwd/modes"
)

// swapMACFlags are the settings and handlers of --mode 5tswap and
// --mode mac.
type swapMACFlags struct {
	ethPeer listFlag
	// swap and mac are the mode's handler, once config built it.
	swap *modes.FiveTupleSwap
	mac  *modes.MAC
}

// swapHandler builds --mode 5tswap's handler.
func (sf *swapMACFlags) swapHandler() *modes.FiveTupleSwap {
	sf.swap = modes.NewFiveTupleSwap()
	return sf.swap
}

// macHandler builds --mode mac's handler from --eth-peer: a bare MAC is
// the peer of every link without a LINK=MAC of its own, and every link
// needs one or the other.
func (sf *swapMACFlags) macHandler(links []string) (*modes.MAC, error) {
	if len(sf.ethPeer) == 0 {
		return nil, fmt.Errorf("--mode mac needs --eth-peer MAC: the address its frames are sent to")
	}
	var all net.HardwareAddr
	per := make([]net.HardwareAddr, len(links))
	for _, v := range sf.ethPeer {
		name, addr, one := strings.Cut(v, "=")
		if !one {
			addr = v
		}
		mac, err := net.ParseMAC(addr)
		if err != nil || len(mac) != 6 {
			return nil, fmt.Errorf("--eth-peer %q: %q is not an Ethernet address (want XX:XX:XX:XX:XX:XX, or LINK=XX:XX:XX:XX:XX:XX)", v, addr)
		}
		if !one {
			if all != nil {
				return nil, fmt.Errorf("--eth-peer %q: a second address for every link (first %v); give one, or LINK=MAC per link", v, all)
			}
			all = mac
			continue
		}
		i := slices.Index(links, name)
		switch {
		case i < 0:
			return nil, fmt.Errorf("--eth-peer %q: %q is not one of the links %v", v, name, links)
		case per[i] != nil:
			return nil, fmt.Errorf("--eth-peer %q: a second address for link %s (first %v)", v, name, per[i])
		}
		per[i] = mac
	}
	for i := range per {
		if per[i] == nil {
			if all == nil {
				return nil, fmt.Errorf("--eth-peer: no address for link %s: give LINK=MAC for it, or a bare MAC for every link", links[i])
			}
			per[i] = all
		}
	}
	m, err := modes.NewMAC(len(links), per)
	if err != nil {
		return nil, err
	}
	sf.mac = m
	return m, nil
}

// setLinkAddrs gives --mode mac's handler the links' own addresses, the
// sources of what it sends: read once the forwarder holds the links, so a
// link that came back (--wait-for-links) is read anew.
func (sf *swapMACFlags) setLinkAddrs(links []string) error {
	if sf.mac == nil {
		return nil
	}
	addrs := make([]net.HardwareAddr, len(links))
	for i, name := range links {
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			return fmt.Errorf("mac mode: link %s: %w", name, err)
		}
		if len(ifi.HardwareAddr) != 6 {
			return usageError{fmt.Sprintf("--mode mac: link %s has no Ethernet address (%q)", name, ifi.HardwareAddr)}
		}
		addrs[i] = ifi.HardwareAddr
	}
	return sf.mac.SetLinkAddrs(addrs)
}

// logSwapStats logs what 5tswap swapped (xdpfwd_5tswap_frames_total).
func (sf *swapMACFlags) logSwapStats(logger *slog.Logger) {
	if sf.swap == nil {
		return
	}
	s := sf.swap.Stats()
	logger.Info("5tswap", "l2", s.L2, "l3", s.L3, "l4", s.L4, "truncated", s.Truncated, "malformed", s.Malformed, "dropped", s.Dropped)
}
