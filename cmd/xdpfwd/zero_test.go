package main

// Tests that a setting's numbers mean the same in fwd.Config, its flag
// and its config file key, and in the fwd.Plan they resolve to (issue
// 31): the zero value, off, and a value refused.

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// zeroBase is the command line of TestZeroValuesAgree's forwarders: a
// switch, which has a frag zone and takes links while running, of two
// links of fwdtest's.
var zeroBase = []string{"--mode", "switch", "--link", "z0", "--link", "z1", "--queues", "1", "--hugepages", "off", "--log-level", "error"}

// TestZeroValuesAgree: for inline-max, frag-order and max-links, the zero
// value given in fwd.Config, as the flag and as the config file's key
// resolves to the same Plan, whose field holds what the zero stands for
// (not the zero), and so does off (the Config's InlineOff and FragOff,
// the flag's and the key's "off"); a value that is refused is refused by
// all three, with exit code 2. max-links has no off; its flag's default
// is auto (64 in switch mode), which its zero is not.
func TestZeroValuesAgree(t *testing.T) {
	env := fwdtest.New()
	for _, n := range []string{"z0", "z1"} {
		env.AddLink(n, fwdtest.LinkOptions{})
	}
	inlineMax := func(p fwd.Plan) int { return p.InlineMax }
	fragOrder := func(p fwd.Plan) int { return p.FragOrder }
	maxLinks := func(p fwd.Plan) int { return p.MaxLinks }
	for _, tc := range []struct {
		key, value string            // the flag's and key's name and value
		set        func(*fwd.Config) // the same value set in the Config; nil: it has none
		plan       func(fwd.Plan) int
		want       int // the Plan's value; refused: -100
	}{
		{"inline-max", "0", func(c *fwd.Config) { c.InlineMax = 0 }, inlineMax, 256},
		{"inline-max", "off", func(c *fwd.Config) { c.InlineMax = fwd.InlineOff }, inlineMax, fwd.InlineOff},
		{"inline-max", "-2", func(c *fwd.Config) { c.InlineMax = -2 }, inlineMax, -100},
		{"frag-order", "0", func(c *fwd.Config) { c.FragOrder = 0 }, fragOrder, 4},
		{"frag-order", "off", func(c *fwd.Config) { c.FragOrder = fwd.FragOff }, fragOrder, fwd.FragOff},
		{"frag-order", "5", func(c *fwd.Config) { c.FragOrder = 5 }, fragOrder, -100},
		{"max-links", "0", func(c *fwd.Config) { c.MaxLinks = 0 }, maxLinks, 2},
		{"max-links", "-1", func(c *fwd.Config) { c.MaxLinks = -1 }, maxLinks, -100},
		{"max-links", "auto", nil, maxLinks, defaultMaxLinks},
		{"max-links", "", nil, maxLinks, defaultMaxLinks}, // not given: auto
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			sources := map[string]func() (*runSettings, error){
				"flag": func() (*runSettings, error) {
					args := zeroBase
					if tc.value != "" {
						args = append(args[:len(args):len(args)], "--"+tc.key, tc.value)
					}
					return parseRun(args, io.Discard)
				},
				"file": func() (*runSettings, error) {
					path := filepath.Join(t.TempDir(), "xdpfwd.yaml")
					body := ""
					if tc.value != "" {
						body = tc.key + ": " + tc.value + "\n"
					}
					if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
						t.Fatal(err)
					}
					return parseRun(append(zeroBase[:len(zeroBase):len(zeroBase)], "--config", path), io.Discard)
				},
			}
			if tc.set != nil {
				// The command line without the setting, and the field
				// set in the Config it makes.
				sources["config"] = func() (*runSettings, error) {
					s, err := parseRun(zeroBase, io.Discard)
					if err != nil {
						t.Fatal(err)
					}
					tc.set(&s.cfg)
					return s, s.cfg.Check()
				}
			}
			var first *fwd.Plan
			for _, src := range []string{"config", "flag", "file"} {
				if sources[src] == nil {
					continue
				}
				p, err := zeroPlan(env, sources[src])
				if tc.want == -100 {
					if code := exitCode(err, io.Discard); code != exitUsage {
						t.Errorf("%s %s: %v, exit code %d; want it refused, exit code %d", src, tc.value, err, code, exitUsage)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s %s: %v", src, tc.value, err)
				}
				if got := tc.plan(p); got != tc.want {
					t.Errorf("%s %s: the plan's %s is %d, want %d", src, tc.value, tc.key, got, tc.want)
				}
				if first == nil {
					first = &p
				} else if !reflect.DeepEqual(p, *first) {
					t.Errorf("%s %s: the plan\n%+v\ndiffers from the first source's\n%+v", src, tc.value, p, *first)
				}
			}
		})
	}
}

// zeroPlan is the Plan of the Config parse makes, on env's links, with
// what differs between two parses of the same settings (the logger, the
// handler each parse makes anew) left out.
func zeroPlan(env *fwdtest.Env, parse func() (*runSettings, error)) (fwd.Plan, error) {
	s, err := parse()
	if err != nil {
		return fwd.Plan{}, err
	}
	cfg := s.cfg
	cfg.Env = env
	f, err := fwd.New(cfg)
	if err != nil {
		return fwd.Plan{}, err
	}
	defer f.Close()
	p := f.Plan()
	p.Logger, p.Handler = nil, nil
	return p, nil
}
