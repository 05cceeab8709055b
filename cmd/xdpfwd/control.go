// The daemon's control socket (controlSocket): made by `xdpfwd run`, kept
// across forwarder rebuilds, it hands each connection to capture.Serve or
// to linkop.Serve with daemonLinks, the daemon's linkop.Manager.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/control/handover"
	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// controlSocket is run's control endpoint: made once, with the first
// forwarder, and kept while the forwarder is rebuilt (--wait-for-links, a
// queue count change); captures reach the current one.
type controlSocket struct {
	srv  *control.Server
	hub  atomic.Pointer[capture.Hub]
	fw   atomic.Pointer[fwd.Forwarder]
	mode string // for link list, and to refuse link ops in xconnect
	log  *slog.Logger
	// sw is the switch of --mode switch (nil in the others), whose ports
	// links added with a pod's MAC are (portsec.go); portSecurity is
	// --port-security on: secure them unless the add says otherwise.
	sw           *modes.Switch
	portSecurity bool
	// pods are the pods the links added over the socket serve (pods.go).
	pods podTable

	// linkOps is held by each link change made over the socket and by a
	// reload's read and change of the links (reloader.lockLinks), and
	// while the state file is written; and guards given.
	linkOps sync.Mutex
	// state is the file of the links added over the socket
	// (linkstate.go), "" without a socket; given are the links of the
	// command line and the config file (--link), which it leaves out:
	// those at start, then those a reload left forwarded (configLinks).
	state string
	given []string

	// stopping is set once the daemon is going for good (a signal, or
	// a failure it exits on): no forwarder comes after the current one,
	// and link list says so (health).
	stopping atomic.Bool

	// The handover (takeover.go). handedOver: a successor serves the
	// socket and forwards now. metricsLn is --metrics' listener and
	// stopMetrics what stops serving it, to hand it over; handovers the
	// datapath's handovers so far and lastPause the last one's.
	// inherited is the listener a predecessor handed over (ino its
	// file's), for serve.
	handedOver atomic.Bool
	// pidFile is --pid-file, which a handover rewrites.
	pidFile      pidFile
	metricsLn    *net.TCPListener
	stopMetrics  func()
	handovers    uint64
	lastPause    time.Duration
	inherited    *os.File
	inheritedIno uint64

	mu   sync.Mutex
	next chan struct{} // closed when fw changes (forwarder)
	// rebuildWait bounds how long a link request waits for the next
	// forwarder (daemonLinks.change); 0: defaultRebuildWait.
	rebuildWait time.Duration
}

// configLinks makes links, a reload's --link links, the ones given: the
// state file leaves out those f forwards. It releases the port security
// and limits of those of dropped, the links the reload removed, that f
// no longer forwards, and writes the state file anew. linkOps is held.
//
// A link the file lists is the file's, whoever added it first: one
// added over the socket that the file then lists is no longer written
// to the state file (a restart adds it from the file), and a reload that
// drops it from the file removes it (reloadLinks), as any of the file's.
// One the file lists that could not be added (it does not exist yet) is
// not given: added over the socket meanwhile, it is the socket's until a
// reload finds it forwarded.
func (cs *controlSocket) configLinks(f *fwd.Forwarder, links, dropped []string) {
	now := f.Links()
	cs.given = slices.DeleteFunc(slices.Clone(links), func(n string) bool { return !slices.Contains(now, n) })
	for _, n := range dropped {
		if !slices.Contains(now, n) {
			cs.releasePort(n, nil)
		}
	}
	if err := cs.saveLinks(f, cs.given); err != nil && cs.log != nil {
		cs.log.Error("link state not written after a reload", "err", err)
	}
}

// isGiven reports whether link name is a --link link (given).
func (cs *controlSocket) isGiven(name string) bool {
	cs.linkOps.Lock()
	defer cs.linkOps.Unlock()
	return slices.Contains(cs.given, name)
}

// setForwarder points the socket's link requests at f (nil: none) and
// wakes those waiting for the one after a stopped forwarder.
func (cs *controlSocket) setForwarder(f *fwd.Forwarder) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.fw.Store(f)
	if cs.next != nil {
		close(cs.next)
	}
	cs.next = make(chan struct{})
}

