package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/modes"
)

// TestParseConfBandwidth: the "bandwidth" capability (runtimeConfig) and
// the same keys in the configuration itself, as the reference bandwidth
// plugin reads them: its units kept (bits/s, bits), the configuration's
// keys over runtimeConfig's, all zero no limit, a rate without its burst
// (or the reverse) and a burst over 4 GB refused as an invalid
// configuration naming the key.
func TestParseConfBandwidth(t *testing.T) {
	const base = `"name":"n","control":"/s","ipam":{"type":"host-local"}`
	for _, tt := range []struct {
		name, conf string
		want       *linkop.Bandwidth
		err        string
	}{
		{"none", `{` + base + `}`, nil, ""},
		{"runtimeConfig", `{` + base + `,"runtimeConfig":{"bandwidth":{"ingressRate":8000000,"ingressBurst":524288,"egressRate":16000000,"egressBurst":1048576}}}`,
			&linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 524288, EgressRate: 16e6, EgressBurst: 1 << 20}, ""},
		// containerd's CRI, as it passes a pod's 8M annotations: go-cni's
		// field names, and a burst of its own (2^32-1 bits, 512 MiB).
		{"containerd's form", `{` + base + `,"runtimeConfig":{"bandwidth":{"EgressBurst":4294967295,"EgressRate":8000000,"IngressBurst":4294967295,"IngressRate":8000000}}}`,
			&linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 1<<32 - 1, EgressRate: 8e6, EgressBurst: 1<<32 - 1}, ""},
		{"one way", `{` + base + `,"runtimeConfig":{"bandwidth":{"egressRate":1000000,"egressBurst":2147483647}}}`,
			&linkop.Bandwidth{EgressRate: 1e6, EgressBurst: 1<<31 - 1}, ""},
		{"the configuration's own keys win", `{` + base + `,"ingressRate":1000000,"ingressBurst":100000,"runtimeConfig":{"bandwidth":{"egressRate":8000000,"egressBurst":524288}}}`,
			&linkop.Bandwidth{IngressRate: 1e6, IngressBurst: 100000}, ""},
		{"all zero", `{` + base + `,"runtimeConfig":{"bandwidth":{"ingressRate":0,"ingressBurst":0}}}`, nil, ""},
		{"rate without burst", `{` + base + `,"runtimeConfig":{"bandwidth":{"ingressRate":8000000}}}`, nil, "ingressRate 8000000 without ingressBurst"},
		{"burst without rate", `{` + base + `,"egressBurst":524288}`, nil, "egressBurst 524288 without egressRate"},
		{"burst over 4 GB", `{` + base + `,"runtimeConfig":{"bandwidth":{"egressRate":8000000,"egressBurst":40000000000}}}`, nil, "egressBurst 40000000000 bits: want at most 34359738359 (under 4 GiB)"},
		// The reference plugin's bound, burst/8 under 2^32-1, which the
		// daemon's policer takes too (modes.MaxBurst).
		{"largest burst", `{` + base + `,"runtimeConfig":{"bandwidth":{"egressRate":8000000,"egressBurst":34359738359}}}`,
			&linkop.Bandwidth{EgressRate: 8e6, EgressBurst: 34359738359}, ""},
		{"burst 2^32-1 bytes", `{` + base + `,"runtimeConfig":{"bandwidth":{"ingressRate":8000000,"ingressBurst":34359738360}}}`, nil, "ingressBurst 34359738360 bits: want at most 34359738359"},
		{"burst 2^64-1", `{` + base + `,"runtimeConfig":{"bandwidth":{"ingressRate":8000000,"ingressBurst":18446744073709551615}}}`, nil, "ingressBurst 18446744073709551615 bits: want at most 34359738359"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConf([]byte(tt.conf), "")
			if tt.err != "" {
				var te *types.Error
				if !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Error(), tt.err) {
					t.Fatalf("err %v; want an invalid configuration naming %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b := c.bandwidth; b != nil {
				// What the plugin takes, the daemon's policer takes.
				l := modes.Limits{IngressRate: b.IngressRate, IngressBurst: b.IngressBurst, EgressRate: b.EgressRate, EgressBurst: b.EgressBurst}
				if err := l.Check(); err != nil {
					t.Errorf("bandwidth %+v: the daemon refuses it: %v", *b, err)
				}
			}
			switch {
			case tt.want == nil && c.bandwidth != nil:
				t.Errorf("bandwidth %+v; want none", *c.bandwidth)
			case tt.want != nil && (c.bandwidth == nil || *c.bandwidth != *tt.want):
				t.Errorf("bandwidth %+v; want %+v", c.bandwidth, *tt.want)
			}
		})
	}
}
