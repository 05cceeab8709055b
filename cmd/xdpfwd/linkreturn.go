package main

import (
	"log/slog"
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
func addBackReturning(f *fwd.Forwarder, given []string, logger *slog.Logger) (stop func()) {
	return every(returnPoll, func() {
		for _, name := range f.Vanished() {
			if !slices.Contains(given, name) {
				continue
			}
			if _, err := net.InterfaceByName(name); err != nil {
				continue // not back yet
			}
			if err := f.AddLink(name); err != nil {
				logger.Error("link back, not added again: retrying", "link", name, "err", err)
				continue
			}
			logger.Info("link back: added again (--wait-for-links)", "link", name)
		}
	})
}
