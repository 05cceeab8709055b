package fwd

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/zcbuf"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Config configures a Forwarder. The zero value of each field but Links is
// a sensible default.
type Config struct {
	// Links are the links to forward between: exactly two without a
	// Handler (each packet leaves by the other), 1..MaxLinks with one.
	Links []string
	// Handler decides each packet's way (handler.go); nil cross-connects
	// the two links.
	Handler Handler
	// Queues is the number of workers, each with a TX queue on every
	// link. 0: as many as the CPUs the process may use, at most the
	// smallest queue count of the links. Every RX queue of every link gets
	// a socket either way; a worker reads several when links have more.
	Queues int
	// FrameSize is the UMEM chunk, 2048 or 4096. 0: 2048, or 4096 when a
	// link's driver would cut MTU-sized frames in 2048-byte chunks in
	// zero-copy mode (igb, igc and ixgbe program receive buffers in 1 KiB
	// units: package zcbuf). A frame size given that the driver would cut
	// is refused with ZeroCopyOn, and binds in copy mode with ZeroCopyAuto.
	FrameSize int
	XDPMode   xsk.XDPMode
	ZeroCopy  xsk.ZeroCopy
	HugePages umem.HugePages
	Force     bool // replace a foreign XDP program
	// RingSize is the entries of each RX and TX ring (fill and completion
	// rings get twice as many): a power of two, MinRingSize..MaxRingSize.
	// 0: automatic.
	RingSize uint32
	Batch    int // 0: 64 descriptors per ring operation
	Logger   *slog.Logger

	// InlineMax is the largest packet, in bytes, copied whole into a
	// 256-byte inline slot: 1..256; 0: the default, 256; InlineOff: the
	// inline path is off, and the UMEM has no inline zone. SetInlineMax
	// and xdpfwd's --inline-max (ParseInlineMax) take the same values.
	InlineMax int
	// FragOrder sizes frag blocks: 3 (32 KiB) or 4 (64 KiB). 0: 4;
	// negative: no frag zone.
	FragOrder int
	// MaxTxFrags is the most descriptors a multi-buffer packet may leave
	// as before it is repacked into a frag block. 0: 4.
	MaxTxFrags int
	// MultiBufferMode: whether to bind the sockets with XDP_USE_SG, so that
	// packets longer than a frame (jumbo MTUs) arrive and leave as
	// descriptor chains. MultiBufferAuto (the zero value) turns it on when
	// a link's MTU needs more than one frame.
	MultiBufferMode MultiBufferMode
	// MultiBuffer is the resolved MultiBufferMode, set by New. Set by a
	// caller with MultiBufferAuto, it means MultiBufferOn.
	MultiBuffer bool

	// XPS picks a flow's TX queue when Queues > 1: sticky (default),
	// hash or cpu (see package xps).
	XPS xps.Mode
	// XPSAsymmetric keys the two directions of a connection apart; by
	// default they share one decision (the same queue index on both links).
	XPSAsymmetric bool
	// FlowTableSize bounds the sticky flow table. 0: xps.DefaultSize.
	FlowTableSize int
	// CPUs pins worker q to CPUs[q % len(CPUs)]. Empty: with several
	// queues, worker q is pinned to the q-th CPU the process may run on,
	// so that everything a TX queue sends leaves from one CPU (on veth a
	// TX queue is, in effect, the CPU whose backlog the packet lands in;
	// a migrating worker would split a flow across two). NoPin disables.
	CPUs  []int
	NoPin bool

	// Checksums: whether to finish TCP/UDP checksums that a sender left
	// partial for offload (a container's veth does, by default): nothing
	// else would, after XDP/AF_XDP, and the receiver would drop them.
	// Checksums already complete are left untouched. ChecksumsAuto (the
	// zero value) turns it on when either link is a veth.
	Checksums ChecksumMode

	// Spin is how many empty rounds a worker busy-polls its rings before it
	// sleeps in poll(2) until the kernel has something. 0, the default,
	// spins 64 rounds (about 5 µs) while spinning catches packets, and
	// sleeps at once after 16 spins in a row caught nothing (a trickle),
	// spinning again every 16th time to notice a burst. Positive: spin
	// that many rounds every time. Negative: never spin.
	Spin int

	// Coalesce is how long a worker keeps polling its rings after they
	// ran dry, past its Spin rounds, before it sleeps: packets that come
	// within it join the next batch without a wake-up, at the price of
	// the polling. It adds no latency. Measured on veth (issue 11) it
	// trades the CPU of the wake-ups it saves for as much polling, or
	// more at 20k packets/s, so it is off by default. 0 or negative: off.
	// No effect when Spin is negative.
	Coalesce time.Duration

	// BusyPoll sets SO_PREFER_BUSY_POLL, SO_BUSY_POLL (this many µs) and
	// SO_BUSY_POLL_BUDGET (Batch) on every socket, and makes each empty
	// polling round call recvfrom(2), which runs the NAPI context feeding
	// the socket's queue if the kernel knows it. On veth in copy mode
	// (Linux 6.18) it does not: no busy poll runs, and the recvfrom per
	// round only costs CPU (issue 11). 0: off.
	BusyPoll time.Duration

	// CompleteChecksums is the resolved Checksums setting.
	CompleteChecksums bool

	// Promisc: whether to hold the links in promiscuous mode while the
	// forwarder lives, so that a NIC hands over unicast frames addressed
	// to other MACs (those a cross-connect, a switch or a reflector
	// carries). PromiscAuto (the zero value) turns it on unless the
	// Handler says it needs no frames but its own (PromiscHandler: sink
	// mode). It is a packet socket's membership (package promisc): the
	// kernel drops it when the forwarder closes or the process dies.
	Promisc PromiscMode
	// Promiscuous is the resolved Promisc setting, set by New.
	Promiscuous bool

	// Env is what the forwarder is built from and runs on: nil, the
	// kernel; package fwdtest's fake plays it in memory for tests.
	Env Env

	// frameAuto: FrameSize was 0, New's to choose.
	frameAuto bool
}

