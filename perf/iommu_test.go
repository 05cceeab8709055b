package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestIOMMUArgs: --iommu runs alone; the veth workloads' selectors are
// refused with exit code 2.
func TestIOMMUArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--iommu"}, true},
		{[]string{"--iommu", "--out", "x", "--readme"}, true},
		{[]string{"--iommu", "--from", "x.jsonl"}, true},
		{[]string{"--iommu", "--workload", "udp"}, false},
		{[]string{"--iommu", "--only", "bridge"}, false},
		{[]string{"--iommu", "--quick"}, false},
	} {
		o, err := parseArgs(c.args, &strings.Builder{})
		if (err == nil) != c.ok || (c.ok && !o.IOMMU) {
			t.Errorf("%q: %+v, %v; want ok %v", c.args, o.IOMMU, err, c.ok)
		}
		if !c.ok {
			var stderr strings.Builder
			if code := Main(c.args, &strings.Builder{}, &stderr); code != 2 || !strings.Contains(stderr.String(), "--iommu") {
				t.Errorf("%q: exit %d, %q; want 2 and a message naming --iommu", c.args, code, stderr.String())
			}
		}
	}
}

// TestIOMMUBootFailed: perf boots a VM once more only when its test failed
// before the guest's agent started and wrote no rows, never after a
// measurement failed.
func TestIOMMUBootFailed(t *testing.T) {
	for _, c := range []struct {
		name, log string
		rows      bool
		want      bool
	}{
		{"panic at boot", "scenarios_test.go:45: vmtest: guest agent did not start: guest closed its serial port\n", false, true},
		{"measurement failed", "iommu_test.go:85: zero-copy at 64 B: 900.0 IOMMU maps per 1,000 packets\n", false, false},
		{"rows written", "guest agent did not start\n", true, false},
	} {
		dir := t.TempDir()
		logPath, out := filepath.Join(dir, "t.log"), filepath.Join(dir, "rows.jsonl")
		os.WriteFile(logPath, []byte(c.log), 0o644)
		if c.rows {
			os.WriteFile(out, []byte("{}\n"), 0o644)
		}
		if got := bootFailed(logPath, out); got != c.want {
			t.Errorf("%s: bootFailed %v, want %v", c.name, got, c.want)
		}
	}
}
