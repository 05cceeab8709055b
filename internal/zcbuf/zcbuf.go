// Package zcbuf knows how NIC drivers size the receive buffers they
// program for an AF_XDP socket in zero-copy mode, and picks the frame size
// (UMEM chunk) with which a link's largest frame fits them.
//
// Every driver starts from the pool's receive frame size,
// xsk_pool_get_rx_frame_size(): the chunk size minus the pool's headroom
// (XDP_PACKET_HEADROOM, 256, plus the UMEM's own). Some hardware takes that
// size only in coarse units: igb writes SRRCTL.BSIZEPKT in 1 KiB units, so
// a 2048-byte chunk (1792 bytes after the headroom) becomes a 1024-byte
// buffer, and a 1514-byte frame arrives cut to 1024 bytes. What this
// package owns is that table and the decision drawn from it: keep the
// frame size, raise it to 4096, give up zero-copy, or refuse.
package zcbuf

import (
	"fmt"

	"github.com/xdpfwd/xdpfwd/xsk"
)

// XDPHeadroom is the headroom every XSK pool keeps in front of received
// data (XDP_PACKET_HEADROOM); the UMEM's headroom comes on top.
const XDPHeadroom = 256

// FrameOverhead is what a link's largest frame adds to its MTU: the
// Ethernet header and one VLAN tag. Every driver here strips the FCS.
const FrameOverhead = 14 + 4

// DefaultFrameSize is the frame size when none is given and no driver
// needs more; LargeFrameSize the one picked when a driver does.
const (
	DefaultFrameSize = 2048
	LargeFrameSize   = 4096
)

// Driver is what one driver does with an XSK pool's frames in zero-copy
// mode.
type Driver struct {
	// Name is the driver's name as ethtool -i (ETHTOOL_GDRVINFO) gives it.
	Name string
	// Unit is the granularity of the receive buffer size the driver
	// programs: the pool's frame size rounded down to a multiple of it.
	// 1: the buffer is the pool's frame size, to the byte.
	Unit int
	// MultiBuffer: the driver takes zero-copy multi-buffer (XDP_USE_SG
	// with XDP_ZEROCOPY), so a frame longer than one buffer arrives as a
	// chain rather than cut or dropped.
	MultiBuffer bool
	// Where is how the driver derives the size, in Linux's source.
	Where string
}

// Drivers is the table, from Linux 6.6–7.x sources. ixgbe's 1 KiB unit is
// its 82599's: the X540 and later take the exact size in RXDCTL.RLPML with
// a page-sized SRRCTL buffer, but the driver name does not tell the MACs
// apart, so the table assumes the coarser.
var Drivers = []Driver{
	{"igb", 1024, false, "igb_main.c igb_setup_srrctl: SRRCTL.BSIZEPKT = xsk_pool_get_rx_frame_size() >> 10; igb_xsk.c igb_clean_rx_irq_zc takes each descriptor as a whole packet (no EOP check)"},
	{"igc", 1024, false, "igc_main.c igc_configure_rx_ring: SRRCTL.BSIZEPKT = IGC_SRRCTL_BSIZEPKT(xsk_pool_get_rx_frame_size()), in 1 KiB units"},
	{"ixgbe", 1024, false, "ixgbe_main.c ixgbe_configure_srrctl: on 82599 SRRCTL.BSIZEPKT = frame size >> 10, larger frames dropped (ixgbe_xsk.c: non-EOP descriptors discarded); X540+: PAGE_SIZE buffer, RXDCTL.RLPML = frame size"},
	{"i40e", 1, true, "i40e_main.c i40e_configure_rx_ring: rx_buf_len = xsk_pool_get_rx_frame_size(), dbuff = DIV_ROUND_UP(rx_buf_len, 128), rxmax = min(max_frame, chain_len * rx_buf_len); zero-copy multi-buffer since 6.6"},
	{"ice", 1, true, "ice_base.c ice_vsi_cfg_rxq/ice_setup_rx_ctx: rx_buf_len = xsk_pool_get_rx_frame_size(), dbuf = DIV_ROUND_UP(rx_buf_len, 128), rxmax = min(max_frame, 5 * rx_buf_len); zero-copy multi-buffer since 6.6"},
	{"mlx5_core", 1, false, "en/xsk/setup.c mlx5e_validate_xsk_param: bind refused (EINVAL) when MTU + headroom exceed the chunk, chunks 2048..PAGE_SIZE"},
	{"virtio_net", 1, false, "virtio_net.c virtnet_add_recvbuf_xsk: buffer = xsk_pool_get_rx_frame_size() + virtio header (in the headroom); virtnet_receive_xsk_merge: a packet of several buffers skips the program (to the stack before a 2025 fix, XDP_ABORTED after)"},
}

// Lookup returns the table's entry for a driver name.
func Lookup(name string) (Driver, bool) {
	for _, d := range Drivers {
		if d.Name == name {
			return d, true
		}
	}
	return Driver{}, false
}

