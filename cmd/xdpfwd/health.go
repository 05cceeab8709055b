// The daemon's health, one judgement for /healthz and for link list.

package main

import (
	"maps"
	"slices"
	"strings"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
)

// health is what the daemon tells of its forwarding, one judgement for
// /healthz and for the control socket's link list (which the CNI
// plugin's STATUS reads): its state, one of linkop's Health constants,
// and, for any but forwarding, why (/healthz's text). stopping says the
// daemon is going for good (a signal, or a failure it exits on): a
// stopped forwarder is then not one being rebuilt. Stalled workers are
// measured from one call to the next (fwd.Forwarder.Stalled): the
// probes and the plugin's calls share that measure.
func health(f *fwd.Forwarder, stopping bool) (state, detail string) {
	switch {
	case stopping:
		return linkop.HealthStopping, "stopping: draining the workers, then exiting"
	case f.Stopping():
		return linkop.HealthRebuilding, "rebuilding the forwarder: link requests wait for the next"
	}
	if s := f.Stalled(stallAfter); len(s) > 0 {
		return linkop.HealthStalled, "stalled: " + strings.Join(s, "; ")
	}
	state, detail = linkop.HealthForwarding, ""
	if f.LiveLinks() == 0 {
		// Every link left (a node's uplink and pods): the daemon runs,
		// takes links, and forwards nothing until then.
		state, detail = linkop.HealthNoLinks, "no links: forwarding nothing until a link is added (xdpfwd link add)"
	}
	// Links on the node but out of the forwarder against the daemon's
	// will (not added back on their new queues): said, the state left
	// as it is, the others being served (--wait-for-links adds them back
	// when it can). Links the kernel deleted are not: a pod's goes with
	// its namespace, every day.
	out := f.LinksOut()
	var s []string
	for _, name := range slices.Sorted(maps.Keys(out)) {
		if out[name] != fwd.OutDeleted {
			s = append(s, name+": "+out[name])
		}
	}
	if len(s) > 0 {
		if detail != "" {
			detail += "; "
		}
		detail += "links out: " + strings.Join(s, "; ")
	}
	return state, detail
}
