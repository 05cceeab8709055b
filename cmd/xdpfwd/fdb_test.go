package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/metrics"
)

// TestFDBSizeBad: --fdb-size out of its range exits 2 at once with a
// message naming the bounds, never hangs or runs out of memory.
func TestFDBSizeBad(t *testing.T) {
	t.Parallel()
	for _, size := range []string{"1099511627776", "9223372036854775807", "63", "-1"} {
		t.Run(size, func(t *testing.T) {
			r := runBin(t, 20*time.Second, nil, "run", "--mode", "switch", "--link", "nolink0", "--link", "nolink1", "--fdb-size", size)
			if r.timedOut || r.code != 2 || !strings.Contains(r.stderr, "--fdb-size "+size) || !strings.Contains(r.stderr, "16777216") ||
				strings.Contains(r.stderr, "goroutine") {
				t.Errorf("--fdb-size %s: exit %d after %v (timed out %v), stderr %.300q; want 2 and the bound 64..16777216",
					size, r.code, r.elapsed, r.timedOut, r.stderr)
			}
		})
	}
}

// TestFDBCommandMAC: `xdpfwd fdb` and `xdpfwd fdb --json` print MAC
// addresses as aa:bb:cc:dd:ee:ff.
func TestFDBCommandMAC(t *testing.T) {
	t.Parallel()
	d := metrics.FDBDump{Stats: fdb.Stats{Size: 64, Learned: 1},
		Entries: []fdb.Entry{{MAC: net.HardwareAddr{0x52, 0x54, 0, 0xab, 0xcd, 0xef}, VLAN: 7, Link: 1, Age: time.Second}}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(d)
	}))
	defer srv.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "52:54:00:ab:cd:ef  7"},
		{[]string{"--json"}, `"mac": "52:54:00:ab:cd:ef"`},
	} {
		var stdout, stderr bytes.Buffer
		if err := cmdFDB(append([]string{"--metrics", srv.URL}, c.args...), &stdout, &stderr); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stdout.String(), c.want) {
			t.Errorf("xdpfwd fdb %v printed\n%s\nwant %q in it", c.args, stdout.String(), c.want)
		}
	}
}
