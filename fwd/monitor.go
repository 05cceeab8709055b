package fwd

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/xdpfwd/xdpfwd/linearize"
)

// ErrLinkGone is returned by Run when one of the links is deleted (or its
// namespace goes away) while forwarding.
var ErrLinkGone = errors.New("link deleted")

// ErrQueuesChanged is returned by Run when a link's RX or TX queue count
// changes while forwarding (ethtool -L): the sockets no longer cover every
// queue, so the forwarder must be built again (the daemon does so).
var ErrQueuesChanged = errors.New("link queue count changed")

// queueCheckInterval is how often the monitor compares the links' queue
// counts with the plan: a channel change sends no netlink event.
const queueCheckInterval = time.Second

// linkHealth is what the monitor knows of one link.
type linkHealth struct {
	downs  atomic.Uint64 // times it went down
	downNS atomic.Int64  // total time down, completed intervals
	downAt atomic.Int64  // unix ns it went down; 0 while up
}

// monitor follows every link through the environment (netlink) until ctx
// is done. A link that goes down and up is logged with the gap and counted
// (forwarding resumes by itself: the sockets and programs stay bound); a
// link that is deleted is removed, and one whose queue count changed is
// added again on its new queues, when links may change (links.go: a
// Handler, copy mode); else the first ends the run with ErrLinkGone, the
// second with ErrQueuesChanged. A link renamed is followed under its new
// name (its ifindex is the link). When links are added or removed
// (rewatch) it follows the links as they are then.
func (f *Forwarder) monitor(ctx context.Context, cancel context.CancelCauseFunc) {
	for ctx.Err() == nil {
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			select {
			case <-f.linkOps.rewatch:
				stop()
			case <-wctx.Done():
			}
		}()
		err := f.watch(wctx, ctx, cancel)
		stop()
		<-done
		if err != nil && ctx.Err() == nil {
			f.plan.Logger.Warn("link monitor unavailable: link down/up, deletion and queue count changes will not be reported", "err", err)
			select {
			case <-f.linkOps.rewatch:
			case <-ctx.Done():
			}
		}
	}
}

// watch is one Watch of the links there are now, until wctx is done.
func (f *Forwarder) watch(wctx, ctx context.Context, cancel context.CancelCauseFunc) error {
	f.linkOps.mu.Lock()
	var infos []LinkInfo
	var index []int // Watch's position → link index
	for i, l := range f.links {
		if l.name != "" {
			infos = append(infos, l.info())
			index = append(index, i)
		}
	}
	f.linkOps.mu.Unlock()
	return f.env.Watch(wctx, infos, func(ev LinkEvent) {
		if ev.Kind == LinkWatchError && ctx.Err() == nil {
			f.plan.Logger.Warn("link monitor", "err", ev.Err)
		}
		if wctx.Err() != nil || ev.Link < 0 || ev.Link >= len(index) {
			return
		}
		f.linkOps.mu.Lock()
		defer f.linkOps.mu.Unlock()
		i := index[ev.Link]
		if f.links[i].name != infos[ev.Link].Name {
			return // removed (and its index maybe reused) since the watch began
		}
		l := f.links[i]
		switch ev.Kind {
		case LinkGone:
			if f.linkFixed(i) == nil {
				f.plan.Logger.Warn("link deleted while forwarding: removed", "link", l.name)
				f.removeLink(i, true)
				f.linkOut(l.name, OutDeleted)
				f.watchChanged()
				return
			}
			f.plan.Logger.Error("link deleted while forwarding", "link", l.name)
			cancel(fmt.Errorf("%w: %s", ErrLinkGone, l.name))
		case LinkQueues:
			if ev.RXQueues == l.rxQueues && ev.TXQueues == l.txQueues {
				return
			}
			err := fmt.Errorf("%w: %s has %d RX and %d TX queues, was %d and %d", ErrQueuesChanged, l.name, ev.RXQueues, ev.TXQueues, l.rxQueues, l.txQueues)
			if f.linkFixed(i) == nil {
				f.readdLink(i, err)
				return
			}
			f.plan.Logger.Error("link queue count changed while forwarding: packets on queues without a socket would reach the kernel's stack; rebuilding", "err", err)
			cancel(err)
		case LinkRenamed:
			f.renameLink(i, ev.Name)
		case LinkState:
			f.linkState(i, ev)
		}
	})
}

