// Package linkop is the link half of xdpfwd's control protocol: the wire
// types of `link list`, `link add NAME` (with a pod's MAC and IPs, for
// its port security, and its bandwidth limits) and `link del NAME`, the daemon's
// side of it (Serve, over a Manager) and the client (Dial) that
// `xdpfwd link` and the CNI plugin xdpfwd-cni use.
//
// On the control socket (package control) a client sends one JSON
// Request line, whose "op" field sets it apart from a capture request,
// and gets one JSON Reply line back; it may send further requests on the
// same connection. It owns no links: a Manager does.
package linkop

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/netdev"
)

// The ops. control.ReadOp dispatches on them.
const (
	OpList = "link.list"
	OpAdd  = "link.add"
	OpDel  = "link.del"
)

// IsOp reports whether op is one of this package's.
func IsOp(op string) bool { return op == OpList || op == OpAdd || op == OpDel }

// Request is one line from the client.
type Request struct {
	Op   string `json:"op"`
	Name string `json:"name,omitempty"` // the link, for add and del
	// AddOptions, for add: none from an older client.
	AddOptions
}

// AddOptions are what an add may say about the link beyond its name: the
// port security of a pod's link (a switch's: modes.Switch.SecurePort) and
// its bandwidth limits.
// The CNI plugin gives the pod's MAC and IP addresses; the daemon secures
// the link when it has a MAC and PortSecurity, or else its default
// (xdpfwd run --port-security), says so. An older daemon ignores them.
type AddOptions struct {
	// MAC is the pod's Ethernet address (aa:bb:cc:dd:ee:ff): the only
	// source address the link's frames may carry.
	MAC string `json:"mac,omitempty"`
	// IPs are the pod's IP addresses (without prefix length): the only
	// ones its packets and ARP may come from; none: any.
	IPs []string `json:"ips,omitempty"`
	// PortSecurity turns port security on or off for this link; nil:
	// the daemon's default, which needs MAC.
	PortSecurity *bool `json:"port_security,omitempty"`
	// Bandwidth polices the link (a switch's: modes.Switch.LimitPort);
	// nil: no limit. An older daemon ignores it.
	Bandwidth *Bandwidth `json:"bandwidth,omitempty"`
	// Pod is the pod the link serves (the CNI plugin's K8S_POD_* args),
	// shown wherever the link is; nil: none (a link added by hand). An
	// older daemon ignores it.
	Pod *Pod `json:"pod,omitempty"`
	// VLAN makes the link an access port of a VLAN or a trunk of several
	// (a switch's: modes.VLANs); nil: a port of every VLAN. An older
	// daemon would ignore it, and the link would be in every network: a
	// client asks only a daemon whose list has FeatureVLAN.
	VLAN *VLAN `json:"vlan,omitempty"`
}

// VLAN is a switch port's VLAN membership, as ovs-cni's "vlan" and
// "trunk" give it: Access (1..4094) makes it an access port of that VLAN
// (its frames untagged, in that VLAN alone); Trunk a trunk of the VLANs
// listed (0..4094, 0 the untagged network; its frames tagged).
type VLAN struct {
	Access uint16   `json:"access,omitempty"`
	Trunk  []uint16 `json:"trunk,omitempty"`
}

// MaxVID is the highest VLAN ID (4095 is reserved).
const MaxVID = 4094

// Features a daemon's list says it has (Reply.Features), for what an
// older daemon would ignore rather than refuse.
const (
	// FeatureVLAN: adds with a VLAN (AddOptions.VLAN) are ports of it.
	FeatureVLAN = "vlan"
)

// Bandwidth is a pod's bandwidth limits as CNI's "bandwidth" capability
// gives them (the reference bandwidth plugin's units and meanings): rates
// in bits per second, bursts in bits, 0 for none that way. Ingress is
// what the pod receives, egress what it sends. Each rate goes with a
// burst.
type Bandwidth struct {
	IngressRate  uint64 `json:"ingress_rate,omitempty"`
	IngressBurst uint64 `json:"ingress_burst,omitempty"`
	EgressRate   uint64 `json:"egress_rate,omitempty"`
	EgressBurst  uint64 `json:"egress_burst,omitempty"`
}

// Empty reports whether o says nothing: an add as older clients make it.
func (o AddOptions) Empty() bool {
	return o.MAC == "" && len(o.IPs) == 0 && o.PortSecurity == nil && o.Bandwidth == nil && o.Pod == nil && o.VLAN == nil
}

