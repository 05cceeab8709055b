package fwd

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/internal/enum"
	"github.com/xdpfwd/xdpfwd/internal/ethtool"
	"github.com/xdpfwd/xdpfwd/internal/netdev"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// Config configures a Forwarder: what its user asks for. The zero value of
// each field but Links is the default (or "auto", New's to choose against
// the links), and means the same in xdpfwd's flags, its --config file and
// a SIGHUP reload, which all build a Config through one parser. New
// resolves a Config into a Plan (Forwarder.Plan) and never writes to it.
// A Plan's field of the same name holds what the Config's resolved to: a
// zero that stands for a default replaced by it (InlineMax 256, FragOrder
// 4, MaxLinks the links given), off spelled as the Config spells it
// (InlineOff, FragOff, a Coalesce of 0), so that the same number means the
// same in both; CPUs aside, whose empty list is unpinned in a Plan.
type Config struct {
	// Links are the links to forward between: exactly two without a
	// Handler (each packet leaves by the other), 1..MaxLinks with one.
	Links []string
	// MaxLinks is how many links the forwarder can hold at once with a
	// Handler, Links and those added later (Forwarder.AddLink) together:
	// the UMEM is sized for that many at start (each future link's fill
	// rings and TX in flight set aside, as if it were there), since it is
	// registered once. With RingSize auto the links given then keep
	// smaller rings (Plan.RingSize), so that MaxLinks links added later
	// take within 10 % of the memory of MaxLinks given at start. 0: the
	// links given, nothing set aside; at most MaxLinks (64, a LinkSet's
	// size). Without a Handler, 0 or 2. Plan.MaxLinks is the count it
	// resolved to, never 0; xdpfwd's --max-links takes the same counts
	// (its default, auto, is not 0 but 64 in the modes that add links).
	MaxLinks int
	// Handler decides each packet's way (handler.go); nil cross-connects
	// the two links.
	Handler Handler
	// Queues is the number of workers, each with a TX queue of its own on
	// every link. 0: auto, as many as the CPUs the process may use, at
	// most the smallest RX or TX queue count of the links (on a reload,
	// and at most the workers started: Forwarder.DefaultQueues). Every RX
	// queue of every link gets a socket either way; a worker reads several
	// when links have more.
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
	// 0: auto, 2048 while a worker has one socket per link, halved as it
	// reads more (never below 64). It is the links given's: a link added
	// later gets AddedRingSize.
	RingSize uint32
	// AddedRingSize is the entries of each ring of a link added while
	// running (Forwarder.AddLink), whose memory the UMEM sets aside at
	// start for each of the MaxLinks links that may come: a power of two,
	// MinRingSize..MaxRingSize, at most RingSize when that is set. 0:
	// auto, the ring size MaxLinks links would have at start (64 entries
	// at 64 links), never above RingSize: a RingSize raised for the links
	// given does not multiply what every link to come pins.
	AddedRingSize uint32
	// MaxUMEM bounds the bytes of packet memory the forwarder pins (the
	// UMEM, links given and those set aside for links to come): New
	// refuses a Config whose plan needs more, naming what takes it. 0:
	// DefaultMaxUMEM.
	MaxUMEM int64
	Batch   int // descriptors per ring operation, 18..RingSize; 0: 64
	Logger  *slog.Logger

	// InlineMax is the largest packet, in bytes, copied whole into a
	// 256-byte inline slot: 1..256; 0: the default, 256; InlineOff: the
	// inline path is off, and the UMEM has no inline zone. SetInlineMax,
	// Plan.InlineMax and Forwarder.InlineMax (resolved: never 0) and
	// xdpfwd's --inline-max (ParseInlineMax) take the same values.
	InlineMax int
	// FragOrder sizes frag blocks, which take repacked multi-buffer
	// packets and a Handler's flood copies: 3 (32 KiB) or 4 (64 KiB).
	// 0: the default, 4; FragOff (any negative; xdpfwd's --frag-order
	// off): no frag zone. Without multi-buffer and without a Handler no
	// packet uses one, and the UMEM has none whatever FragOrder says.
	// Plan.FragOrder (resolved: 3, 4 or FragOff, never 0) and xdpfwd's
	// --frag-order take the same values.
	FragOrder int
	// MaxTxFrags is the most descriptors a multi-buffer packet may leave
	// as before it is repacked into a frag block. 0: 4.
	MaxTxFrags int
	// MultiBufferMode: whether to bind the sockets with XDP_USE_SG, so that
	// packets longer than a frame (jumbo MTUs) arrive and leave as
	// descriptor chains. MultiBufferAuto (the zero value) turns it on when
	// a link's MTU needs more than one frame.
	MultiBufferMode MultiBufferMode

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
	// a migrating worker would split a flow across two). NoPin disables
	// that default.
	CPUs  []int
	NoPin bool

	// Checksums: whether to finish TCP/UDP checksums that a sender left
	// partial for offload (a container's veth does, by default): nothing
	// else would, after XDP/AF_XDP, and the receiver would drop them.
	// Checksums already complete are left untouched. ChecksumsAuto (the
	// zero value) finishes the packets received on veths, given or added
	// while running.
	Checksums ChecksumMode

	// Spin is how many empty rounds a worker busy-polls its rings before it
	// sleeps in poll(2) until the kernel has something. 0, the default
	// (xdpfwd's --spin auto or 0), spins 64 rounds (about 5 µs) while
	// spinning catches packets, and sleeps at once after 16 spins in a row
	// caught nothing (a trickle), spinning again every 16th time to notice
	// a burst. When what it forwards is answered (requests out on a link,
	// replies back on it within 200 µs, in a third of its dry spells) it
	// also polls a reply window, long enough to catch most answers
	// without a wake-up, within a quarter of its time; a one-way stream
	// never earns one (WorkerStats.ReplyWindow). When new work comes at a
	// steady interval (0.3 to 20 ms, a few packets each time) it sleeps
	// until just before the next is due and polls through the window it
	// is due in, within a fifth of its time (WorkerStats.CadenceCaught).
	// Positive: spin that many rounds every time; SpinBusy (--spin busy):
	// never sleep. Negative (--spin off): never spin.
	Spin int

	// Coalesce is how long a worker keeps polling its rings after they
	// ran dry, past its Spin rounds, before it sleeps: packets that come
	// within it join the next batch without a wake-up, at the price of
	// the polling. It adds no latency. Measured on veth it
	// trades the CPU of the wake-ups it saves for as much polling, or
	// more at 20k packets/s, so it is off by default. 0 or negative: off.
	// No effect when Spin is negative.
	Coalesce time.Duration

	// BusyPoll sets SO_PREFER_BUSY_POLL, SO_BUSY_POLL (this many µs) and
	// SO_BUSY_POLL_BUDGET (Batch) on every socket, and makes each empty
	// polling round call recvfrom(2), which runs the NAPI context feeding
	// the socket's queue if the kernel knows it. On veth in copy mode
	// (Linux 6.18) it does not: no busy poll runs, and the recvfrom per
	// round only costs CPU. 0: off.
	BusyPoll time.Duration

	// Promisc: whether to hold the links in promiscuous mode while the
	// forwarder lives, so that a NIC hands over unicast frames addressed
	// to other MACs (those a cross-connect, a switch or a reflector
	// carries). PromiscAuto (the zero value) turns it on unless the
	// Handler says it needs no frames but its own (PromiscHandler: sink
	// mode). It is a packet socket's membership (package promisc): the
	// kernel drops it when the forwarder closes or the process dies.
	Promisc PromiscMode

	// Env is what the forwarder is built from and runs on: nil, the
	// kernel; package fwdtest's fake plays it in memory for tests.
	Env Env
}