// PromiscMode selects promiscuous mode (Config.Promisc).
type PromiscMode int

const (
	PromiscAuto PromiscMode = iota // on unless the Handler needs none (sink)
	PromiscOn
	PromiscOff
)

// ParsePromiscMode parses "auto", "on" or "off", as xdpfwd's --promisc
// and its config file give it.
func ParsePromiscMode(s string) (PromiscMode, error) {
	switch s {
	case "auto":
		return PromiscAuto, nil
	case "on":
		return PromiscOn, nil
	case "off":
		return PromiscOff, nil
	}
	return 0, fmt.Errorf("promisc %q: want auto, on or off", s)
}

func (m PromiscMode) String() string {
	switch m {
	case PromiscAuto:
		return "auto"
	case PromiscOn:
		return "on"
	case PromiscOff:
		return "off"
	}
	return fmt.Sprintf("PromiscMode(%d)", int(m))
}

// PromiscHandler is a Handler that tells PromiscAuto whether it needs
// promiscuous mode: a sink, which only counts, does not; every other
// Handler, and the cross-connect without one, gets it.
type PromiscHandler interface {
	Handler
	// Promiscuous reports whether the handler needs frames addressed to
	// other MACs.
	Promiscuous() bool
}

// resolvePromisc sets Promiscuous from Promisc and the Handler.
func (c *Config) resolvePromisc() {
	switch c.Promisc {
	case PromiscOn:
		c.Promiscuous = true
	case PromiscOff:
		c.Promiscuous = false
	default:
		c.Promiscuous = true
		if h, ok := c.Handler.(PromiscHandler); ok {
			c.Promiscuous = h.Promiscuous()
		}
	}
}

// InlineOff, as Config.InlineMax or SetInlineMax's limit, turns the inline
// TX path off. 0 there is the default, 256 (see inline.Off).
const InlineOff = inline.Off

