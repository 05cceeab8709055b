// --ref-src: xdpfwd built from another checkout, run beside this one's
// as the NAME-ref contenders.

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// selectWithRefs is selectContenders with --ref-src's contenders: those of
// refSrcContenders, or only the NAME-ref ones --only names. Naming one
// without --ref-src is an error.
func selectWithRefs(only []string, refSrc string) ([]*contender, error) {
	var bases, refs []string
	for _, n := range only {
		if b, ok := strings.CutSuffix(n, "-ref"); ok {
			if refSrc == "" {
				return nil, fmt.Errorf("--only %q: a contender of --ref-src, which is not given", n)
			}
			refs = append(refs, n)
			if !slices.Contains(only, b) {
				bases = append(bases, b)
			}
			continue
		}
		bases = append(bases, n)
	}
	cs, err := selectContenders(bases)
	if err != nil || refSrc == "" {
		return cs, err
	}
	rs := refSrcContenders(refSrc, cs)
	if len(refs) > 0 {
		rs = slices.DeleteFunc(rs, func(c *contender) bool { return !slices.Contains(refs, c.Name) })
		for _, n := range refs {
			if !slices.ContainsFunc(rs, func(c *contender) bool { return c.Name == n }) {
				return nil, fmt.Errorf("--only %q: --ref-src builds only %s", n, refNames())
			}
		}
		// A base named only through its ref runs too: the comparison
		// needs both.
	}
	return append(cs, rs...), nil
}

func refNames() string {
	var ns []string
	for _, m := range refModes {
		ns = append(ns, m.name+"-ref")
	}
	return strings.Join(ns, ", ")
}

// refModes are the xdpfwd contenders --ref-src measures a second time, built
// from the other checkout: the default cross-connect and the switch and
// reflect modes, the rows a change to the engine's pipeline moves.
var refModes = []struct {
	name, mode string
	groups     []string
}{
	{"xdpfwd", "", nil},
	{"xdpfwd-switch", "switch", []string{"switch", "scale"}},
	{"xdpfwd-reflect", "reflect", []string{"reflect"}},
}

// refSrcContenders are the contenders of refModes among cs, each again as
// NAME-ref with xdpfwd built from src (--ref-src): the code before a
// change, measured beside it in the same run. The build runs once.
func refSrcContenders(src string, cs []*contender) []*contender {
	build := func(ctx context.Context, e *env) error {
		if _, ok := e.bins["xdpfwd-ref"]; ok {
			return nil
		}
		if _, err := e.buildXdpfwd(ctx); err != nil {
			return err
		}
		bin := filepath.Join(e.tmp, "xdpfwd-ref")
		if err := goBuild(ctx, src, "./cmd/xdpfwd", bin); err != nil {
			return err
		}
		e.bins["xdpfwd-ref"] = bin
		return nil
	}
	var refs []*contender
	for _, m := range refModes {
		if !slices.ContainsFunc(cs, func(c *contender) bool { return c.Name == m.name }) {
			continue
		}
		var c *contender
		if m.mode == "" {
			c = xdpfwdContender(m.name+"-ref", "xdpfwd (default), built from "+src, nil)
			c.Desc = "xdpfwd (default) built from " + src + ", to compare the code before a change in the same run"
		} else {
			c = xdpfwdModeContender(m.name+"-ref", "xdpfwd --mode "+m.mode+", built from "+src, m.mode, m.groups...)
			c.Desc = "xdpfwd --mode " + m.mode + " built from " + src + ", to compare the code before a change in the same run"
		}
		c.bin = "xdpfwd-ref"
		c.build = build
		refs = append(refs, c)
	}
	return refs
}
