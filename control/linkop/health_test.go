package linkop_test

import (
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// listManager lists what it is given.
type listManager struct{ l linkop.List }

func (m listManager) List() (linkop.List, error) { return m.l, nil }
func (listManager) Add(string) error             { return nil }
func (listManager) Del(string) error             { return nil }

// TestListHealth: a list reply carries the daemon's health and its
// detail over the socket as the daemon gave them, and Available judges
// them as the CNI plugin's STATUS does: a daemon that forwards, has no
// link yet, rebuilds its forwarder or does not say is available; one
// stopping, stalled or refusing every add is not, and its error says
// why.
func TestListHealth(t *testing.T) {
	for _, tc := range []struct {
		health, detail, addRefused string
		available                  bool
		says                       string // in Available's error
	}{
		{linkop.HealthForwarding, "", "", true, ""},
		{linkop.HealthNoLinks, "no links: forwarding nothing until a link is added", "", true, ""},
		{linkop.HealthRebuilding, "a link's queue count changed", "", true, ""},
		{"", "", "", true, ""}, // a daemon older than health
		{linkop.HealthStopping, "stopping: draining, then exiting", "", false, "stopping: draining"},
		{linkop.HealthStalled, "stalled: worker 0: no progress for 5s", "", false, "stalled: worker 0"},
		{linkop.HealthStalled, "", "", false, "stalled"},
		{linkop.HealthForwarding, "", "xconnect mode forwards exactly its two links", false, "takes no links now: xconnect"},
		{"", "", "zero-copy UMEM", false, "zero-copy"},
	} {
		want := linkop.List{Mode: "switch", Links: []linkop.Link{{Name: "up0"}}, Queues: 2,
			AddRefused: tc.addRefused, Health: tc.health, HealthDetail: tc.detail}
		c, err := linkop.Dial(serve(t, listManager{want}))
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.ListLinks()
		c.Close()
		if err != nil || got.Health != tc.health || got.HealthDetail != tc.detail || got.AddRefused != tc.addRefused || got.Queues != 2 || !got.Has("up0") {
			t.Errorf("health %q %q, add refused %q: listed %+v, %v", tc.health, tc.detail, tc.addRefused, got, err)
			continue
		}
		err = got.Available()
		if (err == nil) != tc.available || (err != nil && !strings.Contains(err.Error(), tc.says)) {
			t.Errorf("health %q %q, add refused %q: Available() = %v; want available %v, saying %q", tc.health, tc.detail, tc.addRefused, err, tc.available, tc.says)
		}
	}
}
