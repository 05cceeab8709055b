package topo

import (
	"os"
	"testing"
)

// RequireRoot skips t unless the test runs as root, which building
// namespaces, veths and AF_XDP sockets needs. With
// XDPFWD_REQUIRE_INTEGRATION=1 a missing root is a failure instead, so CI
// cannot silently pass by skipping every integration test.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
		t.Fatalf("integration test needs root (euid %d) and XDPFWD_REQUIRE_INTEGRATION=1 forbids skipping", os.Geteuid())
	}
	t.Skipf("integration test needs root (euid %d); set XDPFWD_REQUIRE_INTEGRATION=1 to make this a failure", os.Geteuid())
}
