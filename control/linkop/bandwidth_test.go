package linkop_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// TestAddBandwidthOptions: an add's bandwidth limits reach a Manager that
// takes options (AddWith), alone (no MAC: an add with limits only is not
// a plain Add) or with port security; the wire form names them as the
// daemon reads them.
func TestAddBandwidthOptions(t *testing.T) {
	m := &optionsManager{opts: map[string]*linkop.AddOptions{}}
	c, err := linkop.Dial(serve(t, m))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bw := &linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 524288, EgressRate: 16e6, EgressBurst: 1 << 20}
	only := linkop.AddOptions{Bandwidth: bw}
	both := linkop.AddOptions{MAC: "02:28:00:00:00:0a", Bandwidth: &linkop.Bandwidth{EgressRate: 1e9, EgressBurst: 1 << 23}}
	if only.Empty() {
		t.Error("options with bandwidth alone: Empty")
	}
	for name, o := range map[string]linkop.AddOptions{"bwonly": only, "bwboth": both} {
		if err := c.AddLinkWith(name, o); err != nil {
			t.Fatal(err)
		}
		if got := m.opts[name]; got == nil || !reflect.DeepEqual(*got, o) {
			t.Errorf("%s: options %+v, want %+v", name, got, o)
		}
	}
	b, _ := json.Marshal(linkop.Request{Op: linkop.OpAdd, Name: "bwveth", AddOptions: only})
	want := `"bandwidth":{"ingress_rate":8000000,"ingress_burst":524288,"egress_rate":16000000,"egress_burst":1048576}`
	if !strings.Contains(string(b), want) {
		t.Errorf("request %s: want %s", b, want)
	}
}
