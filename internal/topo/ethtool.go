package topo

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Legacy ethtool ioctl commands (linux/ethtool.h). The kernel implements them
// generically on top of netdev features, so they work for every driver,
// veth included, without the ethtool netlink family.
const (
	ethtoolGTXCSUM = 0x16 // get TX checksum offload
	ethtoolSTXCSUM = 0x17 // set TX checksum offload
	ethtoolGFLAGS  = 0x25 // get ETH_FLAG_* flags
	ethtoolSFLAGS  = 0x26 // set ETH_FLAG_* flags

	ethFlagTXVLAN = 1 << 7 // tx-vlan-hw-insert
	ethFlagRXVLAN = 1 << 8 // rx-vlan-hw-parse
)

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with the ifr_data member of the union.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// ethtool issues one SIOCETHTOOL request for ifname on socket fd; the name is
// resolved in the namespace the socket was created in.
func ethtool(fd int, ifname string, v *ethtoolValue) error {
	var ifr ifreqData
	if len(ifname) >= len(ifr.name) {
		return fmt.Errorf("interface name %q too long", ifname)
	}
	copy(ifr.name[:], ifname)
	ifr.data = unsafe.Pointer(v)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return errno
	}
	return nil
}

func ethtoolGet(fd int, ifname string, cmd uint32) (uint32, error) {
	v := ethtoolValue{cmd: cmd}
	if err := ethtool(fd, ifname, &v); err != nil {
		return 0, err
	}
	return v.data, nil
}

// SetTxChecksum turns TX checksum offload of ifname, in the calling thread's
// network namespace, on or off.
//
// A veth with TX checksum offload hands the peer TCP/UDP segments whose
// checksum is only partial (CHECKSUM_PARTIAL), trusting the receiver to be
// the kernel. An AF_XDP forwarder copies the frame bytes verbatim, so the
// far side receives a wrong checksum and drops the segment. Turning offload
// off makes the sending stack write complete checksums into the frame.
func SetTxChecksum(ifname string, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("set tx checksum offload on %s: socket: %w", ifname, err)
	}
	defer unix.Close(fd)
	return setTxChecksum(fd, ifname, on)
}

func setTxChecksum(fd int, ifname string, on bool) error {
	v := ethtoolValue{cmd: ethtoolSTXCSUM}
	if on {
		v.data = 1
	}
	if err := ethtool(fd, ifname, &v); err != nil {
		return fmt.Errorf("set tx checksum offload on %s to %v (ETHTOOL_STXCSUM): %w", ifname, on, err)
	}
	// The kernel may silently keep a feature it cannot change; read it back.
	got, err := ethtoolGet(fd, ifname, ethtoolGTXCSUM)
	if err != nil {
		return fmt.Errorf("read tx checksum offload on %s (ETHTOOL_GTXCSUM): %w", ifname, err)
	}
	if (got != 0) != on {
		return fmt.Errorf("tx checksum offload on %s is still %v", ifname, got != 0)
	}
	return nil
}

// txChecksum reports whether TX checksum offload is on for ifname, reached
// through socket fd.
func txChecksum(fd int, ifname string) (bool, error) {
	got, err := ethtoolGet(fd, ifname, ethtoolGTXCSUM)
	if err != nil {
		return false, fmt.Errorf("read tx checksum offload on %s (ETHTOOL_GTXCSUM): %w", ifname, err)
	}
	return got != 0, nil
}

// clearVLANOffload turns VLAN tag insertion and stripping off. With TX VLAN
// offload the tag of a frame sent on a VLAN sub-interface travels in skb
// metadata, not in the frame, so an XDP program on the peer never sees it.
//
// The legacy ETHTOOL_SFLAGS path is implemented by the ethtool core for every
// device; if it refuses, the feature is fixed on for this device and
// ETHTOOL_SFEATURES would be refused for the same reason, so we report the
// error instead of trying it.
func clearVLANOffload(fd int, ifname string) error {
	flags, err := ethtoolGet(fd, ifname, ethtoolGFLAGS)
	if err != nil {
		return fmt.Errorf("read offload flags of %s (ETHTOOL_GFLAGS): %w", ifname, err)
	}
	const vlan = ethFlagTXVLAN | ethFlagRXVLAN
	if flags&vlan == 0 {
		return nil
	}
	v := ethtoolValue{cmd: ethtoolSFLAGS, data: flags &^ vlan}
	if err := ethtool(fd, ifname, &v); err != nil {
		return fmt.Errorf("turn off VLAN offload on %s (ETHTOOL_SFLAGS %#x): %w; VLAN tags would stay out of the frame data XDP sees", ifname, v.data, err)
	}
	flags, err = ethtoolGet(fd, ifname, ethtoolGFLAGS)
	if err != nil {
		return fmt.Errorf("read offload flags of %s (ETHTOOL_GFLAGS): %w", ifname, err)
	}
	if flags&vlan != 0 {
		return fmt.Errorf("VLAN offload on %s still on (flags %#x)", ifname, flags)
	}
	return nil
}

// DisableOffloads turns off TX checksum offload and TX/RX VLAN offload on
// ifname inside ns (nil: the calling thread's namespace), so that every frame
// a forwarder sees carries a complete checksum and its VLAN tag in the data.
// NewPair already does this for the namespace-side ends.
func DisableOffloads(ns *NS, ifname string) error {
	return disableOffloads(ns, ifname, false)
}

func disableOffloads(ns *NS, ifname string, keepTxChecksum bool) error {
	var fd int
	var err error
	if ns == nil {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	} else {
		fd, err = ns.socket()
	}
	if err != nil {
		return fmt.Errorf("disable offloads on %s: %w", ifname, err)
	}
	defer unix.Close(fd)
	if !keepTxChecksum {
		if err := setTxChecksum(fd, ifname, false); err != nil {
			return err
		}
	}
	return clearVLANOffload(fd, ifname)
}