// Buffer is the receive buffer the driver programs for frames of
// frameSize bytes with headroom bytes in front of the data.
func (d Driver) Buffer(frameSize, headroom int) int {
	n := frameSize - headroom
	if d.Unit > 1 {
		n -= n % d.Unit
	}
	return n
}

// programs says how the driver sizes its buffers, for messages.
func (d Driver) programs() string {
	switch d.Unit {
	case 1:
		return d.Name + " programs receive buffers of the frame size less the headroom"
	case 1024:
		return d.Name + " programs receive buffers in 1 KiB units"
	}
	return fmt.Sprintf("%s programs receive buffers in %d-byte units", d.Name, d.Unit)
}

// Link is one link to size for: its name, driver (ethtool -i) and MTU,
// and what the kernel says of the driver's zero-copy support, which
// overrides the table where it speaks.
type Link struct {
	Name, Driver string
	MTU          int
	// NoZeroCopy: the kernel says the driver has no AF_XDP zero-copy
	// (xdp-features without xsk-zerocopy, as igb before 6.14): its
	// buffers never hold UMEM chunks, so nothing needs to fit them.
	NoZeroCopy bool
	// ZCMaxSegs is the kernel's xdp-zc-max-segs for the link: more than
	// 1, zero-copy multi-buffer; 0, not reported (the table decides).
	ZCMaxSegs int
}

// Decision is what Decide chose.
type Decision struct {
	// FrameSize is the frame size to use.
	FrameSize int
	// Copy: zero-copy was asked for with auto and cannot hold the
	// links' frames; bind in copy mode.
	Copy bool
	// Reason says why FrameSize or Copy differ from what was asked; ""
	// when nothing changed.
	Reason string
}

// Decide picks the frame size and bind mode so that every link's largest
// frame (MTU + 18) fits the receive buffer its driver will program in
// zero-copy mode. frameSize is the one asked for, 0 if none was (then
// 2048, or 4096 when a driver needs it); zc the bind mode asked for;
// headroom the pool's (XDPHeadroom plus the UMEM's). An explicit frame
// size that does not fit gives copy mode with zc auto and an error with
// zc on, as does a frame no frame size fits. Drivers not in the table,
// those with zero-copy multi-buffer and those without zero-copy are taken
// to fit.
func Decide(links []Link, frameSize int, zc xsk.ZeroCopy, headroom int) (Decision, error) {
	explicit := frameSize != 0
	if !explicit {
		frameSize = DefaultFrameSize
	}
	d := Decision{FrameSize: frameSize}
	if zc == xsk.ZeroCopyOff {
		return d, nil
	}
	l, drv, ok := misfit(links, frameSize, headroom)
	if ok {
		return d, nil
	}
	need := l.MTU + FrameOverhead
	got := drv.Buffer(frameSize, headroom)
	why := fmt.Sprintf("%s, %d-byte frames give %d; link %s needs %d (MTU %d + %d)",
		drv.programs(), frameSize, got, l.Name, need, l.MTU, FrameOverhead)
	_, _, fitsLarge := misfit(links, LargeFrameSize, headroom)
	switch {
	case !explicit && fitsLarge:
		d.FrameSize, d.Reason = LargeFrameSize, why
		return d, nil
	case fitsLarge && zc == xsk.ZeroCopyOn:
		return d, fmt.Errorf("--frame-size %d with --zerocopy on: %s; use --frame-size %d (or --zerocopy auto: copy mode)",
			frameSize, why, LargeFrameSize)
	case fitsLarge:
		d.Copy = true
		d.Reason = fmt.Sprintf("--frame-size %d: %s; --frame-size %d keeps zero-copy", frameSize, why, LargeFrameSize)
		return d, nil
	}
	// Not even the largest frames hold it (a jumbo MTU on a driver
	// without zero-copy multi-buffer).
	l, drv, _ = misfit(links, LargeFrameSize, headroom)
	most := drv.Buffer(LargeFrameSize, headroom)
	why = fmt.Sprintf("link %s MTU %d needs %d-byte receive buffers; %s, at most %d with %d-byte frames, and %s takes no multi-buffer in zero-copy",
		l.Name, l.MTU, l.MTU+FrameOverhead, drv.programs(), most, LargeFrameSize, drv.Name)
	if zc == xsk.ZeroCopyOn {
		return d, fmt.Errorf("--zerocopy on: %s; use --zerocopy auto or off (copy mode), or an MTU of at most %d", why, most-FrameOverhead)
	}
	d.Copy, d.Reason = true, why
	return d, nil
}

// misfit returns the first link whose driver would cut its largest frame
// with frames of frameSize, or ok when none would.
func misfit(links []Link, frameSize, headroom int) (Link, Driver, bool) {
	for _, l := range links {
		drv, known := Lookup(l.Driver)
		multi := drv.MultiBuffer
		if l.ZCMaxSegs > 0 {
			multi = l.ZCMaxSegs > 1
		}
		if !known || multi || l.NoZeroCopy {
			continue
		}
		if drv.Buffer(frameSize, headroom) < l.MTU+FrameOverhead {
			return l, drv, false
		}
	}
	return Link{}, Driver{}, true
}
