package vmtest

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// IOMMURow is one measurement of TestIOMMU: what forwarding cost the
// guest's IOMMU (strict mode: every unmap is an IOTLB invalidation), per
// 1,000 packets forwarded from A to B.
type IOMMURow struct {
	NIC       string `json:"nic"`
	Forwarder string `json:"forwarder"` // bridge, xdpfwd-copy, xdpfwd-zerocopy, … (-noinline: --inline-max off)
	// Path is "" for A → B through the two NICs, "nic→pod" or "pod→nic"
	// between host A and a pod's veth (testPods).
	Path      string  `json:"path,omitempty"`
	Frame     int     `json:"frame_bytes"`
	Sent      int     `json:"sent"`
	Received  int     `json:"received"`
	MapsPer1K float64 `json:"maps_per_1k"`
	UnmapsPer float64 `json:"unmaps_per_1k"`
	// Pages4KPer1K is the distinct 4 KiB UMEM pages (IOTLB entries in
	// zero-copy) xdpfwd's TX descriptors referenced per 1,000
	// descriptors; the bridge has none.
	Pages4KPer1K float64 `json:"tx_pages_4k_per_1k_desc"`
}

// iommuForwarders are the forwarders TestIOMMU compares: the guest's Linux
// bridge, and xdpfwd in each bind mode with the inline zone on and off.
var iommuForwarders = []iommuForwarder{
	{"bridge", nil},
	{"xdpfwd-copy", []string{"--zerocopy", "off"}},
	{"xdpfwd-copy-noinline", []string{"--zerocopy", "off", "--inline-max", "off"}},
	{"xdpfwd-zerocopy", []string{"--zerocopy", "on"}},
	{"xdpfwd-zerocopy-noinline", []string{"--zerocopy", "on", "--inline-max", "off"}},
}

// testIOMMU measures IOMMU maps and unmaps per 1,000 forwarded packets,
// and checks the seeds' premise where it is a count: zero-copy forwarding
// maps (almost) nothing per packet, the premapped UMEM having been mapped
// once at bind, while copy mode maps about once per packet. The rows go to
// $XDPFWD_IOMMU_OUT (JSON, appended) when it is set: perf's iommu table.
func testIOMMU(t *testing.T, vm *VM) { measureIOMMUs(t, vm, iommuForwarders) }

// testIOMMUZeroCopy measures zero-copy alone (virtio-net without indirect
// descriptors).
func testIOMMUZeroCopy(t *testing.T, vm *VM) {
	measureIOMMUs(t, vm, iommuForwarders[3:4])
}

type iommuForwarder = struct {
	name string
	args []string // nil: the bridge
}

func measureIOMMUs(t *testing.T, vm *VM, forwarders []iommuForwarder) {
	const count = 2000
	var rows []IOMMURow
	defer func() { t.Logf("IOMMU per 1,000 packets forwarded (strict mode):\n%s", IOMMUTable(rows)) }()
	for _, fw := range forwarders {
		for _, frame := range []int{64, 1500} {
			r := measureIOMMU(t, vm, fw.name, fw.args, frame, count)
			rows = append(rows, r)
		}
	}
	byName := map[string]IOMMURow{}
	for _, r := range rows {
		byName[fmt.Sprint(r.Forwarder, r.Frame)] = r
		if r.Received < r.Sent*9/10 {
			t.Errorf("%s at %d B: %d of %d received; the counts need the packets to cross", r.Forwarder, r.Frame, r.Received, r.Sent)
		}
	}
	for _, frame := range []int{64, 1500} {
		zc, cp := byName[fmt.Sprint("xdpfwd-zerocopy", frame)], byName[fmt.Sprint("xdpfwd-copy", frame)]
		if vm.cfg.NIC == Virtio && !vm.cfg.NoIndirectDesc {
			// virtio_ring maps an indirect descriptor table for every
			// packet sent (header and frame are two entries): the
			// count the seeds' premise is about is the one without.
			if zc.MapsPer1K < 500 {
				t.Errorf("virtio-net zero-copy with indirect descriptors at %d B: %.1f maps per 1,000 packets; expected about one per packet (the indirect table)", frame, zc.MapsPer1K)
			}
			continue
		}
		if zc.MapsPer1K > 50 {
			t.Errorf("zero-copy at %d B: %.1f IOMMU maps per 1,000 packets; want the premapped UMEM to need (almost) none", frame, zc.MapsPer1K)
		}
		if cp.Sent == 0 {
			continue // measured zero-copy alone
		}
		if cp.MapsPer1K < 10*zc.MapsPer1K || cp.MapsPer1K < 100 {
			t.Errorf("copy mode at %d B: %.1f maps per 1,000 packets against zero-copy's %.1f; want copy mode to map per packet", frame, cp.MapsPer1K, zc.MapsPer1K)
		}
	}
	if out := os.Getenv("XDPFWD_IOMMU_OUT"); out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		enc := json.NewEncoder(f)
		for _, r := range rows {
			enc.Encode(r)
		}
	}
}

func measureIOMMU(t *testing.T, vm *VM, name string, args []string, frame, count int) IOMMURow {
	t.Helper()
	row := IOMMURow{NIC: string(vm.cfg.NIC), Forwarder: name, Frame: frame, Sent: count}
	var d *Daemon
	if args == nil {
		// STP is off by default: the ports forward at once.
		vm.Run(t, fmt.Sprintf("ip link add br0 type bridge && brctl addif br0 %s && brctl addif br0 %s && ip link set br0 up", NIC0, NIC1), 20*time.Second)
		defer vm.Run(t, "ip link del br0", 20*time.Second)
	} else {
		d = vm.StartXdpfwd(t, append([]string{"--link", NIC0, "--link", NIC1}, args...)...)
	}
	vm.WaitCarrier(t)
	waitPing(t, vm.A, AddrB, 30*time.Second)
	before := vm.IOMMUCounts(t)
	// One flow, paced: the counts are per packet forwarded, not a rate.
	payload := frame - 14 - 20 - 8
	res, err := udpFlowsSized(vm.A, vm.B, []netip.Addr{AddrA}, AddrB, count, payload, 60*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := vm.IOMMUCounts(t).Sub(before)
	row.Received = res[0].received
	if d != nil {
		s := d.Stop(t)
		checkSummary(t, s)
		row.Pages4KPer1K = s.PagesPer1KDesc["4k"]
	}
	if row.Received > 0 {
		row.MapsPer1K = 1000 * float64(c.Maps) / float64(row.Received)
		row.UnmapsPer = 1000 * float64(c.Unmaps) / float64(row.Received)
	}
	return row
}

// IOMMUTable formats rows as the Markdown table perf's README carries.
func IOMMUTable(rows []IOMMURow) string {
	var b strings.Builder
	b.WriteString("| NIC | forwarder | frame | received | IOMMU maps / 1k pkts | unmaps / 1k pkts | TX 4 KiB pages / 1k descs |\n| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		fw := r.Forwarder
		if r.Path != "" {
			fw += ", " + r.Path
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d/%d | %.1f | %.1f | %.1f |\n", r.NIC, fw, r.Frame, r.Received, r.Sent, r.MapsPer1K, r.UnmapsPer, r.Pages4KPer1K)
	}
	return b.String()
}