// renameLink follows link i under its new name: the same ifindex, its
// programs and sockets bound as they were, so it is forwarded as before
// and named as the kernel names it now (link list, stats; a capture
// under way goes on recording it, as tcpdump would). linkOps.mu is held.
func (f *Forwarder) renameLink(i int, name string) {
	old := f.links[i].name
	f.teardown.mu.Lock()
	f.links[i].name = name
	f.teardown.mu.Unlock()
	f.capture.RenameLink(i, name)
	f.plan.Logger.Warn("link renamed while forwarding: forwarded under its new name", "link", old, "name", name, "index", i)
	// The watch follows links by name too: begin it again on the new one.
	f.watchChanged()
}

// readdLink takes link i out and adds it back, on the queues it has now
// (why says what changed): its sockets must cover every RX queue. The
// other links and the workers run on; a link that cannot be added back
// (fewer queues than the workers) stays out, logged, and is out as a
// deleted one is (Vanished, LinksOut): a daemon that waits for its
// links adds it back once it can be (its channels back up), and the
// health says it is out meanwhile. linkOps.mu is held.
func (f *Forwarder) readdLink(i int, why error) {
	name := f.links[i].name
	f.plan.Logger.Warn("link queue count changed while forwarding: adding it again on its new queues", "link", name, "err", why)
	f.removeLink(i, false)
	if err := f.addLink(name); err != nil {
		f.plan.Logger.Error("link queue count changed: not added back, its traffic goes to the kernel's stack", "link", name, "err", err)
		f.linkOut(name, "not added back on its new queues: "+err.Error())
	}
	f.watchChanged()
}

// OutDeleted is LinksOut's reason for a link the kernel deleted.
const OutDeleted = "deleted"

// linkOut records link name as out of the forwarder against its will,
// and why. linkOps.mu is held.
func (f *Forwarder) linkOut(name, why string) {
	if f.linkOps.vanished == nil {
		f.linkOps.vanished = map[string]string{}
	}
	f.linkOps.vanished[name] = why
}

// linkState records link i's operational state from a monitor's event.
func (f *Forwarder) linkState(i int, ev LinkEvent) {
	h := &f.health[i]
	if mtu := ev.MTU; mtu != f.links[i].mtu {
		fits := mtu+maxFrameOverhead <= f.plan.FrameSize || f.plan.MultiBuffer && framesPerPacket(mtu, f.plan.FrameSize) <= linearize.MaxDescs
		f.plan.Logger.Warn("link MTU changed while forwarding", "link", f.links[i].name,
			"from", f.links[i].mtu, "to", mtu, "frames_fit", fits)
		if !fits {
			f.plan.Logger.Warn("frames longer than a frame buffer will be dropped (rx_dropped), and with multi-buffer those of more than 18 frames (rx_too_many_frags); restart with a larger --frame-size or --multi-buffer",
				"link", f.links[i].name, "frame_size", f.plan.FrameSize, "frames_per_packet", framesPerPacket(mtu, f.plan.FrameSize))
		}
		f.links[i].mtu = mtu
	}
	up := ev.Up
	now := time.Now().UnixNano()
	switch at := h.downAt.Load(); {
	case !up && at == 0:
		h.downAt.Store(now)
		h.downs.Add(1)
		f.plan.Logger.Warn("link down: its traffic stops until it comes back", "link", f.links[i].name, "oper_state", ev.State)
	case up && at != 0:
		gap := time.Duration(now - at)
		h.downNS.Add(int64(gap))
		h.downAt.Store(0)
		f.plan.Logger.Info("link up again: forwarding resumes", "link", f.links[i].name, "down_for", gap.Round(time.Millisecond).String())
	}
}

const unixFlagUp = 1 // net.FlagUp

// downTime returns how long link i has been down in total, the current
// outage included.
func (h *linkHealth) downTime() time.Duration {
	d := h.downNS.Load()
	if at := h.downAt.Load(); at != 0 {
		d += time.Now().UnixNano() - at
	}
	return time.Duration(d)
}
