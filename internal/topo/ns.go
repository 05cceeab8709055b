package topo

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where iproute2 keeps named namespaces. Pinning ours there keeps
// them alive without a process and makes leftovers visible to `ip netns`.
const netnsDir = "/run/netns"

// NS is a named network namespace created by this package.
type NS struct {
	Name string

	// mu guards fd and path: Do and handle read fd while Close may be
	// closing it, and a closed fd number can be reused by an unrelated file.
	mu   sync.RWMutex
	fd   netns.NsHandle // open handle, -1 once closed
	path string         // bind mount under netnsDir, "" once removed
}

// Do runs fn on an OS thread switched into ns and switches the thread back
// afterwards. Sockets created inside fn belong to ns for their whole life and
// may be used from any goroutine once fn returns. Goroutines started by fn do
// not run in ns.
//
// fn runs on a fresh goroutine so the caller's own thread, which may already
// be locked, is never moved. If fn panics, the panic is re-raised in the
// caller's goroutine so its deferred cleanup still runs.
func (ns *NS) Do(fn func() error) error {
	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		defer func() { done <- r }()

		// Unlock only once the thread is back where it came from: a
		// goroutine that exits locked makes the runtime discard its thread,
		// so a thread stranded in ns is never reused for unrelated work.
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			r.err = fmt.Errorf("get current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := ns.enter(); err != nil {
			runtime.UnlockOSThread()
			r.err = err
			return
		}
		func() {
			defer func() {
				if v := recover(); v != nil {
					r.panicked, r.value = true, v
				}
			}()
			r.err = fn()
		}()
		if err := netns.Set(orig); err != nil {
			if r.err == nil {
				r.err = fmt.Errorf("leave namespace %s: %w", ns.Name, err)
			}
			return
		}
		runtime.UnlockOSThread()
	}()
	r := <-done
	if r.panicked {
		panic(r.value)
	}
	return r.err
}

// Path is the namespace's bind mount, which `ip netns` and setns(2)
// callers open; empty once closed.
func (ns *NS) Path() string {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	return ns.path
}

func (ns *NS) enter() error {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.fd < 0 {
		return fmt.Errorf("enter namespace %s: closed", ns.Name)
	}
	if err := netns.Set(ns.fd); err != nil {
		return fmt.Errorf("enter namespace %s: %w", ns.Name, err)
	}
	return nil
}

// handle returns a netlink handle whose socket lives in ns. Netlink sockets
// are bound to the namespace they were created in, so no thread switching is
// needed to use it.
func (ns *NS) handle() (*netlink.Handle, error) {
	ns.mu.RLock()
	defer ns.mu.RUnlock()
	if ns.fd < 0 {
		return nil, fmt.Errorf("namespace %s: closed", ns.Name)
	}
	h, err := netlink.NewHandleAt(ns.fd, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in namespace %s: %w", ns.Name, err)
	}
	return h, nil
}

var netnsDirOnce struct {
	sync.Mutex
	done bool
}

// prepareNetnsDir makes netnsDir a shared mount point, as `ip netns add`
// does, so namespace mounts propagate to mount namespaces created later and a
// later `ip netns add` does not re-bind the directory over our mounts (which
// would leave our bind mounts shadowed and the namespaces unremovable).
func prepareNetnsDir() error {
	netnsDirOnce.Lock()
	defer netnsDirOnce.Unlock()
	if netnsDirOnce.done {
		return nil
	}
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", netnsDir, err)
	}
	err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		// Not a mount point yet: bind it onto itself first.
		if err := unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind mount %s: %w", netnsDir, err)
		}
		err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make %s shared: %w", netnsDir, err)
	}
	netnsDirOnce.done = true
	return nil
}

// newNS creates a network namespace pinned at netnsDir/name. It fails if the
// name is taken rather than adopting somebody else's namespace.
func newNS(name string) (*NS, error) {
	if err := prepareNetnsDir(); err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	path := filepath.Join(netnsDir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return nil, fmt.Errorf("create namespace %s: %w", name, err)
	}
	f.Close()
	ns := &NS{Name: name, fd: -1, path: path}

	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread is left in the new namespace and the
		// runtime terminates it when this goroutine exits.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		if err := unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind mount %s: %w", path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return nil, errors.Join(fmt.Errorf("create namespace %s: %w", name, err), ns.close())
	}
	fd, err := netns.GetFromPath(path)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open namespace %s: %w", name, err), ns.close())
	}
	ns.fd = fd
	return ns, nil
}

// close drops our handle and the bind mount. The kernel destroys the
// namespace, and the links inside it, once nothing else holds it; sockets a
// caller still has open keep it alive until they are closed.
func (ns *NS) close() error {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.fd >= 0 {
		ns.fd.Close()
		ns.fd = -1
	}
	if ns.path == "" {
		return nil
	}
	// EINVAL: the file exists but the mount never happened (half-built).
	if err := unix.Unmount(ns.path, unix.MNT_DETACH); err != nil &&
		!errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount namespace %s: %w", ns.Name, err)
	}
	if err := os.Remove(ns.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove namespace %s: %w", ns.Name, err)
	}
	ns.path = ""
	return nil
}

// HardwareAddr returns the MAC address of link ifname inside ns.
func (ns *NS) HardwareAddr(ifname string) (net.HardwareAddr, error) {
	var mac net.HardwareAddr
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err == nil {
			mac = ifi.HardwareAddr
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s in %s: %w", ifname, ns.Name, err)
	}
	return mac, nil
}
