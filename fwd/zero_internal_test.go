package fwd

import (
	"reflect"
	"testing"
)

// TestPlanSpellsConfig: InlineMax, FragOrder and MaxLinks mean the same
// number the same way in Config and Plan: a Plan never holds
// the zero that is Config's default, spells off as Config does (InlineOff,
// FragOff), and its value, given back as the Config's, resolves to the
// same Plan.
func TestPlanSpellsConfig(t *testing.T) {
	drop := HandlerFunc(func([]Packet) {})
	links := twoLinks(func(n string) linkInfo { return vethLink(n, 1) })
	for _, tc := range []struct {
		name                   string
		cfg                    Config
		inline, frag, maxLinks int // the Plan's
	}{
		{"zero values", Config{Handler: drop}, 256, 4, 2},
		{"zero values, no zone to use", Config{}, 256, FragOff, 2},
		{"off", Config{Handler: drop, InlineMax: InlineOff, FragOrder: FragOff}, InlineOff, FragOff, 2},
		{"set", Config{Handler: drop, InlineMax: 100, FragOrder: 3, MaxLinks: 8}, 100, 3, 8},
		{"set to the defaults", Config{Handler: drop, InlineMax: 256, FragOrder: 4, MaxLinks: 2}, 256, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Links = []string{"a", "b"}
			p, err := resolve(cfg, links, twoCPUs)
			if err != nil {
				t.Fatal(err)
			}
			if p.InlineMax != tc.inline || p.FragOrder != tc.frag || p.MaxLinks != tc.maxLinks {
				t.Fatalf("plan InlineMax %d, FragOrder %d, MaxLinks %d; want %d, %d, %d",
					p.InlineMax, p.FragOrder, p.MaxLinks, tc.inline, tc.frag, tc.maxLinks)
			}
			if zone := p.UMEM.InlineSlots > 0; zone != (p.InlineMax != InlineOff) {
				t.Errorf("plan InlineMax %d with inline slots %d", p.InlineMax, p.UMEM.InlineSlots)
			}
			if p.UMEM.FragOrder != max(p.FragOrder, 0) {
				t.Errorf("plan FragOrder %d with a UMEM frag order of %d", p.FragOrder, p.UMEM.FragOrder)
			}
			back := cfg
			back.InlineMax, back.FragOrder, back.MaxLinks = p.InlineMax, p.FragOrder, p.MaxLinks
			q, err := resolve(back, links, twoCPUs)
			if err != nil {
				t.Fatalf("the plan's values as a Config's: %v", err)
			}
			if c := restartChanges(&p, &q, nil); len(c) > 0 || q.InlineMax != p.InlineMax || !reflect.DeepEqual(q.Domains, p.Domains) {
				t.Errorf("the plan's values as a Config's resolve to another plan: %v, InlineMax %d, domains %+v; want InlineMax %d, domains %+v",
					c, q.InlineMax, q.Domains, p.InlineMax, p.Domains)
			}
		})
	}
}
