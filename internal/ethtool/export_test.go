package ethtool

import "golang.org/x/sys/unix"

// Flags returns the raw ETH_FLAG_* word, so tests can check that
// SetVLANOffload leaves the other flags alone.
func Flags(ifname string) (uint32, error) { return get(ifname, unix.ETHTOOL_GFLAGS) }

const FlagsVLAN = flagsVLAN