// ParseInlineMax parses an inline limit as xdpfwd's --inline-max and its
// config file give it: "off" (InlineOff), or 0..256, 0 being the default.
func ParseInlineMax(s string) (int, error) {
	if s == "off" {
		return InlineOff, nil
	}
	n, err := strconv.Atoi(s)
	if err == nil && n >= 0 {
		_, err = inline.ResolveMax(n)
	}
	if err != nil || n < 0 {
		return 0, fmt.Errorf("inline-max %q: want 1..%d, 0 (the default, %d) or off", s, umem.InlineSlotSize, umem.InlineSlotSize)
	}
	return n, nil
}

// ChecksumMode selects partial-checksum completion.
type ChecksumMode int

const (
	ChecksumsAuto ChecksumMode = iota
	ChecksumsOn
	ChecksumsOff
)

// ParseChecksumMode parses "auto", "on" or "off".
func ParseChecksumMode(s string) (ChecksumMode, error) {
	switch s {
	case "auto":
		return ChecksumsAuto, nil
	case "on":
		return ChecksumsOn, nil
	case "off":
		return ChecksumsOff, nil
	}
	return 0, fmt.Errorf("complete-checksums %q: want auto, on or off", s)
}

// MultiBufferMode selects AF_XDP multi-buffer (XDP_USE_SG).
type MultiBufferMode int

const (
	MultiBufferAuto MultiBufferMode = iota // on when a link's MTU needs more than one frame
	MultiBufferOn
	MultiBufferOff
)

// ParseMultiBufferMode parses "auto", "on" or "off"; "true" and "false"
// are on and off (the flag was a boolean once).
func ParseMultiBufferMode(s string) (MultiBufferMode, error) {
	switch s {
	case "auto":
		return MultiBufferAuto, nil
	case "on", "true":
		return MultiBufferOn, nil
	case "off", "false":
		return MultiBufferOff, nil
	}
	return 0, fmt.Errorf("multi-buffer %q: want auto, on or off", s)
}

func (m MultiBufferMode) String() string {
	switch m {
	case MultiBufferAuto:
		return "auto"
	case MultiBufferOn:
		return "on"
	case MultiBufferOff:
		return "off"
	}
	return fmt.Sprintf("MultiBufferMode(%d)", int(m))
}

// Ring sizes New accepts (Config.RingSize).
const (
	MinRingSize = 64
	MaxRingSize = 16384
)

// InputError marks an error caused by the user's input or environment
// (bad flag, unknown link, missing capability, foreign program): the
// command reports it with exit code 2.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

func inputErr(format string, args ...any) error {
	return &InputError{fmt.Errorf(format, args...)}
}

// ErrUnknownLink is wrapped by New's error when a link does not exist.
var ErrUnknownLink = errors.New("unknown link")

// IsInputError reports whether err is (or wraps) an InputError.
func IsInputError(err error) bool {
	var ie *InputError
	return errors.As(err, &ie)
}

// maxFrameOverhead is what a frame needs beyond the MTU: Ethernet header
// and one VLAN tag (veth forwards MTU+18), plus the XDP_PACKET_HEADROOM the
// kernel keeps in front of received data in copy mode.
const maxFrameOverhead = 14 + 4 + unix.XDP_PACKET_HEADROOM

type linkInfo struct {
	name     string
	driver   string // ethtool -i; "" if unknown
	zc       xsk.ZeroCopyFeatures
	index    int
	mtu      int
	rxQueues int
	txQueues int
	veth     bool
}

// info is l as an Env reports it.
func (l linkInfo) info() LinkInfo {
	return LinkInfo{Name: l.name, Index: l.index, Driver: l.driver, ZeroCopy: l.zc, MTU: l.mtu,
		RXQueues: l.rxQueues, TXQueues: l.txQueues, Veth: l.veth}
}