// forwarder is the current forwarder, a channel closed when another (or
// none) takes its place, and how long to wait for that.
func (cs *controlSocket) forwarder() (*fwd.Forwarder, <-chan struct{}, time.Duration) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.next == nil {
		cs.next = make(chan struct{})
	}
	wait := cs.rebuildWait
	if wait <= 0 {
		wait = defaultRebuildWait
	}
	return cs.fw.Load(), cs.next, wait
}

// setRebuildWait sets how long link requests wait for the next
// forwarder (tests).
func (cs *controlSocket) setRebuildWait(d time.Duration) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.rebuildWait = d
}

// serve points the socket at f, creating it the first time. A socket the
// user named must work; the default one is best effort (a warning).
func (cs *controlSocket) serve(path string, links []string, f *fwd.Forwarder, logger *slog.Logger) error {
	cs.hub.Store(f.Capture())
	cs.setForwarder(f)
	if cs.srv != nil {
		return nil
	}
	if cs.inherited != nil {
		return cs.serveInherited(f, logger)
	}
	if path == "off" {
		return nil
	}
	explicit := path != ""
	if !explicit {
		path = control.DefaultPath(links[0])
	}
	srv, err := control.Listen(path)
	if err != nil {
		if !explicit {
			logger.Warn("no control socket: xdpfwd capture cannot reach this daemon", "err", err)
			return nil
		}
		if errors.Is(err, control.ErrInUse) {
			return usageError{fmt.Sprintf("--control: %v", err)}
		}
		return err
	}
	cs.srv, cs.log = srv, logger
	logger.Info("control socket", "path", srv.Path())
	// Before the socket serves: a link added back is one the plugin
	// finds forwarded.
	cs.state, cs.given = linkStateFile(srv.Path()), slices.Clone(links)
	cs.restoreLinks(f, links, logger)
	go srv.Serve(cs.handle)
	return nil
}

// inherit makes the socket the one a predecessor served at path, from its
// listener (its file's inode ino), with the links its settings gave and
// the datapath's handovers so far: serve serves it.
func (cs *controlSocket) inherit(path string, ino uint64, ln *os.File, given []string, handovers uint64) {
	cs.inherited, cs.inheritedIno, cs.state = ln, ino, linkStateFile(path)
	cs.given, cs.handovers = slices.Clone(given), handovers
}

// serveInherited serves the socket a predecessor handed over: no link is
// added back from the state file (the predecessor's are forwarded
// already), which is written anew.
func (cs *controlSocket) serveInherited(f *fwd.Forwarder, logger *slog.Logger) error {
	path := strings.TrimSuffix(cs.state, ".links")
	srv, err := control.ListenFile(path, cs.inheritedIno, cs.inherited)
	cs.inherited = nil
	if err != nil {
		return err
	}
	cs.srv, cs.log = srv, logger
	logger.Info("control socket", "path", srv.Path(), "inherited", true)
	go srv.Serve(cs.handle)
	// Off the handover's pause, which runs until the successor's first
	// round: writing the file took 1-4 ms of it on a busy machine. A link
	// request served meanwhile writes it under linkOps too, so the last
	// write is the state's.
	go func() {
		cs.linkOps.Lock()
		defer cs.linkOps.Unlock()
		if err := cs.saveLinks(f, cs.given); err != nil {
			logger.Error("link state not written", "err", err)
		}
	}()
	return nil
}

// close removes the socket; captures still running get their totals first
// (the forwarder ended them), or are cut after a grace period.
func (cs *controlSocket) close() {
	cs.hub.Store(nil)
	cs.setForwarder(nil)
	if cs.srv != nil {
		cs.srv.Close(2 * time.Second)
		// What clients were denied, if any: a sign of too many at once
		// (busy) or of ones that hold a place without a request.
		if b, e := cs.srv.Busy(), cs.srv.Evicted(); b+e+cs.srv.Refused() > 0 {
			cs.log.Warn("control socket: connections closed unserved", "busy", b, "evicted", e, "other_users", cs.srv.Refused(), "max_conns", control.MaxConns)
		}
	}
}