// Reply is the daemon's answer to one Request.
type Reply struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// BadRequest: the request's fault (the CLI exits 2).
	BadRequest bool `json:"bad_request,omitempty"`
	// Code tells a client's program what went wrong: CodeUnknownLink,
	// CodeNoSuchLink, CodeExists, CodeExistsOther, CodeUnsupported,
	// CodeFull, CodeMTU, CodeMACInUse, CodeMACNoRoom, CodeHandedOver, or
	// empty.
	Code  string `json:"code,omitempty"`
	Mode  string `json:"mode,omitempty"`  // list: the daemon's mode
	Links []Link `json:"links,omitempty"` // list
	// Queues (list) is how many RX and TX queues a link needs to be
	// added: one per worker of the daemon. 0 from a daemon that does not
	// say: one.
	Queues int `json:"queues,omitempty"`
	// AddRefused (list) says why the daemon would refuse any link added
	// now, if it would (its mode takes none, its UMEM is zero-copy, it
	// is stopping); empty: it takes links.
	AddRefused string `json:"add_refused,omitempty"`
	// Health (list) is the daemon's forwarding state, one of the
	// Health constants; empty from a daemon that does not say.
	Health string `json:"health,omitempty"`
	// HealthDetail (list) says why, for a Health other than
	// HealthForwarding: its /healthz text, which names the state
	// ("stalled: worker 0: ...").
	HealthDetail string `json:"health_detail,omitempty"`
	// CPUs (list) are the CPUs the daemon's workers are pinned to;
	// none: not pinned, or a daemon that does not say.
	CPUs []int `json:"cpus,omitempty"`
	// Features (list) are the Feature constants the daemon has.
	Features []string `json:"features,omitempty"`
}

// The daemon's forwarding states (Reply.Health), as its /healthz judges
// them.
const (
	// HealthForwarding: its workers go round and it has links.
	HealthForwarding = "forwarding"
	// HealthNoLinks: it runs and forwards nothing, having no link (a
	// switch whose uplink and pods all left); it takes links.
	HealthNoLinks = "no_links"
	// HealthRebuilding: its forwarder stopped to be built again (a
	// link's queue count changed); link requests wait for the next one.
	HealthRebuilding = "rebuilding"
	// HealthStopping: it is shutting down (SIGTERM, SIGINT): draining,
	// then gone.
	HealthStopping = "stopping"
	// HealthStalled: a worker made no progress for a while with packets
	// waiting on its RX rings.
	HealthStalled = "stalled"
)

// Link is one link in a list reply.
type Link struct {
	Name      string `json:"name"`
	RXPackets uint64 `json:"rx_packets"`
	TXPackets uint64 `json:"tx_packets"`
	// Bind is how its sockets are bound, "zerocopy" or "copy"; Domain the
	// UMEM it shares with the links of its kind ("zerocopy" or "copy",
	// "" when the daemon has one UMEM for all).
	Bind   string `json:"bind,omitempty"`
	Domain string `json:"umem_domain,omitempty"`
	// MAC and IPs are the link's port security, if it has it: the only
	// source MAC (and sender IPs, none: any) its frames may carry.
	MAC string   `json:"mac,omitempty"`
	IPs []string `json:"ips,omitempty"`
	// Bandwidth is the link's limits, if it is policed.
	Bandwidth *Bandwidth `json:"bandwidth,omitempty"`
	// PortState is what became of a secured link's MAC when it is not
	// simply pinned to it: "provisional" (taken over from another link,
	// where it was learned: lost if heard there again) or "revoked"
	// (heard there again: every frame from the link is dropped).
	PortState string `json:"port_state,omitempty"`
	// Pod is the pod the link serves, if its add named one.
	Pod *Pod `json:"pod,omitempty"`
	// VLAN is the link's VLANs, if it is not a port of every VLAN.
	VLAN *VLAN `json:"vlan,omitempty"`
}

// List is what ListLinks returns.
type List struct {
	Mode  string
	Links []Link
	// Queues is how many RX and TX queues a link must have for the
	// daemon to add it (its workers); 0 means one. A CNI plugin creates
	// its veths with as many.
	Queues int
	// AddRefused is why the daemon would refuse any link added now;
	// empty: it takes links.
	AddRefused string
	// Health is the daemon's forwarding state (HealthForwarding...),
	// empty from a daemon that does not say; HealthDetail says why it is
	// not forwarding.
	Health, HealthDetail string
	// CPUs are the CPUs the daemon's workers are pinned to, ascending;
	// empty: not pinned, or a daemon that does not say. A CNI plugin
	// steers its pods' receive processing (RPS) to the others: a veth
	// runs its peer's receive path on the sending CPU, a worker's.
	CPUs []int
	// Features are the Feature constants the daemon has.
	Features []string
}