func (c *Config) normalize() error {
	if c.FrameSize == 0 {
		c.FrameSize = zcbuf.DefaultFrameSize
		c.frameAuto = true
	}
	if c.Batch == 0 {
		c.Batch = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.FragOrder == 0:
		c.FragOrder = 4
	case c.FragOrder < 0:
		c.FragOrder = 0
	}
	if c.MaxTxFrags == 0 {
		c.MaxTxFrags = 4
	}
	if c.Spin < 0 || c.Coalesce < 0 {
		c.Coalesce = 0
	}
	if c.FlowTableSize == 0 {
		c.FlowTableSize = xps.DefaultSize
	}
	if _, err := inline.ResolveMax(c.InlineMax); err != nil {
		return &InputError{err}
	}
	if c.Promisc < PromiscAuto || c.Promisc > PromiscOff {
		return inputErr("promisc %v: want PromiscAuto, PromiscOn or PromiscOff", c.Promisc)
	}
	c.resolvePromisc()
	switch {
	case c.Handler == nil && len(c.Links) != 2:
		return inputErr("need exactly two links (--link A --link B), got %d", len(c.Links))
	case len(c.Links) < 1 || len(c.Links) > MaxLinks:
		return inputErr("need 1..%d links, got %d", MaxLinks, len(c.Links))
	case repeated(c.Links) != "":
		return inputErr("link %q given twice: the links must differ", repeated(c.Links))
	case c.FrameSize != 2048 && c.FrameSize != 4096:
		return inputErr("frame size %d: want 2048 or 4096", c.FrameSize)
	case c.Queues < 0:
		return inputErr("queues %d: want 0 (automatic) or a positive count", c.Queues)
	case c.RingSize != 0 && (c.RingSize&(c.RingSize-1) != 0 || c.RingSize < MinRingSize || c.RingSize > MaxRingSize):
		return inputErr("ring size %d: want a power of two, %d..%d", c.RingSize, MinRingSize, MaxRingSize)
	case c.Batch < linearize.MaxDescs || c.RingSize != 0 && uint32(c.Batch) > c.RingSize:
		return inputErr("batch %d: want %d..ring size", c.Batch, linearize.MaxDescs)
	case c.FragOrder != 0 && c.FragOrder != 3 && c.FragOrder != 4:
		return inputErr("frag order %d: want 3 (32 KiB), 4 (64 KiB) or 0 (off)", c.FragOrder)
	case !validCPUs(c.CPUs):
		return inputErr("cpus %v: want CPU numbers 0..%d", c.CPUs, runtime.NumCPU()-1)
	case c.MaxTxFrags < 1 || c.MaxTxFrags > linearize.MaxDescs:
		return inputErr("max TX frags %d: want 1..%d", c.MaxTxFrags, linearize.MaxDescs)
	}
	return nil
}

func lookupLinks(env Env, c *Config) ([]linkInfo, error) {
	out := make([]linkInfo, len(c.Links))
	for i, name := range c.Links {
		l, err := env.Link(name)
		if err != nil {
			return out, err
		}
		out[i] = linkInfo{name: name, driver: l.Driver, zc: l.ZeroCopy, index: l.Index, mtu: l.MTU, rxQueues: l.RXQueues, txQueues: l.TXQueues, veth: l.Veth}
		if l.Veth && c.Checksums == ChecksumsAuto {
			c.CompleteChecksums = true
		}
	}
	if c.Checksums == ChecksumsOn {
		c.CompleteChecksums = true
	}
	if c.Queues == 0 {
		c.Queues = defaultQueues(out)
	}
	if c.RingSize == 0 {
		c.RingSize = autoRingSize(c.Queues, out)
		c.Batch = min(c.Batch, int(c.RingSize))
	}
	if len(c.CPUs) == 0 && !c.NoPin && c.Queues > 1 {
		c.CPUs = allowedCPUs()
	}
	for _, l := range out {
		if c.Queues > l.rxQueues || c.Queues > l.txQueues {
			return out, inputErr("--queues %d: each worker transmits on a queue of its own, and link %q has %d RX and %d TX queues", c.Queues, l.name, l.rxQueues, l.txQueues)
		}
	}
	if err := c.fitDrivers(out); err != nil {
		return out, err
	}
	return out, c.resolveMultiBuffer(out)
}

