// The links added over the control socket, kept in a file beside it so
// that a restarted daemon adds them back.

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/xdpfwd/xdpfwd/control"
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
//
// The socket may be put where other users can write too (--control in
// /tmp), and what the file lists is added, as root, with the ports it
// says: so it is read only if the daemon could have written it
// (readLinkState), never through a symlink, never a FIFO or a device that
// would block or never end, its user's alone, bounded. A file that is not
// is logged and left, and the next save replaces it: the save creates a
// file of its own beside it and renames it over the name, which replaces
// a planted symlink, not its target.

// maxLinkStateSize bounds the file read at start. Each link's entry is no
// longer than the add request that made it (control.MaxRequest, which
// bounds its IPs), so a file of fwd.MaxLinks links is at most 16 MiB;
// twice that leaves the names and the JSON around them room. The
// daemon's own files are far smaller (64 pods with a MAC, two IPs and
// limits each: 15 KiB).
const maxLinkStateSize = 2 * fwd.MaxLinks * control.MaxRequest

// untrustedError: a state file the daemon cannot have written.
type untrustedError struct{ error }

func untrusted(format string, a ...any) error {
	return untrustedError{fmt.Errorf(format, a...)}
}

// readLinkState reads the state file at path: an error wrapping
// os.ErrNotExist when there is none, an untrustedError when it is not a
// regular file of the daemon's user's alone (owned by its effective uid,
// writable by no one else, one name) of at most maxLinkStateSize bytes.
// It never follows a symlink and never blocks on what it opens.
func readLinkState(path string) ([]byte, error) {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		// ELOOP is O_NOFOLLOW's symlink; ENXIO a socket's.
		if fi, lerr := os.Lstat(path); lerr == nil && !fi.Mode().IsRegular() {
			return nil, untrusted("%s is %s, not a regular file", path, fileKind(fi.Mode()))
		}
		return nil, err
	}
	defer fh.Close()
	// The file opened, not the name: what was checked is what is read.
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	uid := uint32(os.Geteuid())
	switch {
	case !fi.Mode().IsRegular():
		return nil, untrusted("%s is %s, not a regular file", path, fileKind(fi.Mode()))
	case !ok:
		return nil, untrusted("%s: no owner to check", path)
	case st.Uid != uid:
		return nil, untrusted("%s is owned by uid %d, not %d", path, st.Uid, uid)
	case fi.Mode().Perm()&0o022 != 0:
		return nil, untrusted("%s is writable by group or others (mode %04o)", path, fi.Mode().Perm())
	case st.Nlink != 1:
		// Another file's too: the daemon's own has the one name its
		// rename gave it.
		return nil, untrusted("%s is a hard link (%d names)", path, st.Nlink)
	case fi.Size() > maxLinkStateSize:
		return nil, untrusted("%s is %d bytes, more than the %d a link state file can be", path, fi.Size(), maxLinkStateSize)
	}
	b, err := io.ReadAll(io.LimitReader(fh, maxLinkStateSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxLinkStateSize { // grew since the fstat
		return nil, untrusted("%s is more than %d bytes, more than the %d a link state file can be", path, len(b)-1, maxLinkStateSize)
	}
	return b, nil
}

// fileKind names a file's type for an error.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "a symbolic link (never followed)"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	}
	return fmt.Sprintf("of mode %v", m)
}

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
	// Pods are the pods those that serve one serve, by name. An older
	// file has none.
	Pods map[string]linkop.Pod `json:"pods,omitempty"`
	// VLANs are the VLANs of those that have them, by name: a link added
	// back is in the networks it was in. An older file has none.
	VLANs map[string]linkop.VLAN `json:"vlans,omitempty"`
}

