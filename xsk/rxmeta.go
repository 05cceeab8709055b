package xsk

import (
	"encoding/binary"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The netdev generic netlink family (include/uapi/linux/netdev.h).
const (
	netdevCmdDevGet                 = 1
	netdevADevIfindex               = 1
	netdevADevXDPRxMetadataFeatures = 5
	netdevXDPRxMetadataVLANTag      = 1 << 2
	netdevFamilyVersion             = 1
	nlaTypeMask                     = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
)

// rxVLANMetadata asks the kernel (netdev dev-get, ≥ 6.3) whether the driver
// of link ifindex implements the VLAN tag RX metadata kfunc. Without it the
// kfunc loads but always fails, and tags would be lost unnoticed.
func rxVLANMetadata(ifindex int) (bool, error) {
	fam, err := netlink.GenlFamilyGet("netdev")
	if err != nil {
		return false, fmt.Errorf("netdev generic netlink family: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), 0)
	req.AddData(genlHeader{netdevCmdDevGet, netdevFamilyVersion})
	req.AddData(nl.NewRtAttr(netdevADevIfindex, nl.Uint32Attr(uint32(ifindex))))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return false, fmt.Errorf("netdev dev-get %d: %w", ifindex, err)
	}
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			return false, fmt.Errorf("netdev dev-get %d: %w", ifindex, err)
		}
		for _, a := range attrs {
			if a.Attr.Type&nlaTypeMask == netdevADevXDPRxMetadataFeatures && len(a.Value) == 8 {
				return binary.NativeEndian.Uint64(a.Value)&netdevXDPRxMetadataVLANTag != 0, nil
			}
		}
	}
	// A kernel that knows the family but not the attribute (< 6.8).
	return false, nil
}

// genlHeader is struct genlmsghdr. nl.Genlmsg serializes 4 bytes from its
// 2-byte struct, so its reserved field carries whatever follows in memory,
// and the kernel refuses the message (EINVAL) when that is not zero.
type genlHeader struct{ cmd, version uint8 }

func (h genlHeader) Len() int          { return nl.SizeofGenlmsg }
func (h genlHeader) Serialize() []byte { return []byte{h.cmd, h.version, 0, 0} }