// PromiscMode selects promiscuous mode (Config.Promisc).
type PromiscMode int

const (
	PromiscAuto PromiscMode = iota // on unless the Handler needs none (sink)
	PromiscOn
	PromiscOff
)

var promiscNames = enum.New[PromiscMode]("PromiscMode", "auto", "on", "off")

// ParsePromiscMode parses "auto", "on" or "off", as xdpfwd's --promisc
// and its config file give it.
func ParsePromiscMode(s string) (PromiscMode, error) {
	if m, ok := promiscNames.Parse(s); ok {
		return m, nil
	}
	return 0, fmt.Errorf("promisc %q: want %s", s, promiscNames.Want())
}

func (m PromiscMode) String() string { return promiscNames.String(m) }

// PromiscHandler is a Handler that tells PromiscAuto whether it needs
// promiscuous mode: a sink, which only counts, does not; every other
// Handler, and the cross-connect without one, gets it.
type PromiscHandler interface {
	Handler
	// Promiscuous reports whether the handler needs frames addressed to
	// other MACs.
	Promiscuous() bool
}

// InlineOff, as Config.InlineMax, Plan.InlineMax or SetInlineMax's limit,
// turns the inline TX path off. 0 there is the default, 256 (see
// inline.Off), which a Plan never holds.
const InlineOff = inline.Off

