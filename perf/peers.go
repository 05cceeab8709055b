package main

// Peers: AF_XDP forwarders built by others, run between the same
// two root ends as every contender: DPDK's testpmd on its net_af_xdp PMD
// (testpmd.go) and Open vSwitch's userspace datapath with afxdp ports
// (ovsafxdp.go). Both forward port to port at L2, like the bridge rows.
// They come from Debian packages, not from perf's builds: where one is not
// installed, its row says "not run: " and why.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/perf/internal/xdpprog"
)

// requirePeersEnv, set to 1, makes a missing peer a test failure instead of
// a skip (.ci/install installs both).
const requirePeersEnv = "XDPFWD_REQUIRE_PEERS"

// peerNames are the peers' contender names.
var peerNames = []string{"testpmd", "ovs-afxdp"}

// lookTools finds every tool in PATH, or says which are missing and what
// installs them.
func lookTools(install string, tools ...string) (map[string]string, error) {
	paths := map[string]string{}
	var missing []string
	for _, t := range tools {
		p, err := exec.LookPath(t)
		if err != nil {
			// Daemons live in sbin, which a non-login PATH may lack.
			for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
				if st, serr := os.Stat(filepath.Join(dir, t)); serr == nil && st.Mode()&0o111 != 0 {
					p, err = filepath.Join(dir, t), nil
					break
				}
			}
		}
		if err != nil {
			missing = append(missing, t)
			continue
		}
		paths[t] = p
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s not installed (Debian: apt-get install %s)", strings.Join(missing, ", "), install)
	}
	return paths, nil
}

// runTool runs a peer's control tool, killed after limit, and returns
// its output. A tool that bounds itself (ovs-vsctl --timeout) is given
// more than its own bound, so that it says why it gave up.
func runTool(ctx context.Context, limit time.Duration, env []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// rootEnds is what a peer may change on the root ends and not put back:
// the promiscuous flag (testpmd sets it and leaves it set), and an XDP
// program attached through netlink (both attach theirs so, and a peer that
// had to be killed does not remove it).
type rootEnds struct {
	links   []string
	promisc map[string]bool // IFF_PROMISC before the peer started
}

func snapshotEnds(links ...string) (*rootEnds, error) {
	r := &rootEnds{links: links, promisc: map[string]bool{}}
	for _, n := range links {
		l, err := netlink.LinkByName(n)
		if err != nil {
			return nil, fmt.Errorf("link %s: %w", n, err)
		}
		r.promisc[n] = l.Attrs().RawFlags&unix.IFF_PROMISC != 0
	}
	return r, nil
}

// restore clears IFF_PROMISC where the peer set it (reported in d, not an
// error: testpmd always leaves it) and removes any XDP program the peer left
// (an error: it should have removed it itself).
func (r *rootEnds) restore(who string, d map[string]any) error {
	var errs, restored []string
	for _, n := range r.links {
		l, err := netlink.LinkByName(n)
		if err != nil {
			errs = append(errs, fmt.Sprintf("link %s: %v", n, err))
			continue
		}
		if l.Attrs().RawFlags&unix.IFF_PROMISC != 0 && !r.promisc[n] {
			if err := netlink.SetPromiscOff(l); err != nil {
				errs = append(errs, fmt.Sprintf("promiscuous mode off on %s: %v", n, err))
			} else {
				restored = append(restored, n)
			}
		}
		if on, id, _ := xdpprog.Attached(n); on {
			derr := xdpprog.DetachNetlink(n)
			if on2, _, _ := xdpprog.Attached(n); on2 {
				errs = append(errs, fmt.Sprintf("%s left XDP program %d on %s and it could not be removed: %v", who, id, n, derr))
			} else {
				errs = append(errs, fmt.Sprintf("%s left XDP program %d on %s (removed)", who, id, n))
			}
		}
	}
	if len(restored) > 0 && d != nil {
		d["promisc_restored"] = strings.Join(restored, ",")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// xdpMode is how link's XDP program is attached: native, generic,
// offload, multi or "" for none.
func xdpMode(link string) string {
	l, err := netlink.LinkByName(link)
	if err != nil || l.Attrs().Xdp == nil || !l.Attrs().Xdp.Attached {
		return ""
	}
	// XDP_ATTACHED_* of linux/if_link.h.
	switch l.Attrs().Xdp.AttachMode {
	case 1:
		return "native"
	case 2:
		return "generic"
	case 3:
		return "offload"
	case 4:
		return "multi"
	}
	return fmt.Sprint(l.Attrs().Xdp.AttachMode)
}
