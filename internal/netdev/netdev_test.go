package netdev

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestValidName: the kernel's dev_valid_name, patterns' characters
// allowed: they are a name's.
func TestValidName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
		err  string // CheckName's, when not ok
	}{
		{"eth0", true, ""},
		{"n*", true, ""},
		{"a[b]", true, ""},
		{"x[", true, ""},
		{"a?", true, ""},
		{"...", true, ""},
		{"abcdefghijklmno", true, ""},
		{"abcdefghijklmnop", false, "longer than 15 bytes"},
		{"", false, "not an interface name"},
		{".", false, "not an interface name"},
		{"..", false, "not an interface name"},
		{"a/b", false, "not an interface name"},
		{"n0/../n1", false, "not an interface name"},
		{"a:1", false, "not an interface name"},
		{"a b", false, "not an interface name"},
		{"a\tb", false, "not an interface name"},
		{"a\nb", false, "not an interface name"},
		{"a\vb", false, "not an interface name"},
		{"a\fb", false, "not an interface name"},
		{"a\rb", false, "not an interface name"},
		{"a\xa0b", false, "not an interface name"},
		{"a\x00b", false, "not an interface name"},
	} {
		if got := ValidName(tt.name); got != tt.ok {
			t.Errorf("ValidName(%q) = %v; want %v", tt.name, got, tt.ok)
		}
		err := CheckName(tt.name)
		if tt.ok && err != nil || !tt.ok && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("CheckName(%q) = %v; want %q", tt.name, err, tt.err)
		}
	}
}

// TestQueueNumber: kind-N with N decimal, as the kernel names a queue's
// directory; nothing else.
func TestQueueNumber(t *testing.T) {
	for _, tt := range []struct {
		dir  string
		n    int
		ok   bool
		kind string
	}{
		{"rx-0", 0, true, "rx"},
		{"rx-10", 10, true, "rx"},
		{"tx-3", 3, true, "tx"},
		{"tx-3", 0, false, "rx"},
		{"rx-", 0, false, "rx"},
		{"rx-01", 0, false, "rx"},
		{"rx-+1", 0, false, "rx"},
		{"rx--1", 0, false, "rx"},
		{"rx-1a", 0, false, "rx"},
		{"rx-99999999999999999999", 0, false, "rx"},
		{"rx0", 0, false, "rx"},
	} {
		if n, ok := queueNumber(tt.dir, tt.kind); n != tt.n || ok != tt.ok {
			t.Errorf("queueNumber(%q, %q) = %d, %v; want %d, %v", tt.dir, tt.kind, n, ok, tt.n, tt.ok)
		}
	}
}

// TestQueues: the loopback device's one queue each way, as this
// namespace's sysfs lists them; a device it does not have is
// ErrNoDevice, whatever the name would match as a pattern; a name the
// kernel refuses is not looked up.
func TestQueues(t *testing.T) {
	for _, kind := range []string{"rx", "tx"} {
		if qs, err := Queues("lo", kind); err != nil || !slices.Equal(qs, []int{0}) {
			t.Errorf("Queues(lo, %s) = %v, %v; want [0]", kind, qs, err)
		}
	}
	for _, name := range []string{"l*", "l?", "[l]o", "nosuchdev0"} {
		if qs, err := Queues(name, "rx"); !errors.Is(err, ErrNoDevice) {
			t.Errorf("Queues(%q) = %v, %v; want ErrNoDevice", name, qs, err)
		}
	}
	for _, name := range []string{"..", "lo/..", "../net/lo", ""} {
		if qs, err := Queues(name, "rx"); err == nil || !strings.Contains(err.Error(), "not an interface name") {
			t.Errorf("Queues(%q) = %v, %v; want refused: not an interface name", name, qs, err)
		}
	}
}