// Available says why the daemon listed cannot serve a CNI plugin's
// pods now, or nil: it takes links and forwards, or has no link yet to
// forward and takes them (a switch before its first pod), or is
// rebuilding its forwarder (link requests wait for that). Stopping or
// stalled, it is not; one that does not say its health is judged by
// AddRefused alone.
func (l List) Available() error {
	if l.AddRefused != "" {
		return fmt.Errorf("it takes no links now: %s", l.AddRefused)
	}
	switch l.Health {
	case "", HealthForwarding, HealthNoLinks, HealthRebuilding:
		return nil
	}
	if l.HealthDetail != "" {
		return errors.New(l.HealthDetail)
	}
	return errors.New(l.Health)
}

// Has reports whether the list names link.
func (l List) Has(name string) bool {
	_, ok := l.Link(name)
	return ok
}

// Link is the list's link name, if it has it.
func (l List) Link(name string) (Link, bool) {
	for _, k := range l.Links {
		if k.Name == name {
			return k, true
		}
	}
	return Link{}, false
}

// Reply codes, and the errors a Manager returns (wrapped) and a client
// gets back for them.
const (
	CodeUnknownLink = "unknown_link"
	CodeNoSuchLink  = "no_such_link"
	CodeExists      = "exists"
	CodeUnsupported = "unsupported"
	CodeFull        = "full"
	CodeMTU         = "mtu"
	CodeExistsOther = "exists_other"
	CodeMACInUse    = "mac_in_use"
	CodeMACNoRoom   = "mac_no_room"
	CodeHandedOver  = "handed_over"
)

var (
	// ErrUnknownLink: del of a link the daemon does not forward.
	ErrUnknownLink = errors.New("the daemon does not forward this link")
	// ErrNoSuchLink: add of a link the daemon's host (its network
	// namespace) does not have.
	ErrNoSuchLink = errors.New("the host has no such link: none by that name in the daemon's network namespace")
	// ErrExists: add of a link the daemon forwards already.
	ErrExists = errors.New("the daemon forwards this link already")
	// ErrUnsupported: the daemon cannot change its links while it runs.
	ErrUnsupported = errors.New("the daemon cannot add or remove links while it runs")
	// ErrFull: add while the daemon forwards all the links it can
	// (xdpfwd's --max-links).
	ErrFull = errors.New("the daemon's links are all taken")
	// ErrMTU: add of a link whose MTU the daemon's frames cannot hold.
	ErrMTU = errors.New("the link's MTU does not fit the daemon's frames")
	// ErrExistsOther: add of a link the daemon forwards already with
	// other port security or limits than the add asks for. Unlike
	// ErrExists, it is no retry of the add that made it.
	ErrExistsOther = errors.New("the daemon forwards this link already, secured or policed otherwise")
	// ErrMACInUse: add of a pod's link whose MAC is another secured
	// link's, or static on another link.
	ErrMACInUse = errors.New("the pod's MAC is another link's")
	// ErrMACNoRoom: add of a pod's link whose MAC the switch has no room
	// to pin (its table bucket holds other pods' addresses only).
	ErrMACNoRoom = errors.New("the switch has no room to pin the pod's MAC")
	// ErrHandedOver: the daemon handed its datapath to a successor
	// (xdpfwd run --takeover) while the request waited; the successor
	// serves the socket now, and the client asks it (Client does, once).
	ErrHandedOver = errors.New("the daemon handed its datapath to its successor, which serves this socket now")
)

// Refused marks err, a Manager's, as a refusal of the request as it
// stands (the daemon's input error: a link it cannot take), not a
// failure to meet it: the Reply says BadRequest, the client's error is a
// *RequestError, the CLI exits 2 and the CNI plugin gives a definite
// error code, not "try again later". Nil stays nil.
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return &refusedError{err}
}

type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// Mark is err, as it reads, that errors.Is also matches to code (one of
// this package's errors: ErrFull, ErrMTU...): for a Manager whose
// message says more than the sentinel.
func Mark(err, code error) error { return &markedError{err, code} }

type markedError struct{ err, code error }

func (e *markedError) Error() string   { return e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.err, e.code} }

// LinkManager is what a forwarder provides to change its links while it
// runs (fwd.Forwarder.AddLink and RemoveLink).
type LinkManager interface {
	AddLink(name string) error
	RemoveLink(name string) error
	Links() []string
}

// Manager is the daemon's side: what Serve asks.
type Manager interface {
	List() (List, error)
	Add(name string) error
	Del(name string) error
}

// OptionsManager is a Manager that takes an add's options: Serve calls
// AddWith for an add that has any. A plain Manager's Add is given the
// name alone, as an older daemon reads the request.
type OptionsManager interface {
	AddWith(name string, o AddOptions) error
}