// portState is a modes.Port as the file keeps it, and whether its port
// was revoked (its MAC heard on another link): restored, a port is
// provisional (modes.Switch.RestorePort), or revoked again.
type portState struct {
	MAC     string   `json:"mac"`
	IPs     []string `json:"ips,omitempty"`
	Revoked bool     `json:"revoked,omitempty"`
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
	var vlans map[string]modes.VLANs
	if cs.sw != nil {
		ports, limits, vlans = cs.sw.Ports(), cs.sw.PortLimits(), cs.sw.PortVLANs()
	}
	pods := cs.pods.all(false)
	for _, n := range f.Links() {
		if n != "" && !slices.Contains(given, n) {
			doc.Added = append(doc.Added, n)
			if p, ok := pods[n]; ok {
				if doc.Pods == nil {
					doc.Pods = map[string]linkop.Pod{}
				}
				doc.Pods[n] = p
			}
			if v, ok := vlans[n]; ok {
				if doc.VLANs == nil {
					doc.VLANs = map[string]linkop.VLAN{}
				}
				doc.VLANs[n] = linkop.VLAN{Access: v.Access, Trunk: v.Trunk}
			}
			if p, ok := ports[n]; ok {
				if doc.Ports == nil {
					doc.Ports = map[string]portState{}
				}
				ps := portState{MAC: p.MAC.String(), Revoked: cs.sw.PortStatus(n) == modes.PortRevoked}
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
	// A name of its own (O_EXCL: nothing planted is followed), renamed
	// over the file: whatever was there, a symlink included, is
	// replaced, not written through.
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
// anew with what f then forwards. A missing file is a first start; one
// that cannot be trusted or read adds nothing, and is left to the next
// save.
func (cs *controlSocket) restoreLinks(f *fwd.Forwarder, given []string, logger *slog.Logger) {
	if cs.state == "" {
		return
	}
	dir := filepath.Dir(cs.state)
	if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		logger.Warn("control socket directory is writable by group or others and not sticky: other users can remove or replace the socket and its link state file",
			"dir", dir, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	b, err := readLinkState(cs.state)
	var doc linkStateDoc
	switch {
	case errors.Is(err, os.ErrNotExist):
		return
	case errors.As(err, new(untrustedError)):
		logger.Error("link state untrusted: the links it lists are not added back", "file", cs.state, "err", err)
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
		if slices.Contains(f.Links(), name) {
			// Not the daemon's writing. Added again it would fail, and
			// that failure release the port security it was added with.
			logger.Error("link added before the restart: listed twice in the link state file, added back once", "link", name, "file", cs.state)
			continue
		}
		if _, err := net.InterfaceByName(name); err != nil {
			logger.Info("link added before the restart is gone: not added back", "link", name)
			continue
		}
		if lv, ok := doc.VLANs[name]; ok {
			// In its VLANs before it is added (and before its port
			// security: a pod's address is pinned in its VLAN); a link
			// that cannot be is not added in every network.
			_, secure := doc.Ports[name]
			on := secure // as it was: a secured trunk is refused
			v, _, err := cs.vlansFor(linkop.AddOptions{VLAN: &lv, PortSecurity: &on}, secure)
			if err == nil {
				err = cs.sw.SetVLANs(name, v)
			}
			if err != nil {
				logger.Error("link added before the restart: not added back, its VLANs cannot be restored", "link", name, "err", err)
				continue
			}
		}
		if ps, ok := doc.Ports[name]; ok {
			// Secured before it is added, as it was: a link that cannot
			// be is not added unsecured. Its pin is provisional: the
			// switch has heard nothing of the network yet.
			on := true // asked for: refused outside switch mode
			p, _, err := cs.portFor(linkop.AddOptions{MAC: ps.MAC, IPs: ps.IPs, PortSecurity: &on})
			if err == nil {
				err = cs.sw.RestorePort(name, p, ps.Revoked)
			}
			if err != nil {
				cs.releasePort(name, nil)
				logger.Error("link added before the restart: not added back, its port security cannot be restored", "link", name, "err", err)
				continue
			}
		}
		if b, ok := doc.Limits[name]; ok {
			// Policed before it is added, as it was; not added
			// unpoliced. No limits (the daemon never writes those) are
			// none, in any mode.
			l, err := cs.limitsFor(linkop.AddOptions{Bandwidth: &b})
			if err == nil && !l.IsZero() {
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
		var pod *linkop.Pod
		if p, ok := doc.Pods[name]; ok {
			if err := p.Check(); err != nil {
				logger.Error("link added before the restart: its pod is not restored", "link", name, "err", err)
			} else {
				pod = &p
			}
		}
		cs.pods.set(name, pod)
		logger.Info("link added before the restart: added back", "link", name, "file", cs.state, "pod", podAttr(pod))
	}
	if err := cs.saveLinks(f, given); err != nil {
		logger.Error("link state not written", "err", err)
	}
}