// handle serves one connection of the control socket: a link request
// (its first line's "op") or, as ever, a capture.
func (cs *controlSocket) handle(c net.Conn) {
	op, rc, err := control.ReadOp(c, 10*time.Second)
	if err != nil {
		// Too long, too slow: said, for a client still reading.
		control.RefuseRequest(c, err)
		c.Close()
		return
	}
	if linkop.IsOp(op) {
		linkop.Serve(rc, daemonLinks{cs})
		return
	}
	if op == handover.Op {
		cs.handOver(c, rc)
		return
	}
	if op != "" && op != "capture" {
		defer rc.Close()
		b, _ := json.Marshal(linkop.Reply{Error: fmt.Sprintf("unknown op %q: want capture (no op), %s, %s or %s", op, linkop.OpList, linkop.OpAdd, linkop.OpDel), BadRequest: true})
		rc.Write(append(b, '\n'))
		return
	}
	capture.Serve(rc, cs.hub.Load())
}

// daemonLinks is the daemon's linkop.Manager: the current forwarder's
// links. Adding and removing need the forwarder to be a
// linkop.LinkManager (Forwarder.AddLink and RemoveLink); until
// it is, they are refused, never pretended.
type daemonLinks struct{ cs *controlSocket }

var errNoForwarder = errors.New("no forwarder is running")

func (d daemonLinks) List() (linkop.List, error) {
	f := d.cs.fw.Load()
	if f == nil {
		return linkop.List{}, errNoForwarder
	}
	plan := f.Plan()
	l := linkop.List{Mode: d.cs.mode, Queues: plan.Queues, CPUs: workerCPUs(plan)}
	// Why an add would be refused, for the CNI plugin's STATUS; not
	// while the forwarder is stopped for a rebuild, which adds wait for
	// (change).
	if _, err := d.manager(f, "add", "LINK"); err != nil {
		l.AddRefused = err.Error()
	} else if err := f.LinksChangeable(); err != nil && !f.Stopping() {
		l.AddRefused = err.Error()
	}
	// The plugin's STATUS: a daemon draining or stalled is not
	// available, though it answers.
	l.Health, l.HealthDetail = health(f, d.cs.stopping.Load())
	var ports map[string]modes.Port
	var limits map[string]modes.Limits
	var vlans map[string]modes.VLANs
	if sw := d.cs.sw; sw != nil {
		ports, limits, vlans = sw.Ports(), sw.PortLimits(), sw.PortVLANs()
		l.Features = []string{linkop.FeatureVLAN}
	}
	for i, name := range f.Links() {
		if name == "" {
			continue // a removed link's index
		}
		st := f.LinkStats(i)
		k := linkop.Link{Name: name, RXPackets: st.RXPackets, TXPackets: st.TXPackets, Bind: st.BindMode, Domain: st.Domain}
		if p, ok := ports[name]; ok {
			if st := d.cs.sw.PortStatus(name); st != modes.PortPinned {
				k.PortState = st.String()
			}
			k.MAC = p.MAC.String()
			for _, a := range p.IPs {
				k.IPs = append(k.IPs, a.String())
			}
		}
		if b, ok := limits[name]; ok {
			k.Bandwidth = &linkop.Bandwidth{IngressRate: b.IngressRate, IngressBurst: b.IngressBurst, EgressRate: b.EgressRate, EgressBurst: b.EgressBurst}
		}
		if p, ok := d.cs.pods.of(name); ok {
			k.Pod = &p
		}
		if v, ok := vlans[name]; ok {
			k.VLAN = &linkop.VLAN{Access: v.Access, Trunk: v.Trunk}
		}
		l.Links = append(l.Links, k)
	}
	return l, nil
}