// CheckName says what is wrong with a link name, if anything: a Linux
// interface name is 1..15 bytes, not . or .., without '/', ':' or white
// space (netdev.ValidName).
func CheckName(name string) error {
	switch {
	case name == "":
		return errors.New("a link name is required")
	case len(name) > netdev.MaxNameLen:
		return fmt.Errorf("link name %q: longer than %d bytes (IFNAMSIZ)", name, netdev.MaxNameLen)
	case !netdev.ValidName(name):
		return fmt.Errorf("link name %q: not an interface name", name)
	}
	return nil
}

// Timeouts of the protocol: a server waits so long for a request; a
// client so long for an answer (an add attaches a program and opens
// sockets: longer).
const (
	IdleTimeout = 10 * time.Second
	ListTimeout = 5 * time.Second
	AddTimeout  = 30 * time.Second
)

// MaxLine bounds a request line, newline included: an add with a name of
// 15 bytes, a MAC and a few IP addresses is under 512 bytes; 4 KiB leaves
// room for dozens of addresses and is what a connection holds to read
// them (bufio's default).
const MaxLine = 4 << 10

// Serve answers conn's requests from m until the client closes its side
// or stays silent for IdleTimeout. conn may start with a line read
// already (control.ReadOp gives it back). A line longer than MaxLine is
// answered as a bad request and ends the connection; there is no bound
// on how many lines a connection carries.
func Serve(conn net.Conn, m Manager) error {
	defer conn.Close()
	r := bufio.NewReaderSize(conn, MaxLine)
	for {
		conn.SetReadDeadline(time.Now().Add(IdleTimeout))
		line, err := r.ReadSlice('\n') // valid until the next read: used before it
		var req Request
		var rep Reply
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			rep = Reply{Error: fmt.Sprintf("read the link request: longer than %d bytes", MaxLine), BadRequest: true}
		case len(line) == 0 && err != nil:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		default:
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				rep = Reply{Error: fmt.Sprintf("read the link request: %v", jerr), BadRequest: true}
			} else {
				rep = answer(req, m)
			}
		}
		b, _ := json.Marshal(rep)
		conn.SetWriteDeadline(time.Now().Add(IdleTimeout))
		if _, err := conn.Write(append(b, '\n')); err != nil {
			return err
		}
		if err != nil {
			return nil
		}
	}
}

func answer(req Request, m Manager) Reply {
	var err error
	switch req.Op {
	case OpList:
		l, err := m.List()
		if err != nil {
			return failure(err)
		}
		if l.Links == nil {
			l.Links = []Link{}
		}
		return Reply{OK: true, Mode: l.Mode, Links: l.Links, Queues: l.Queues, AddRefused: l.AddRefused,
			Health: l.Health, HealthDetail: l.HealthDetail, CPUs: l.CPUs, Features: l.Features}
	case OpAdd, OpDel:
		if cerr := CheckName(req.Name); cerr != nil {
			return Reply{Error: req.Op + ": " + cerr.Error(), BadRequest: true}
		}
		om, withOpts := m.(OptionsManager)
		switch {
		case req.Op == OpAdd && !req.AddOptions.Empty() && withOpts:
			err = om.AddWith(req.Name, req.AddOptions)
		case req.Op == OpAdd:
			err = m.Add(req.Name)
		default:
			err = m.Del(req.Name)
		}
	default:
		return Reply{Error: fmt.Sprintf("unknown op %q: want %s, %s or %s", req.Op, OpList, OpAdd, OpDel), BadRequest: true}
	}
	if err != nil {
		return failure(err)
	}
	return Reply{OK: true}
}

func failure(err error) Reply {
	var rf *refusedError
	rep := Reply{Error: err.Error(), BadRequest: errors.As(err, &rf)}
	switch {
	case errors.Is(err, ErrFull):
		rep.Code, rep.BadRequest = CodeFull, true
	case errors.Is(err, ErrMTU):
		rep.Code, rep.BadRequest = CodeMTU, true
	case errors.Is(err, ErrNoSuchLink):
		rep.Code, rep.BadRequest = CodeNoSuchLink, true
	case errors.Is(err, ErrUnknownLink):
		rep.Code, rep.BadRequest = CodeUnknownLink, true
	case errors.Is(err, ErrExistsOther):
		rep.Code, rep.BadRequest = CodeExistsOther, true
	case errors.Is(err, ErrExists):
		rep.Code, rep.BadRequest = CodeExists, true
	case errors.Is(err, ErrMACInUse):
		rep.Code, rep.BadRequest = CodeMACInUse, true
	case errors.Is(err, ErrMACNoRoom):
		rep.Code, rep.BadRequest = CodeMACNoRoom, true
	case errors.Is(err, ErrUnsupported):
		rep.Code = CodeUnsupported
	case errors.Is(err, ErrHandedOver):
		rep.Code = CodeHandedOver
	}
	return rep
}