// FragOff, as Config.FragOrder or Plan.FragOrder, is no frag zone. 0 there
// is the default order, 4, which a Plan never holds.
const FragOff = -1

// SpinBusy as Config.Spin: workers never sleep waiting for packets; each
// polls its rings all the time, as testpmd's and Open vSwitch's PMD
// threads do (one holding packets for another worker's turn still gives
// up its CPU for a moment, as it does otherwise). No packet waits for a
// wake-up (the lowest latency, and no wake-up costs the sending CPU at a
// flood), and each worker takes a whole CPU at any rate, idle too: give
// each its own (Config.CPUs).
const SpinBusy = math.MaxInt

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

var checksumNames = enum.New[ChecksumMode]("ChecksumMode", "auto", "on", "off")

// ParseChecksumMode parses "auto", "on" or "off".
func ParseChecksumMode(s string) (ChecksumMode, error) {
	if m, ok := checksumNames.Parse(s); ok {
		return m, nil
	}
	return 0, fmt.Errorf("complete-checksums %q: want %s", s, checksumNames.Want())
}

// String is m as ParseChecksumMode reads it.
func (m ChecksumMode) String() string { return checksumNames.String(m) }

// MultiBufferMode selects AF_XDP multi-buffer (XDP_USE_SG).
type MultiBufferMode int

const (
	MultiBufferAuto MultiBufferMode = iota // on when a link's MTU needs more than one frame
	MultiBufferOn
	MultiBufferOff
)

var multiBufferNames = enum.New[MultiBufferMode]("MultiBufferMode", "auto", "on", "off")

// ParseMultiBufferMode parses "auto", "on" or "off"; "true" and "false"
// are on and off (the flag was a boolean once).
func ParseMultiBufferMode(s string) (MultiBufferMode, error) {
	switch s {
	case "true":
		return MultiBufferOn, nil
	case "false":
		return MultiBufferOff, nil
	}
	if m, ok := multiBufferNames.Parse(s); ok {
		return m, nil
	}
	return 0, fmt.Errorf("multi-buffer %q: want %s", s, multiBufferNames.Want())
}

func (m MultiBufferMode) String() string { return multiBufferNames.String(m) }

// Ring sizes New accepts (Config.RingSize, Config.AddedRingSize).
const (
	MinRingSize = 64
	MaxRingSize = 16384
)

// DefaultMaxUMEM is the packet memory a forwarder pins at most when
// Config.MaxUMEM is 0: 1 GiB, about 8 times what the largest automatic
// plan takes (64 links of one queue, 2048-entry rings given, jumbo frames),
// and far below what a ring size set by hand times MaxLinks could ask.
const DefaultMaxUMEM = 1 << 30

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
	veth     bool // checksums auto means on
	rxRing   int  // each RX queue's hardware ring (LinkInfo.RXRing)
	dom      int  // the UMEM domain it binds in (domain.go); set by New, AddLink
}

// info is l as an Env reports it.
func (l linkInfo) info() LinkInfo {
	return LinkInfo{Name: l.name, Index: l.index, Driver: l.driver, ZeroCopy: l.zc, MTU: l.mtu,
		RXQueues: l.rxQueues, TXQueues: l.txQueues, Veth: l.veth, RXRing: l.rxRing}
}

// lookupLinks asks env what each link is: the facts resolve plans with.
// It changes nothing.
func lookupLinks(env Env, names []string) ([]linkInfo, error) {
	out := make([]linkInfo, len(names))
	for i, name := range names {
		l, err := env.Link(name)
		if err != nil {
			return out, err
		}
		out[i] = linkInfo{name: name, driver: l.Driver, zc: l.ZeroCopy, index: l.Index, mtu: l.MTU, rxQueues: l.RXQueues, txQueues: l.TXQueues, veth: l.Veth, rxRing: l.RXRing}
	}
	return out, nil
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
		// Not a glob of kind-*: a link may be named n*.
		qs, _ := netdev.Queues(name, kind)
		return max(len(qs), 1)
	}
	return count("rx"), count("tx")
}

// allowedCPUs lists the CPUs the process may run on.
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
