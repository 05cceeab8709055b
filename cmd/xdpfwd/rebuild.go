package main

import (
	"errors"
	"log/slog"
	"slices"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
)

// keptLinks carries a forwarder's links over to the one cmdRun builds
// after it stopped (a link's queue count changed; a link came back with
// --wait-for-links): the rebuilt forwarder forwards the links the last
// one did, not those of the start-up Config. Links added while running
// (`xdpfwd link add`, the CNI plugin, a reload) are added again, those
// removed (`link del`, a reload, deleted by the kernel) stay removed, and
// an added one that no longer exists is forgotten, with a log line.
type keptLinks struct {
	// had is the links of the last forwarder as it stopped, in index
	// order; nil before the first was built.
	had []string
}

// record notes the links f forwards, as it stopped.
func (k *keptLinks) record(f *fwd.Forwarder) {
	k.had = slices.DeleteFunc(f.Links(), func(s string) bool { return s == "" })
	if k.had == nil {
		k.had = []string{}
	}
}

// start is the links to build the next forwarder with: links (the
// Config's) but those the last forwarder no longer had. The first link
// cannot be removed, so it is always there.
func (k *keptLinks) start(links []string) []string {
	if k.had == nil {
		return links
	}
	return slices.DeleteFunc(slices.Clone(links), func(s string) bool { return !slices.Contains(k.had, s) })
}

// restore adds to f, built from start(links), the links the last
// forwarder had beyond them, in the order they had, and logs each that
// is forgotten: gone from the system, or refused.
func (k *keptLinks) restore(f *fwd.Forwarder, links []string, logger *slog.Logger) {
	var kept []string
	for _, name := range k.had {
		if slices.Contains(links, name) {
			kept = append(kept, name)
			continue
		}
		switch err := f.AddLink(name); {
		case err == nil, errors.Is(err, linkop.ErrExists):
			kept = append(kept, name)
			logger.Info("link added while running kept by the rebuilt forwarder", "link", name)
		case errors.Is(err, fwd.ErrUnknownLink):
			logger.Warn("link added while running is gone: forgotten by the rebuilt forwarder", "link", name)
		default:
			logger.Error("link added while running not added to the rebuilt forwarder: forgotten", "link", name, "err", err)
		}
	}
	if k.had != nil {
		k.had = kept
	}
}