// workerCPUs are the CPUs p's workers are pinned to, ascending: worker q
// runs on CPUs[q % len(CPUs)], so with fewer workers than CPUs listed the
// rest are free, and the CNI plugin may steer pods' receive work there.
// None when the workers are not pinned.
func workerCPUs(p fwd.Plan) []int {
	if len(p.CPUs) == 0 {
		return nil
	}
	var cpus []int
	for q := range max(p.Queues, 1) {
		if c := p.CPUs[q%len(p.CPUs)]; !slices.Contains(cpus, c) {
			cpus = append(cpus, c)
		}
	}
	slices.Sort(cpus)
	return cpus
}

func (d daemonLinks) Add(name string) error {
	return d.change("add", name, linkop.LinkManager.AddLink)
}

func (d daemonLinks) Del(name string) error {
	return d.change("del", name, func(lm linkop.LinkManager, name string) error {
		err := lm.RemoveLink(name)
		d.cs.releasePort(name, err)
		return err
	})
}

// defaultRebuildWait bounds how long a link request waits for the
// forwarder being rebuilt: well within the client's linkop.AddTimeout,
// so that it hears why.
const defaultRebuildWait = 10 * time.Second

// change makes a link change on the current forwarder.
//
// A forwarder that has stopped (its Run returned: a link's queue count
// changed, or --wait-for-links waits for a link, and daemon.run builds the
// next) refuses every change as unsupported, which the CNI plugin would
// take for a definite refusal; the request waits for the next forwarder
// instead and is made on it, or fails after a while (defaultRebuildWait) as one to try
// again (no code: the CNI plugin's "try again later", 11). A change
// that the forwarder refuses as the input's fault (fwd.InputError:
// --max-links taken, an MTU its frames cannot hold) is a refusal
// (linkop.Refused): `xdpfwd link` exits 2 and the CNI plugin gives a
// definite code.
func (d daemonLinks) change(op, name string, do func(linkop.LinkManager, string) error) error {
	start := time.Now()
	for {
		f, next, wait := d.cs.forwarder()
		if f == nil {
			return fmt.Errorf("link %s %s: %w", op, name, errNoForwarder)
		}
		lm, err := d.manager(f, op, name)
		if err == nil {
			d.cs.linkOps.Lock()
			if d.cs.handedOver.Load() {
				d.cs.linkOps.Unlock()
				return fmt.Errorf("link %s %s: %w", op, name, errHandedOver)
			}
			err = do(lm, name)
			d.cs.pods.keep(f.Links())
			if err == nil {
				if serr := d.cs.saveLinks(f, d.cs.given); serr != nil && d.cs.log != nil {
					d.cs.log.Error("link state not written: this link is not added back if the daemon restarts", "link", name, "err", serr)
				}
			}
			d.cs.linkOps.Unlock()
		}
		if err == nil || !f.Stopping() {
			if fwd.IsInputError(err) {
				return linkop.Refused(err)
			}
			return err
		}
		t := time.NewTimer(time.Until(start.Add(wait)))
		select {
		case <-next:
			t.Stop()
		case <-t.C:
			return fmt.Errorf("link %s %s: the forwarder is being rebuilt, and the next was not ready within %v: try again", op, name, wait)
		}
	}
}

func (d daemonLinks) manager(f *fwd.Forwarder, op, name string) (linkop.LinkManager, error) {
	if d.cs.mode == "xconnect" {
		return nil, fmt.Errorf("link %s %s: xconnect mode forwards exactly its two links: %w", op, name, linkop.ErrUnsupported)
	}
	if !linksAtRuntime(d.cs.mode) {
		return nil, fmt.Errorf("link %s %s: %s mode's links are fixed at start (switch, reflect and sink take links while running): %w", op, name, d.cs.mode, linkop.ErrUnsupported)
	}
	return linkManager(f, op, name)
}

// linkManager is f as a linkop.LinkManager, or the error that says which
// capability it lacks.
func linkManager(f *fwd.Forwarder, op, name string) (linkop.LinkManager, error) {
	if lm, ok := any(f).(linkop.LinkManager); ok {
		return lm, nil
	}
	return nil, fmt.Errorf("link %s %s: this xdpfwd's forwarder has no AddLink/RemoveLink (links fixed at start): restart it with the link in --link: %w", op, name, linkop.ErrUnsupported)
}
