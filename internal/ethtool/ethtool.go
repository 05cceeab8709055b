// Package ethtool makes the few SIOCETHTOOL ioctls xdpfwd and its test
// topologies need, without shelling out to ethtool(8).
//
// Every function resolves the interface name in the network namespace of the
// calling OS thread. To reach a link in another namespace, call it on a
// thread switched into that namespace and locked there (topo.NS.Do does
// both).
//
// Only the legacy ioctl commands are used. The kernel implements them
// generically on top of netdev features, so they work for every driver, veth
// included, without the ethtool netlink family.
package ethtool

import (
	"bytes"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ETH_FLAG_* bits of ETHTOOL_GFLAGS/SFLAGS (linux/ethtool.h).
const (
	flagTxVLAN = 1 << 7 // tx-vlan-hw-insert (NETIF_F_HW_VLAN_CTAG_TX)
	flagRxVLAN = 1 << 8 // rx-vlan-hw-parse (NETIF_F_HW_VLAN_CTAG_RX)
	flagsVLAN  = flagTxVLAN | flagRxVLAN
)

// ifreq is struct ifreq with the ifr_data member of its union.
type ifreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte // the union is 24 bytes
}

// ioctl runs one SIOCETHTOOL command on ifname; data points at the
// command's struct, whose first field is the command number. The error is
// the bare errno (or a name/socket problem), for callers to wrap.
func ioctl(ifname string, data unsafe.Pointer) error {
	var ifr ifreq
	if len(ifname) == 0 || len(ifname) >= len(ifr.name) {
		return fmt.Errorf("invalid interface name %q (1..%d bytes)", ifname, len(ifr.name)-1)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
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

// value is struct ethtool_value.
type value struct{ cmd, data uint32 }

func get(ifname string, cmd uint32) (uint32, error) {
	v := value{cmd: cmd}
	if err := ioctl(ifname, unsafe.Pointer(&v)); err != nil {
		return 0, err
	}
	return v.data, nil
}

func set(ifname string, cmd, data uint32) error {
	v := value{cmd: cmd, data: data}
	return ioctl(ifname, unsafe.Pointer(&v))
}

// TxChecksum reports whether TX checksum offload is on.
func TxChecksum(ifname string) (bool, error) {
	got, err := get(ifname, unix.ETHTOOL_GTXCSUM)
	if err != nil {
		return false, fmt.Errorf("read tx checksum offload on %s (ETHTOOL_GTXCSUM): %w", ifname, err)
	}
	return got != 0, nil
}

// SetTxChecksum turns TX checksum offload on or off and reads it back, since
// the kernel may silently keep a feature it cannot change.
//
// Off also turns off what depends on it (TSO, GSO of partial checksums), so
// every segment leaves with its checksum complete. That is required when an
// XDP/AF_XDP datapath carries the packets: a veth with TX checksum offload
// hands its peer TCP/UDP segments whose checksum is only partial
// (CHECKSUM_PARTIAL), trusting the receiver to be the kernel, while a
// forwarder copies the frame bytes verbatim and nothing completes the
// checksum, so the far side drops the segment.
func SetTxChecksum(ifname string, on bool) error {
	var data uint32
	if on {
		data = 1
	}
	if err := set(ifname, unix.ETHTOOL_STXCSUM, data); err != nil {
		return fmt.Errorf("set tx checksum offload on %s to %v (ETHTOOL_STXCSUM): %w", ifname, on, err)
	}
	got, err := TxChecksum(ifname)
	if err != nil {
		return err
	}
	if got != on {
		return fmt.Errorf("tx checksum offload on %s is still %v", ifname, got)
	}
	return nil
}

// VLANOffload reports whether TX VLAN tag insertion (tx-vlan-hw-insert) and
// RX VLAN tag stripping (rx-vlan-hw-parse) are on.
func VLANOffload(ifname string) (tx, rx bool, err error) {
	flags, err := get(ifname, unix.ETHTOOL_GFLAGS)
	if err != nil {
		return false, false, fmt.Errorf("read offload flags of %s (ETHTOOL_GFLAGS): %w", ifname, err)
	}
	return flags&flagTxVLAN != 0, flags&flagRxVLAN != 0, nil
}

// SetVLANOffload turns TX VLAN tag insertion and RX VLAN tag stripping both
// on or both off, leaving the other offload flags as they are, and reads
// them back. It does nothing if they are already as asked.
//
// With TX VLAN offload the tag of a frame sent on a VLAN sub-interface
// travels in skb metadata, not in the frame, so an XDP program on the peer
// never sees it; turn it off on links whose frames an XDP datapath carries.
//
// The legacy ETHTOOL_SFLAGS path is implemented by the ethtool core for
// every device; if it refuses, the feature is fixed for this device and
// ETHTOOL_SFEATURES would be refused for the same reason, so the error is
// reported instead of trying that.
func SetVLANOffload(ifname string, on bool) error {
	flags, err := get(ifname, unix.ETHTOOL_GFLAGS)
	if err != nil {
		return fmt.Errorf("read offload flags of %s (ETHTOOL_GFLAGS): %w", ifname, err)
	}
	want, state, other, hint := flags&^flagsVLAN, "off", "on", "; VLAN tags would stay out of the frame data XDP sees"
	if on {
		want, state, other, hint = flags|flagsVLAN, "on", "off", ""
	}
	if flags == want {
		return nil
	}
	if err := set(ifname, unix.ETHTOOL_SFLAGS, want); err != nil {
		return fmt.Errorf("turn %s VLAN offload on %s (ETHTOOL_SFLAGS %#x): %w%s", state, ifname, want, err, hint)
	}
	flags, err = get(ifname, unix.ETHTOOL_GFLAGS)
	if err != nil {
		return fmt.Errorf("read offload flags of %s (ETHTOOL_GFLAGS): %w", ifname, err)
	}
	if flags&flagsVLAN != want&flagsVLAN {
		return fmt.Errorf("VLAN offload on %s still %s (flags %#x)", ifname, other, flags)
	}
	return nil
}

// Channels are a link's queue counts as ethtool -l reports them.
type Channels struct {
	MaxRX, MaxTX, MaxOther, MaxCombined uint32
	RX, TX, Other, Combined             uint32
}

// GetChannels reads the link's current and maximum queue counts.
func GetChannels(ifname string) (Channels, error) {
	return getParams[Channels](ifname, unix.ETHTOOL_GCHANNELS, "channels", "ETHTOOL_GCHANNELS")
}

// Rings are a link's descriptor ring sizes per queue as ethtool -g
// reports them.
type Rings struct {
	MaxRX, MaxRXMini, MaxRXJumbo, MaxTX uint32
	RX, RXMini, RXJumbo, TX             uint32
}

// GetRings reads the link's current and maximum ring sizes. A driver in
// AF_XDP zero-copy mode keeps up to RX of a socket's frames posted on
// each RX queue's hardware ring.
func GetRings(ifname string) (Rings, error) {
	return getParams[Rings](ifname, unix.ETHTOOL_GRINGPARAM, "ring sizes", "ETHTOOL_GRINGPARAM")
}

// getParams reads what an ethtool get command returns in a struct of the
// command followed by T's u32 fields, in order (struct ethtool_channels,
// struct ethtool_ringparam); what and cmdName name them in an error.
func getParams[T any](ifname string, cmd uint32, what, cmdName string) (T, error) {
	var p struct {
		cmd uint32
		v   T
	}
	p.cmd = cmd
	if err := ioctl(ifname, unsafe.Pointer(&p)); err != nil {
		return p.v, fmt.Errorf("read %s of %s (%s): %w", what, ifname, cmdName, err)
	}
	return p.v, nil
}

// SetChannels sets the link's RX and TX queue counts (ethtool -L rx N tx
// N), keeping the other counts.
func SetChannels(ifname string, rx, tx uint32) error {
	var c struct {
		cmd uint32
		Channels
	}
	c.cmd = unix.ETHTOOL_GCHANNELS
	if err := ioctl(ifname, unsafe.Pointer(&c)); err != nil {
		return fmt.Errorf("read channels of %s (ETHTOOL_GCHANNELS): %w", ifname, err)
	}
	c.cmd = unix.ETHTOOL_SCHANNELS
	c.RX, c.TX = rx, tx
	if err := ioctl(ifname, unsafe.Pointer(&c)); err != nil {
		return fmt.Errorf("set channels of %s to rx %d tx %d (ETHTOOL_SCHANNELS): %w", ifname, rx, tx, err)
	}
	return nil
}

// Driver returns the name of the link's driver (ethtool -i: "igb",
// "virtio_net", "veth"), which decides how its zero-copy receive buffers
// are sized.
func Driver(ifname string) (string, error) {
	info := unix.EthtoolDrvinfo{Cmd: unix.ETHTOOL_GDRVINFO}
	if err := ioctl(ifname, unsafe.Pointer(&info)); err != nil {
		return "", fmt.Errorf("read driver of %s (ETHTOOL_GDRVINFO): %w", ifname, err)
	}
	return unix.ByteSliceToString(info.Driver[:]), nil
}

// Stats reads a link's driver statistics, what `ethtool -S` prints: for
// a veth, per RX queue, rx_queue_<i>_xdp_packets (frames its XDP
// program saw on queue i), _xdp_redirect (of those, redirected: into an
// AF_XDP socket, for xdpfwd), _xdp_drops, _drops, and more.
func Stats(ifname string) (map[string]uint64, error) {
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
	if err := ioctl(ifname, unsafe.Pointer(&info)); err != nil {
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
	if err := ioctl(ifname, unsafe.Pointer(&sbuf[0])); err != nil {
		return nil, fmt.Errorf("ETHTOOL_GSTRINGS on %s: %w", ifname, err)
	}
	// struct ethtool_stats: cmd, n_stats, then n × u64.
	vbuf := make([]uint64, 1+n)
	*(*uint32)(unsafe.Pointer(&vbuf[0])) = unix.ETHTOOL_GSTATS
	*(*uint32)(unsafe.Add(unsafe.Pointer(&vbuf[0]), 4)) = uint32(n)
	if err := ioctl(ifname, unsafe.Pointer(&vbuf[0])); err != nil {
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