// fitDrivers settles FrameSize and ZeroCopy so that no link's driver cuts
// a frame of its MTU in zero-copy mode (package zcbuf), and logs what it
// changed and why.
func (c *Config) fitDrivers(links []linkInfo) error {
	zl := make([]zcbuf.Link, len(links))
	for i, l := range links {
		zl[i] = zcbuf.Link{Name: l.name, Driver: l.driver, MTU: l.mtu,
			NoZeroCopy: l.zc.Known && !l.zc.ZeroCopy, ZCMaxSegs: l.zc.MaxSegs}
	}
	asked := c.FrameSize
	if c.frameAuto {
		asked = 0
	}
	// xdpfwd's UMEM has no headroom of its own: the pool's is the XDP one.
	d, err := zcbuf.Decide(zl, asked, c.ZeroCopy, zcbuf.XDPHeadroom)
	if err != nil {
		return &InputError{err}
	}
	switch {
	case d.Copy:
		c.ZeroCopy = xsk.ZeroCopyOff
		c.Logger.Warn("zero-copy off", "reason", d.Reason)
	case d.FrameSize != c.FrameSize:
		c.Logger.Info(fmt.Sprintf("frame size %d", d.FrameSize), "reason", d.Reason)
	}
	c.FrameSize = d.FrameSize
	return nil
}

// resolveMultiBuffer sets MultiBuffer from MultiBufferMode and the links'
// MTUs, and refuses an MTU that the frames cannot carry.
func (c *Config) resolveMultiBuffer(links []linkInfo) error {
	mode := c.MultiBufferMode
	if mode == MultiBufferAuto && c.MultiBuffer {
		mode = MultiBufferOn
	}
	// A frame holds FrameSize minus the headroom the kernel keeps in front
	// of received data (XDP_PACKET_HEADROOM, in copy mode).
	perFrame := c.FrameSize - unix.XDP_PACKET_HEADROOM
	var jumbo *linkInfo // the first link whose MTU needs more than a frame
	for i := range links {
		l := &links[i]
		need := l.mtu + maxFrameOverhead
		if need <= c.FrameSize {
			continue
		}
		if mode == MultiBufferOff {
			return inputErr("link %q MTU %d needs frames of at least %d bytes (MTU + 18 + %d headroom); --frame-size is %d (multi-buffer is off: use --multi-buffer auto or on for jumbo frames)",
				l.name, l.mtu, need, unix.XDP_PACKET_HEADROOM, c.FrameSize)
		}
		// The kernel takes at most MAX_SKB_FRAGS+1 buffers per packet.
		if frames := (l.mtu + 18 + perFrame - 1) / perFrame; frames > linearize.MaxDescs {
			return inputErr("link %q MTU %d needs %d frames of %d bytes per packet; the kernel takes at most %d (raise --frame-size or lower the MTU)",
				l.name, l.mtu, frames, c.FrameSize, linearize.MaxDescs)
		}
		if jumbo == nil {
			jumbo = l
		}
	}
	switch {
	case mode == MultiBufferOn:
		c.MultiBuffer = true
		c.Logger.Info("multi-buffer on", "reason", "--multi-buffer on")
	case jumbo != nil:
		c.MultiBuffer = true
		c.Logger.Info("multi-buffer on", "reason", fmt.Sprintf("link %s MTU %d needs %d bytes per packet (MTU + 18 + %d headroom), more than a %d-byte frame",
			jumbo.name, jumbo.mtu, jumbo.mtu+maxFrameOverhead, unix.XDP_PACKET_HEADROOM, c.FrameSize))
	default:
		c.MultiBuffer = false
		reason := "--multi-buffer off"
		if mode == MultiBufferAuto {
			reason = fmt.Sprintf("both links' MTUs fit a %d-byte frame", c.FrameSize)
		}
		c.Logger.Info("multi-buffer off", "reason", reason)
	}
	return nil
}

