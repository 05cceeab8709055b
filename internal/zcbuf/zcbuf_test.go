package zcbuf_test

import (
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/zcbuf"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestBuffer: the buffer each driver programs from a pool's frames, as
// its source computes it.
func TestBuffer(t *testing.T) {
	for _, tc := range []struct {
		driver          string
		frame, headroom int
		want            int
	}{
		{"igb", 2048, 256, 1024}, // 1792 >> 10 << 10: the truncation seen in the VM
		{"igb", 4096, 256, 3072},
		{"igb", 2048, 0 + 256 + 64, 1024},
		{"igc", 2048, 256, 1024},
		{"ixgbe", 2048, 256, 1024},
		{"ixgbe", 4096, 256, 3072},
		{"i40e", 2048, 256, 1792},
		{"ice", 4096, 256, 3840},
		{"mlx5_core", 2048, 256, 1792},
		{"virtio_net", 2048, 256, 1792},
	} {
		d, ok := zcbuf.Lookup(tc.driver)
		if !ok {
			t.Fatalf("%s not in the table", tc.driver)
		}
		if got := d.Buffer(tc.frame, tc.headroom); got != tc.want {
			t.Errorf("%s, %d-byte frames, headroom %d: buffer %d, want %d", tc.driver, tc.frame, tc.headroom, got, tc.want)
		}
	}
	if _, ok := zcbuf.Lookup("veth"); ok {
		t.Error("veth in the table: it has no zero-copy")
	}
}

// TestDecide: the frame size and bind mode chosen for links of each
// driver and MTU, from the frame size and zero-copy mode asked for.
func TestDecide(t *testing.T) {
	igb := func(mtu int) []zcbuf.Link {
		return []zcbuf.Link{{Name: "eth0", Driver: "igb", MTU: mtu}, {Name: "eth1", Driver: "igb", MTU: mtu}}
	}
	auto, on, off := xsk.ZeroCopyAuto, xsk.ZeroCopyOn, xsk.ZeroCopyOff
	for _, tc := range []struct {
		name      string
		links     []zcbuf.Link
		frameSize int // 0: not given
		zc        xsk.ZeroCopy
		wantFrame int
		wantCopy  bool
		reason    string // in Reason ("" : Reason empty)
		err       string // in the error ("": none)
	}{
		{"igb default auto: 4096", igb(1500), 0, auto, 4096, false,
			"igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024; link eth0 needs 1518 (MTU 1500 + 18)", ""},
		{"igb default on: 4096", igb(1500), 0, on, 4096, false, "2048-byte frames give 1024", ""},
		{"igb default off: untouched", igb(1500), 0, off, 2048, false, "", ""},
		{"igb 2048 on: refused", igb(1500), 2048, on, 2048, false, "",
			"--frame-size 2048 with --zerocopy on: igb programs receive buffers in 1 KiB units, 2048-byte frames give 1024; link eth0 needs 1518 (MTU 1500 + 18); use --frame-size 4096"},
		{"igb 2048 auto: copy", igb(1500), 2048, auto, 2048, true, "--frame-size 4096 keeps zero-copy", ""},
		{"igb 2048 off: copy as asked", igb(1500), 2048, off, 2048, false, "", ""},
		{"igb 4096 on: fits", igb(1500), 4096, on, 4096, false, "", ""},
		{"igb small MTU fits 2048", igb(1000), 0, auto, 2048, false, "", ""},
		{"igb MTU 1006 exactly fits 1024", igb(1006), 0, on, 2048, false, "", ""},
		{"igb MTU 1007 does not", igb(1007), 0, on, 4096, false, "needs 1025", ""},
		{"igb MTU 3054 fits 4096", igb(3054), 0, on, 4096, false, "needs 3072", ""},
		{"igb jumbo auto: copy", igb(9000), 0, auto, 2048, true,
			"link eth0 MTU 9000 needs 9018-byte receive buffers; igb programs receive buffers in 1 KiB units, at most 3072 with 4096-byte frames", ""},
		{"igb jumbo on: refused", igb(9000), 0, on, 2048, false, "", "--zerocopy on: link eth0 MTU 9000 needs 9018-byte receive buffers; igb programs receive buffers in 1 KiB units, at most 3072 with 4096-byte frames, and igb takes no multi-buffer in zero-copy; use --zerocopy auto or off (copy mode), or an MTU of at most 3054"},
		{"igb jumbo 4096 on: refused", igb(9000), 4096, on, 4096, false, "", "an MTU of at most 3054"},
		{"ixgbe default: 4096", []zcbuf.Link{{Name: "p0", Driver: "ixgbe", MTU: 1500}, {Name: "p1", Driver: "ixgbe", MTU: 1500}}, 0, auto, 4096, false, "ixgbe programs receive buffers in 1 KiB units", ""},
		{"one igb among virtio: 4096", []zcbuf.Link{{Name: "v0", Driver: "virtio_net", MTU: 1500}, {Name: "e1", Driver: "igb", MTU: 1500}}, 0, auto, 4096, false, "link e1 needs 1518", ""},
		{"virtio 2048 fits", []zcbuf.Link{{Name: "v0", Driver: "virtio_net", MTU: 1500}, {Name: "v1", Driver: "virtio_net", MTU: 1500}}, 2048, on, 2048, false, "", ""},
		{"i40e jumbo: multi-buffer", []zcbuf.Link{{Name: "f0", Driver: "i40e", MTU: 9000}, {Name: "f1", Driver: "ice", MTU: 9000}}, 0, on, 2048, false, "", ""},
		{"mlx5 jumbo on: refused", []zcbuf.Link{{Name: "m0", Driver: "mlx5_core", MTU: 9000}, {Name: "m1", Driver: "mlx5_core", MTU: 1500}}, 0, on, 2048, false, "", "mlx5_core"},
		{"mlx5 MTU 3822 fits 4096", []zcbuf.Link{{Name: "m0", Driver: "mlx5_core", MTU: 3822}, {Name: "m1", Driver: "mlx5_core", MTU: 1500}}, 0, on, 4096, false,
			"mlx5_core programs receive buffers of the frame size less the headroom, 2048-byte frames give 1792; link m0 needs 3840", ""},
		{"igb without zero-copy (before 6.14): untouched", []zcbuf.Link{{Name: "e0", Driver: "igb", MTU: 1500, NoZeroCopy: true, ZCMaxSegs: 0}, {Name: "e1", Driver: "igb", MTU: 1500, NoZeroCopy: true, ZCMaxSegs: 0}}, 2048, on, 2048, false, "", ""},
		{"igb the kernel says takes 4 segments: multi-buffer", []zcbuf.Link{{Name: "e0", Driver: "igb", MTU: 1500, NoZeroCopy: false, ZCMaxSegs: 4}, {Name: "e1", Driver: "igb", MTU: 1500, NoZeroCopy: false, ZCMaxSegs: 4}}, 2048, on, 2048, false, "", ""},
		{"igb the kernel says takes 1 segment: 4096", []zcbuf.Link{{Name: "e0", Driver: "igb", MTU: 1500, NoZeroCopy: false, ZCMaxSegs: 1}, {Name: "e1", Driver: "igb", MTU: 1500, NoZeroCopy: false, ZCMaxSegs: 1}}, 0, auto, 4096, false, "link e0 needs 1518", ""},
		{"i40e the kernel says takes 1 segment: jumbo refused", []zcbuf.Link{{Name: "f0", Driver: "i40e", MTU: 9000, NoZeroCopy: false, ZCMaxSegs: 1}, {Name: "f1", Driver: "i40e", MTU: 1500, NoZeroCopy: false, ZCMaxSegs: 5}}, 0, on, 2048, false, "", "link f0 MTU 9000 needs 9018-byte receive buffers; i40e programs receive buffers of the frame size less the headroom, at most 3840"},
		{"unknown driver untouched", []zcbuf.Link{{Name: "x0", Driver: "veth", MTU: 9000}, {Name: "x1", Driver: "", MTU: 1500}}, 0, on, 2048, false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := zcbuf.Decide(tc.links, tc.frameSize, tc.zc, zcbuf.XDPHeadroom)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("error %v, want none", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			case err != nil:
				return
			}
			if d.FrameSize != tc.wantFrame || d.Copy != tc.wantCopy {
				t.Errorf("frame %d copy %v, want frame %d copy %v (reason %q)", d.FrameSize, d.Copy, tc.wantFrame, tc.wantCopy, d.Reason)
			}
			if tc.reason == "" && d.Reason != "" || !strings.Contains(d.Reason, tc.reason) {
				t.Errorf("reason %q, want one containing %q", d.Reason, tc.reason)
			}
		})
	}
}
