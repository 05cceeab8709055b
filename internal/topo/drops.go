package topo

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
)

// KernelDrops is what the kernel counted dropped on a link and in its
// namespace's UDP: where a frame lost outside the forwarder went.
type KernelDrops struct {
	// RX and TX are the link's rx_dropped and tx_dropped. A veth counts
	// in its tx_dropped the frames its peer's NAPI ring had no room for
	// (the peer's XDP program not run in time), and in rx_dropped those
	// its own XDP could not redirect.
	RX, TX uint64
	// UDPRcvbuf are the namespace's UDP datagrams dropped for a full
	// receive buffer (RcvbufErrors).
	UDPRcvbuf uint64
}

func (k KernelDrops) String() string {
	return fmt.Sprintf("rx_dropped %d, tx_dropped %d, udp RcvbufErrors %d", k.RX, k.TX, k.UDPRcvbuf)
}

// Drops reads the kernel's drop counters of link ifname in ns; nil ns is
// the root namespace.
func Drops(ns *NS, ifname string) (KernelDrops, error) {
	var k KernelDrops
	read := func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("link %s: %w", ifname, err)
		}
		if s := l.Attrs().Statistics; s != nil {
			k.RX, k.TX = s.RxDropped, s.TxDropped
		}
		// thread-self: /proc/self/net is the main thread's namespace.
		k.UDPRcvbuf, err = snmpCounter("/proc/thread-self/net/snmp", "Udp:", "RcvbufErrors")
		return err
	}
	if ns == nil {
		return k, read()
	}
	return k, ns.Do(read)
}

// snmpCounter reads one counter of a /proc/net/snmp-style file: a header
// line of names after prefix, then a line of values.
func snmpCounter(path, prefix, name string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || fields[0] != prefix {
			continue
		}
		if names == nil {
			names = fields
			continue
		}
		for i, n := range names {
			if n == name && i < len(fields) {
				return strconv.ParseUint(fields[i], 10, 64)
			}
		}
		break
	}
	return 0, fmt.Errorf("%s: no %s %s", path, prefix, name)
}
