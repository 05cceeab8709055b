package xsk

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The netdev generic netlink family (include/uapi/linux/netdev.h).
const (
	netdevCmdDevGet                 = 1
	netdevADevIfindex               = 1
	netdevADevXDPFeatures           = 3
	netdevADevXDPZCMaxSegs          = 4
	netdevADevXDPRxMetadataFeatures = 5
	netdevXDPActXSKZeroCopy         = 1 << 3
	netdevXDPRxMetadataVLANTag      = 1 << 2
	netdevFamilyVersion             = 1
	nlaTypeMask                     = ^uint16(unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
)

// rxVLANMetadata asks the kernel (netdev dev-get, ≥ 6.3) whether the driver
// of link ifindex implements the VLAN tag RX metadata kfunc. Without it the
// kfunc loads but always fails, and tags would be lost unnoticed.
func rxVLANMetadata(ifindex int) (bool, error) {
	attrs, err := devGet(ifindex)
	if err != nil {
		return false, err
	}
	for _, a := range attrs {
		if a.Attr.Type&nlaTypeMask == netdevADevXDPRxMetadataFeatures && len(a.Value) == 8 {
			return binary.NativeEndian.Uint64(a.Value)&netdevXDPRxMetadataVLANTag != 0, nil
		}
	}
	// A kernel that knows the family but not the attribute (< 6.8).
	return false, nil
}

// ZeroCopyFeatures is what a driver tells the kernel of its AF_XDP
// zero-copy support (netdev dev-get: xdp-features, xdp-zc-max-segs).
type ZeroCopyFeatures struct {
	// Known: the kernel answered (≥ 6.3); the rest is meaningless if not.
	Known bool
	// ZeroCopy: the driver binds AF_XDP sockets in zero-copy mode
	// (NETDEV_XDP_ACT_XSK_ZEROCOPY).
	ZeroCopy bool
	// MaxSegs is the most buffers a zero-copy packet may take
	// (xdp_zc_max_segs): more than 1 means zero-copy multi-buffer. 0: not
	// reported (before 6.6).
	MaxSegs int
}

// LinkZeroCopy asks the kernel what the driver of link ifindex supports
// of AF_XDP zero-copy.
func LinkZeroCopy(ifindex int) (ZeroCopyFeatures, error) {
	attrs, err := devGet(ifindex)
	if err != nil {
		return ZeroCopyFeatures{}, err
	}
	var f ZeroCopyFeatures
	for _, a := range attrs {
		switch a.Attr.Type & nlaTypeMask {
		case netdevADevXDPFeatures:
			if len(a.Value) == 8 {
				f.Known = true
				f.ZeroCopy = binary.NativeEndian.Uint64(a.Value)&netdevXDPActXSKZeroCopy != 0
			}
		case netdevADevXDPZCMaxSegs:
			if len(a.Value) == 4 {
				f.MaxSegs = int(binary.NativeEndian.Uint32(a.Value))
			}
		}
	}
	return f, nil
}

// devGet runs netdev dev-get for link ifindex and returns its attributes.
func devGet(ifindex int) ([]syscall.NetlinkRouteAttr, error) {
	fam, err := netlink.GenlFamilyGet("netdev")
	if err != nil {
		return nil, fmt.Errorf("netdev generic netlink family: %w", err)
	}
	req := nl.NewNetlinkRequest(int(fam.ID), 0)
	req.AddData(genlHeader{netdevCmdDevGet, netdevFamilyVersion})
	req.AddData(nl.NewRtAttr(netdevADevIfindex, nl.Uint32Attr(uint32(ifindex))))
	msgs, err := req.Execute(unix.NETLINK_GENERIC, 0)
	if err != nil {
		return nil, fmt.Errorf("netdev dev-get %d: %w", ifindex, err)
	}
	var out []syscall.NetlinkRouteAttr
	for _, m := range msgs {
		if len(m) < nl.SizeofGenlmsg {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[nl.SizeofGenlmsg:])
		if err != nil {
			return nil, fmt.Errorf("netdev dev-get %d: %w", ifindex, err)
		}
		out = append(out, attrs...)
	}
	return out, nil
}

// genlHeader is struct genlmsghdr. nl.Genlmsg serializes 4 bytes from its
// 2-byte struct, so its reserved field carries whatever follows in memory,
// and the kernel refuses the message (EINVAL) when that is not zero.
type genlHeader struct{ cmd, version uint8 }

func (h genlHeader) Len() int          { return nl.SizeofGenlmsg }
func (h genlHeader) Serialize() []byte { return []byte{h.cmd, h.version, 0, 0} }
