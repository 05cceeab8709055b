// A link's driver statistics and queue counts, as `ethtool -S` and
// `ethtool -l` print them.

package measure

import (
	"github.com/xdpfwd/xdpfwd/internal/ethtool"
)

// EthtoolStats reads a link's driver statistics, what `ethtool -S` prints
// (ethtool.Stats): for a veth, per RX queue, rx_queue_<i>_xdp_packets
// (frames its XDP program saw on queue i), _xdp_redirect (of those,
// redirected: into an AF_XDP socket, for xdpfwd), _xdp_drops, _drops, and
// more.
func EthtoolStats(ifname string) (map[string]uint64, error) { return ethtool.Stats(ifname) }

// EthtoolChannels reads a link's RX and TX queue counts in use (`ethtool
// -l`: rx + combined, tx + combined) and their maxima.
func EthtoolChannels(ifname string) (rx, tx, maxRX, maxTX int, err error) {
	c, err := ethtool.GetChannels(ifname)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return int(c.RX + c.Combined), int(c.TX + c.Combined), int(c.MaxRX + c.MaxCombined), int(c.MaxTX + c.MaxCombined), nil
}
