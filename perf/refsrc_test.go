package main

import (
	"slices"
	"strings"
	"testing"
)

// TestSelectWithRefs: --ref-src measures the default, switch and reflect
// rows a second time from the other checkout, all three unless --only
// names some; a NAME-ref without --ref-src, or one it does not build, is
// an error.
func TestSelectWithRefs(t *testing.T) {
	tests := []struct {
		only    string
		refSrc  string
		want    []string // these, in this order, among the selected
		without []string // and none of these
		err     string
	}{
		{only: "", refSrc: "/old", want: []string{"xdpfwd", "xdpfwd-switch", "xdpfwd-reflect", "xdpfwd-ref", "xdpfwd-switch-ref", "xdpfwd-reflect-ref"}},
		{only: "", refSrc: "", without: []string{"xdpfwd-ref", "xdpfwd-switch-ref"}},
		{only: "xdpfwd,xdpfwd-ref,bridge", refSrc: "/old", want: []string{"xdpfwd", "bridge", "xdpfwd-ref"}, without: []string{"xdpfwd-switch-ref"}},
		{only: "xdpfwd-switch-ref", refSrc: "/old", want: []string{"xdpfwd-switch", "xdpfwd-switch-ref"}, without: []string{"xdpfwd", "xdpfwd-ref"}},
		{only: "xdpfwd-switch,bridge", refSrc: "/old", want: []string{"xdpfwd-switch", "xdpfwd-switch-ref"}, without: []string{"xdpfwd-ref", "xdpfwd-reflect-ref"}},
		{only: "xdpfwd-ref", refSrc: "", err: "not given"},
		{only: "bridge-ref", refSrc: "/old", err: "builds only"},
	}
	for _, tc := range tests {
		var only []string
		if tc.only != "" {
			only = strings.Split(tc.only, ",")
		}
		cs, err := selectWithRefs(only, tc.refSrc)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--only %q --ref-src %q: error %v, want one about %q", tc.only, tc.refSrc, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("--only %q --ref-src %q: %v", tc.only, tc.refSrc, err)
			continue
		}
		var names []string
		for _, c := range cs {
			names = append(names, c.Name)
		}
		var got []string
		for _, n := range names {
			if slices.Contains(tc.want, n) {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("--only %q --ref-src %q: selected %v, want %v among them in order", tc.only, tc.refSrc, names, tc.want)
		}
		for _, n := range tc.without {
			if slices.Contains(names, n) {
				t.Errorf("--only %q --ref-src %q: selected %s", tc.only, tc.refSrc, n)
			}
		}
	}
}

// TestRefContendersShareBinary: the ref contenders run the one binary
// built from --ref-src, in the modes of their bases.
func TestRefContendersShareBinary(t *testing.T) {
	cs, err := selectWithRefs(nil, "/old")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if !strings.HasSuffix(c.Name, "-ref") {
			continue
		}
		if c.bin != "xdpfwd-ref" {
			t.Errorf("%s runs binary %q, want xdpfwd-ref", c.Name, c.bin)
		}
		base := strings.TrimSuffix(c.Name, "-ref")
		if mode, _ := strings.CutPrefix(base, "xdpfwd-"); base != "xdpfwd" && !strings.Contains(c.Desc, "--mode "+mode) {
			t.Errorf("%s: %q, want --mode %s", c.Name, c.Desc, mode)
		}
	}
}
