// Package ethtool makes the few SIOCETHTOOL ioctls xdpfwd needs, in the
// calling thread's network namespace, without shelling out to ethtool(8).
package ethtool

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	cmdGTxCsum   = 0x16 // ETHTOOL_GTXCSUM
	cmdSTxCsum   = 0x17 // ETHTOOL_STXCSUM
	cmdGChannels = 0x3c // ETHTOOL_GCHANNELS
)

// ifreq is struct ifreq with ifr_data: a name and a pointer.
type ifreq struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // the union is 24 bytes on 64-bit
}

// ioctl runs one SIOCETHTOOL command; data points at its struct, whose
// first field is the command.
func ioctl(ifname string, data unsafe.Pointer) error {
	if len(ifname) >= unix.IFNAMSIZ {
		return fmt.Errorf("ethtool %s: name too long", ifname)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("ethtool %s: socket: %w", ifname, err)
	}
	defer unix.Close(fd)
	var ifr ifreq
	copy(ifr.name[:], ifname)
	ifr.data = data
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
		return e
	}
	return nil
}

type value struct{ cmd, data uint32 }

// TxChecksum reports whether TX checksum offload is on.
func TxChecksum(ifname string) (bool, error) {
	v := value{cmd: cmdGTxCsum}
	if err := ioctl(ifname, unsafe.Pointer(&v)); err != nil {
		return false, fmt.Errorf("ethtool %s: get tx checksum: %w", ifname, err)
	}
	return v.data != 0, nil
}

// SetTxChecksum turns TX checksum offload on or off. Off also turns off
// what depends on it (TSO, GSO of partial checksums), so every segment
// leaves with its checksum complete: required when an XDP/AF_XDP datapath
// carries the packets, since nothing finishes a partial checksum there.
func SetTxChecksum(ifname string, on bool) error {
	v := value{cmd: cmdSTxCsum}
	if on {
		v.data = 1
	}
	if err := ioctl(ifname, unsafe.Pointer(&v)); err != nil {
		return fmt.Errorf("ethtool %s: set tx checksum %v: %w", ifname, on, err)
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
	var c struct {
		cmd uint32
		Channels
	}
	c.cmd = cmdGChannels
	if err := ioctl(ifname, unsafe.Pointer(&c)); err != nil {
		return Channels{}, fmt.Errorf("ethtool %s: get channels: %w", ifname, err)
	}
	return c.Channels, nil
}