// MaxLinks is the most links one forwarder takes (a LinkSet's size).
const MaxLinks = 64

// repeated returns a name that appears twice in names, or "".
func repeated(names []string) string {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if seen[n] {
			return n
		}
		seen[n] = true
	}
	return ""
}

// framesPerPacket is how many frames of frameSize a packet of the MTU
// (plus Ethernet header and a VLAN tag) takes in multi-buffer mode.
func framesPerPacket(mtu, frameSize int) int {
	perFrame := frameSize - unix.XDP_PACKET_HEADROOM
	return (mtu + 18 + perFrame - 1) / perFrame
}

// autoRingSize picks the ring size from the sockets each worker reads:
// 2048 entries while a worker has one socket per link, less as it gains
// more, so that memory grows with the traffic a worker can take rather
// than with the queue count, and never below 64. Every socket's bind costs
// the kernel time per UMEM chunk, so this also keeps links with many
// queues quick to start (64 queues per link on 2 workers: 64 entries,
// about 17 MiB of 2 KiB frames).
func autoRingSize(workers int, links []linkInfo) uint32 {
	perWorker := 0
	for _, l := range links {
		perWorker += (l.rxQueues + workers - 1) / workers
	}
	size := uint32(2048)
	for size > 64 && int(size)*perWorker > 2*2048 {
		size /= 2
	}
	return size
}

// Capabilities the forwarder needs, checked up front so a missing one is
// named instead of surfacing as EPERM from some later syscall.
var requiredCaps = []struct {
	bit  uint
	name string
}{
	{unix.CAP_NET_ADMIN, "CAP_NET_ADMIN"},
	{unix.CAP_NET_RAW, "CAP_NET_RAW"},
	{unix.CAP_BPF, "CAP_BPF"},
	{unix.CAP_IPC_LOCK, "CAP_IPC_LOCK"},
}

// RequiredCapabilities lists, by name, the capabilities the forwarder
// checks for (the systemd unit grants exactly these).
func RequiredCapabilities() []string {
	var s []string
	for _, c := range requiredCaps {
		s = append(s, c.name)
	}
	return s
}

// CheckCapabilities returns an InputError naming every missing capability.
func CheckCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	var missing []string
	for _, c := range requiredCaps {
		if data[c.bit/32].Effective&(1<<(c.bit%32)) == 0 {
			missing = append(missing, c.name)
		}
	}
	if len(missing) > 0 {
		return inputErr("missing capabilities: %s (run as root or grant them)", strings.Join(missing, ", "))
	}
	return nil
}

// realQueues returns the queues a link uses now (ethtool channels), which
// may be fewer than it was created with (netlink's NumRxQueues): binding to
// an unused queue fails.
func realQueues(name string) (rx, tx int) {
	if c, err := ethtool.GetChannels(name); err == nil && c.RX+c.Combined > 0 {
		return int(c.RX + c.Combined), int(c.TX + c.Combined)
	}
	count := func(kind string) int {
		m, _ := filepath.Glob("/sys/class/net/" + name + "/queues/" + kind + "-*")
		return max(len(m), 1)
	}
	return count("rx"), count("tx")
}

func validCPUs(cpus []int) bool {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return false
	}
	for _, c := range cpus {
		if c < 0 || c >= 1024 || !set.IsSet(c) {
			return false
		}
	}
	return true
}

// allowedCPUs lists the CPUs the process may run on.
// defaultQueues is the worker count Config.Queues 0 stands for: no more
// workers than CPUs (a worker is a busy thread) nor than any link has TX
// queues (each worker transmits on its own).
func defaultQueues(links []linkInfo) int {
	n := max(len(allowedCPUs()), 1)
	for _, l := range links {
		n = min(n, l.rxQueues, l.txQueues)
	}
	return n
}

func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := range 1024 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
