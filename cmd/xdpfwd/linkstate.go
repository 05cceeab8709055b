// The links added over the control socket, kept in a file beside it so
// that a restarted daemon adds them back.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// The links added over the control socket (a node's pods, by the CNI
// plugin) are kept in a file beside the socket, SOCKET.links, rewritten
// after each change, so that a daemon that died (kill -9, an OOM kill, a
// liveness probe's restart) and is started again forwards its pods again:
// their veths outlive it, and nothing else would add them back. The file
// lives where the socket does (/run: a reboot, which takes the veths,
// takes it too), belongs to the daemon that holds the socket, and lists
// names, with the port security of those that have it (a pod's MAC and
// IPs) and the bandwidth limits of those that have them: a link it names
// that no longer exists is skipped at start.

// linkStateFile is the file of the links added over the socket at path.
func linkStateFile(socket string) string { return socket + ".links" }

// linkStateDoc is the file's content.
type linkStateDoc struct {
	// Added are the links added over the control socket, in index order.
	Added []string `json:"added"`
	// Ports are the port security of those that have it (a pod's MAC
	// and IPs), by name: a link added back is secured as it was. An
	// older file has none.
	Ports map[string]portState `json:"ports,omitempty"`
	// Limits are the bandwidth limits of those that have them, by name
	// (the add's own wire form): a link added back is policed as it
	// was. An older file has none.
	Limits map[string]linkop.Bandwidth `json:"limits,omitempty"`
}

// portState is a modes.Port as the file keeps it.
type portState struct {
	MAC string   `json:"mac"`
	IPs []string `json:"ips,omitempty"`
}

// saveLinks writes the links f forwards beyond given (the --link links)
// to the state file, atomically (a rename), when the socket has one.
func (cs *controlSocket) saveLinks(f *fwd.Forwarder, given []string) error {
	if cs.state == "" {
		return nil
	}
	doc := linkStateDoc{Added: []string{}}
	var ports map[string]modes.Port
	var limits map[string]modes.Limits
	if cs.sw != nil {
		ports, limits = cs.sw.Ports(), cs.sw.PortLimits()
	}
	for _, n := range f.Links() {
		if n != "" && !slices.Contains(given, n) {
			doc.Added = append(doc.Added, n)
			if p, ok := ports[n]; ok {
				if doc.Ports == nil {
					doc.Ports = map[string]portState{}
				}
				ps := portState{MAC: p.MAC.String()}
				for _, a := range p.IPs {
					ps.IPs = append(ps.IPs, a.String())
				}
				doc.Ports[n] = ps
			}
			if l, ok := limits[n]; ok {
				if doc.Limits == nil {
					doc.Limits = map[string]linkop.Bandwidth{}
				}
				doc.Limits[n] = linkop.Bandwidth{IngressRate: l.IngressRate, IngressBurst: l.IngressBurst, EgressRate: l.EgressRate, EgressBurst: l.EgressBurst}
			}
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(cs.state), filepath.Base(cs.state)+".*")
	if err != nil {
		return fmt.Errorf("link state %s: %w", cs.state, err)
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	_, werr := tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), cs.state)
	}
	if werr != nil {
		return fmt.Errorf("link state %s: %w", cs.state, werr)
	}
	return nil
}

// restoreLinks adds to f the links the state file lists that exist (a
// daemon started again after it died), logs each, and writes the file
// anew with what f then forwards. A missing file is a first start.
func (cs *controlSocket) restoreLinks(f *fwd.Forwarder, given []string, logger *slog.Logger) {
	if cs.state == "" {
		return
	}
	b, err := os.ReadFile(cs.state)
	var doc linkStateDoc
	switch {
	case errors.Is(err, os.ErrNotExist):
		return
	case err == nil:
		err = json.Unmarshal(b, &doc)
	}
	if err != nil {
		logger.Error("link state unreadable: links added before a restart are not added back", "file", cs.state, "err", err)
		return
	}
	for _, name := range doc.Added {
		if slices.Contains(given, name) {
			continue
		}
		if _, err := net.InterfaceByName(name); err != nil {
			logger.Info("link added before the restart is gone: not added back", "link", name)
			continue
		}
		if ps, ok := doc.Ports[name]; ok {
			// Secured before it is added, as it was: a link that cannot
			// be is not added unsecured.
			on := true // asked for: refused outside switch mode
			p, _, err := cs.portFor(linkop.AddOptions{MAC: ps.MAC, IPs: ps.IPs, PortSecurity: &on})
			if err == nil {
				err = cs.sw.SecurePort(name, p)
			}
			if err != nil {
				logger.Error("link added before the restart: not added back, its port security cannot be restored", "link", name, "err", err)
				continue
			}
		}
		if b, ok := doc.Limits[name]; ok {
			// Policed before it is added, as it was; not added
			// unpoliced.
			l, err := cs.limitsFor(linkop.AddOptions{Bandwidth: &b})
			if err == nil {
				err = cs.sw.LimitPort(name, l)
			}
			if err != nil {
				cs.releasePort(name, nil)
				logger.Error("link added before the restart: not added back, its bandwidth limits cannot be restored", "link", name, "err", err)
				continue
			}
		}
		if err := f.AddLink(name); err != nil {
			cs.releasePort(name, nil)
			logger.Error("link added before the restart: not added back", "link", name, "err", err)
			continue
		}
		logger.Info("link added before the restart: added back", "link", name, "file", cs.state)
	}
	if err := cs.saveLinks(f, given); err != nil {
		logger.Error("link state not written", "err", err)
	}
}
