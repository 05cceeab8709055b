package linkop_test

import (
	"bufio"
	"encoding/json"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// TestListCPUs: a list reply carries the CPUs the daemon's workers are
// pinned to as "cpus", left out when there are none (what an older
// daemon sends too), and the client reads them back as they were given.
func TestListCPUs(t *testing.T) {
	for _, tc := range []struct {
		name string
		cpus []int
	}{
		{"not pinned", nil},
		{"one", []int{1}},
		{"several", []int{0, 2, 33}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := serve(t, listManager{linkop.List{Mode: "switch", CPUs: tc.cpus}})

			conn, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			conn.Write([]byte(`{"op":"link.list"}` + "\n"))
			line, err := bufio.NewReader(conn).ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(line, &raw); err != nil {
				t.Fatalf("reply %s: %v", line, err)
			}
			if _, has := raw["cpus"]; has != (len(tc.cpus) > 0) {
				t.Errorf("reply %s: \"cpus\" there %v, want %v", line, has, len(tc.cpus) > 0)
			}

			c, err := linkop.Dial(path)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			l, err := c.ListLinks()
			if err != nil || !slices.Equal(l.CPUs, tc.cpus) {
				t.Errorf("listed CPUs %v, %v; want %v", l.CPUs, err, tc.cpus)
			}
		})
	}
}

// TestListCPUsOldDaemon: a daemon older than "cpus" lists no CPUs: not
// pinned, as far as a client can tell.
func TestListCPUsOldDaemon(t *testing.T) {
	path := oldDaemon(t, `{"ok":true,"mode":"switch","links":[{"name":"up0","rx_packets":0,"tx_packets":0}],"queues":2}`, true)
	c, err := linkop.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.ListLinks()
	if err != nil || l.Queues != 2 || !l.Has("up0") || len(l.CPUs) != 0 {
		t.Fatalf("list from an older daemon: %+v, %v; want its queues and link, no CPUs", l, err)
	}
}
