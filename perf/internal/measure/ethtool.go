// A link's driver statistics and queue counts, as `ethtool -S` and
// `ethtool -l` print them.

package measure

import (
	"bytes"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/ethtool"
)

// EthtoolStats reads a link's driver statistics, what `ethtool -S` prints:
// for a veth, per RX queue, rx_queue_<i>_xdp_packets (frames its XDP
// program saw on queue i), _xdp_redirect (of those, redirected: into an
// AF_XDP socket, for xdpfwd), _xdp_drops, _drops, and more.
func EthtoolStats(ifname string) (map[string]uint64, error) {
	// struct ethtool_sset_info: cmd, reserved, sset_mask, then one u32
	// per set in the mask.
	const ethSSStats = 1 // ETH_SS_STATS
	var info struct {
		cmd, reserved uint32
		mask          uint64
		n             uint32
	}
	info.cmd = unix.ETHTOOL_GSSET_INFO
	info.mask = 1 << ethSSStats
	if err := ethtoolIoctl(ifname, unsafe.Pointer(&info)); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSSET_INFO on %s: %w", ifname, err)
	}
	n := int(info.n)
	if info.mask&(1<<ethSSStats) == 0 || n == 0 {
		return map[string]uint64{}, nil
	}
	// struct ethtool_gstrings: cmd, string_set, len, then len × 32 bytes.
	const strLen = 32
	sbuf := make([]byte, 12+n*strLen)
	*(*uint32)(unsafe.Pointer(&sbuf[0])) = unix.ETHTOOL_GSTRINGS
	*(*uint32)(unsafe.Pointer(&sbuf[4])) = ethSSStats
	*(*uint32)(unsafe.Pointer(&sbuf[8])) = uint32(n)
	if err := ethtoolIoctl(ifname, unsafe.Pointer(&sbuf[0])); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSTRINGS on %s: %w", ifname, err)
	}
	// struct ethtool_stats: cmd, n_stats, then n × u64.
	vbuf := make([]uint64, 1+n)
	*(*uint32)(unsafe.Pointer(&vbuf[0])) = unix.ETHTOOL_GSTATS
	*(*uint32)(unsafe.Add(unsafe.Pointer(&vbuf[0]), 4)) = uint32(n)
	if err := ethtoolIoctl(ifname, unsafe.Pointer(&vbuf[0])); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSTATS on %s: %w", ifname, err)
	}
	if got := int(*(*uint32)(unsafe.Add(unsafe.Pointer(&vbuf[0]), 4))); got < n {
		n = got
	}
	out := make(map[string]uint64, n)
	for i := range n {
		s := sbuf[12+i*strLen : 12+(i+1)*strLen]
		if j := bytes.IndexByte(s, 0); j >= 0 {
			s = s[:j]
		}
		out[string(s)] = vbuf[1+i]
	}
	return out, nil
}

// EthtoolChannels reads a link's RX and TX queue counts in use (`ethtool
// -l`: rx + combined, tx + combined) and their maxima.
func EthtoolChannels(ifname string) (rx, tx, maxRX, maxTX int, err error) {
	c, err := ethtool.GetChannels(ifname)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	return int(c.RX + c.Combined), int(c.TX + c.Combined), int(c.MaxRX + c.MaxCombined), int(c.MaxTX + c.MaxCombined), nil
}

func ethtoolIoctl(ifname string, data unsafe.Pointer) error {
	var ifr struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [24 - unsafe.Sizeof(uintptr(0))]byte
	}
	if len(ifname) == 0 || len(ifname) >= len(ifr.name) {
		return fmt.Errorf("invalid interface name %q", ifname)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	copy(ifr.name[:], ifname)
	ifr.data = data
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&ifr)
	if errno != 0 {
		return errno
	}
	return nil
}
