package vmtest

import (
	"strings"
	"testing"
	"time"
)

// TestBoot boots each NIC model and checks the guest sees both NICs with
// the expected driver, behind the IOMMU.
func TestBoot(t *testing.T) {
	for _, nic := range []NIC{IGB, Virtio} {
		t.Run(string(nic), func(t *testing.T) {
			start := time.Now()
			vm := Start(t, Config{NIC: nic})
			t.Logf("%s guest up in %v", nic, time.Since(start).Round(time.Millisecond))
			out := vm.Run(t, "for i in eth0 eth1; do basename $(readlink /sys/class/net/$i/device/driver); done; ls /sys/class/iommu", 20*time.Second)
			t.Logf("guest: %s", out)
			want := map[NIC]string{IGB: "igb", Virtio: "virtio_net"}[nic]
			if strings.Count(out, want) < 2 {
				t.Fatalf("want two %s NICs, guest says:\n%s", want, out)
			}
		})
	}
}
