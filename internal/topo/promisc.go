package topo

import (
	"testing"

	"github.com/vishvananda/netlink"
)

// Promiscuity is link name's promiscuity count (IFLA_PROMISCUITY): what
// every promiscuous membership and IFF_PROMISC add up to, in the calling
// thread's namespace.
func Promiscuity(t testing.TB, name string) int {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l.Attrs().Promisc
}
