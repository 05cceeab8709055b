package fwd_test

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// linkXDP is the id and attach mode (nl.XDP_ATTACHED_*) of link's XDP
// program; id 0 if none.
func linkXDP(t *testing.T, link string) (id, mode uint32) {
	t.Helper()
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	if x := l.Attrs().Xdp; x != nil && (x.Attached || x.ProgId != 0) {
		return x.ProgId, x.AttachMode
	}
	return 0, 0
}

// attachForeign attaches a plain XDP_PASS program to link through netlink
// in the mode flags say, as another tool would; cleanup detaches it.
func attachForeign(t *testing.T, link string, flags int) uint32 {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "foreign",
		Type:         ebpf.XDP,
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 2), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close() // the attachment holds its own reference
	l, err := netlink.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetXdpFdWithFlags(l, prog.FD(), flags); err != nil {
		t.Fatalf("attach foreign program to %s (flags %#x): %v", link, flags, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(link); err == nil {
			netlink.LinkSetXdpFdWithFlags(l, -1, flags)
		}
	})
	id, _ := linkXDP(t, link)
	return id
}

// TestForceRestoresForeignOnFailure: New with Force detaches a foreign
// program to attach its own; when a later step fails (zero-copy demanded
// on veth, refused after the programs are attached), the foreign program,
// the same one, is back on the link in the mode it was attached in.
func TestForceRestoresForeignOnFailure(t *testing.T) {
	for _, m := range []struct {
		name  string
		flags int
		mode  uint32
	}{
		{"generic", unix.XDP_FLAGS_SKB_MODE, nl.XDP_ATTACHED_SKB},
		{"native", unix.XDP_FLAGS_DRV_MODE, nl.XDP_ATTACHED_DRV},
	} {
		t.Run(m.name, func(t *testing.T) {
			p := newPair(t, topo.Options{})
			foreign := attachForeign(t, p.LinkB, m.flags)
			if foreign == 0 {
				t.Fatal("foreign program not visible through netlink")
			}
			f, err := fwd.New(fwd.Config{Links: []string{p.LinkA, p.LinkB}, Force: true, ZeroCopy: xsk.ZeroCopyOn})
			if err == nil {
				f.Close()
				t.Fatal("New with zero-copy on veth succeeded")
			}
			if !errors.Is(err, xsk.ErrZeroCopyUnsupported) {
				t.Fatalf("New: %v, want ErrZeroCopyUnsupported", err)
			}
			if id, _ := linkXDP(t, p.LinkA); id != 0 {
				t.Errorf("%s carries program %d after the failed New, want none", p.LinkA, id)
			}
			id, mode := linkXDP(t, p.LinkB)
			if id != foreign || mode != m.mode {
				t.Fatalf("%s carries program %d (attach mode %d) after the failed New, want the foreign program %d back (mode %d)", p.LinkB, id, mode, foreign, m.mode)
			}
		})
	}
}
