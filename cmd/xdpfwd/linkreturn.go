// --wait-for-links in the modes that take links while running: links the
// kernel deleted are added back when they return.

package main

import (
	"log/slog"
	"maps"
	"net"
	"slices"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// returnPoll is how often a daemon waiting for its links (--wait-for-links)
// looks for the links the kernel deleted under it.
const returnPoll = 250 * time.Millisecond

// addBackReturning adds back to f, in a mode whose links come and go, each
// of given (the --link links) that the kernel deleted while forwarded
// (fwd.Forwarder.Vanished) once it exists again: an uplink deleted and
// made again (a bond rebuilt, a driver reloaded) is forwarded again with
// --wait-for-links, as a link missing at start is waited for. A link
// removed on purpose (link del, a reload) is not vanished, and stays out;
// a pod's link is not given, and its CNI plugin adds it. It returns the
// function that stops it.
//
// A link whose queue count changed (ethtool -L) and that the forwarder
// could not add back on its new queues is vanished too, a pod's as well
// as a given one: it is tried each poll and added back once it can be.
// A failure is logged once for each reason, not each poll.
func addBackReturning(f *fwd.Forwarder, given []string, logger *slog.Logger) (stop func()) {
	failed := map[string]string{} // link → the error last logged
	return every(returnPoll, func() {
		out := f.LinksOut()
		for _, name := range slices.Sorted(maps.Keys(out)) {
			// A pod's link the kernel deleted is not given: a link of
			// that name again is another pod's, which its CNI plugin
			// adds. One that stayed on the node, out because it could
			// not be added back on its new queues, is tried whoever
			// added it.
			if out[name] == fwd.OutDeleted && !slices.Contains(given, name) {
				continue
			}
			if _, err := net.InterfaceByName(name); err != nil {
				continue // not back yet
			}
			if err := f.AddLink(name); err != nil {
				if failed[name] != err.Error() {
					failed[name] = err.Error()
					logger.Error("link back, not added again: retrying", "link", name, "err", err)
				}
				continue
			}
			delete(failed, name)
			logger.Info("link back: added again (--wait-for-links)", "link", name)
		}
	})
}
