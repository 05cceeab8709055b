package topo

// NewNS creates a bare network namespace "xdpfwd-<id>-<suffix>", pinned
// under /run/netns, with only its loopback link (down); for rigs that bring
// their own links, such as package vmtest's taps. Remove it with Close.
func NewNS(suffix string) (*NS, error) {
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	return newNS("xdpfwd-" + id + "-" + suffix)
}

// Close removes a namespace made by NewNS; the kernel destroys it, and the
// links inside it, once nothing else holds it. Safe to call twice.
func (ns *NS) Close() error {
	if ns == nil {
		return nil
	}
	return ns.close()
}
