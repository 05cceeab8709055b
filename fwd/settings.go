package fwd

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/linearize"
	"github.com/xdpfwd/xdpfwd/xps"
)

// Setting is one of Config's settings as every place that takes it names
// it: the Config field, the name of xdpfwd's flag and config-file key
// (whose table of settings extends this one with its --help), what its
// zero value means, and what a running forwarder does with a change
// (Reconfigure). Settings lists them; a Config field that is no setting
// (Logger, Env, NoPin) is said so beside the table.
type Setting struct {
	// Field is the Config field it sets.
	Field string
	// Name is its flag's and config key's name, as errors name it; ""
	// for a setting of the library alone (Batch).
	Name string
	// Zero is what the zero value means where it is not itself (an
	// automatic choice, a default of fwd's): "auto", "256"; "" when zero
	// is itself (false, none, off) or no value of the flag's.
	Zero string
	// Reload is what Reconfigure does with a change of it.
	Reload Reload
	// Bool: the flag may stand alone, meaning true (on).
	Bool bool
}

// Reload is what Reconfigure does with a changed setting.
type Reload int

const (
	// Restart: nothing; the change is listed in Reconfiguration.Restart.
	Restart Reload = iota
	// Live: put in force while running.
	Live
	// LiveLinks: live where links may be added while running (a Handler,
	// and a UMEM that takes them: AddLink), a restart elsewhere.
	LiveLinks
)

// setting is a Setting and what the forwarder does with it: its
// spelling (spelling.go; none for the links and the mode, which xdpfwd
// spells, nor for Batch, which has no flag); check
// refuses a bad value in a Config alone (Config.check runs every one);
// planned is the value a Plan holds, spelled as the flag spells it,
// which Reconfigure compares for a setting it cannot change; a live one
// has keep, which gives a next Config the value running (so the rest of
// it resolves comparably), and apply, which puts next's value in force
// and returns the Change, or a zero Change when it is the running one.
type setting struct {
	Setting
	spelling
	check   func(c *Config, host hostFacts) error
	planned func(p *Plan) string
	keep    func(next *Config, cur *Plan)
	apply   func(f *Forwarder, next *Config) (Change, error)
}

// Config fields that are not settings: each is resolved into another or
// is no choice of the user's.
var notSettings = map[string]string{
	"NoPin":  "resolved into Plan.CPUs, compared as CPUs",
	"Logger": "where the forwarder logs, not how it forwards",
	"Env":    "the kernel, or fwdtest's fake in tests",
}

// settings are Config's settings, in the order of xdpfwd's --help.
var settings = []setting{
	{Setting: Setting{Field: "Links", Name: "link", Reload: LiveLinks},
		check: checkLinks, keep: func(n *Config, p *Plan) { n.Links = p.Links }, apply: (*Forwarder).applyLinks,
		planned: func(p *Plan) string { return fmt.Sprint(p.Links) }},
	{Setting: Setting{Field: "Handler", Name: "mode"},
		planned: func(p *Plan) string { return fmt.Sprintf("%T", p.Handler) }},
	{Setting: Setting{Field: "MaxLinks", Name: "max-links", Zero: "the links given"},
		check: checkMaxLinks, planned: func(p *Plan) string { return fmt.Sprint(p.MaxLinks) }},
	{Setting: Setting{Field: "XDPMode", Name: "xdp-mode"}, spelling: xdpModeSpelling,
		planned: func(p *Plan) string { return fmt.Sprint(p.XDPMode) }},
	{Setting: Setting{Field: "ZeroCopy", Name: "zerocopy"}, spelling: zeroCopySpelling,
		planned: func(p *Plan) string { return fmt.Sprint(p.ZeroCopy) }},
	{Setting: Setting{Field: "Promisc", Name: "promisc"}, spelling: promiscSpelling,
		check: func(c *Config, _ hostFacts) error {
			if c.Promisc < PromiscAuto || c.Promisc > PromiscOff {
				return inputErr("--promisc %v: want auto, on or off (PromiscAuto, PromiscOn or PromiscOff)", c.Promisc)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.Promiscuous) }},
	{Setting: Setting{Field: "HugePages", Name: "hugepages"}, spelling: hugePagesSpelling,
		planned: func(p *Plan) string { return fmt.Sprint(p.HugePages) }},

	{Setting: Setting{Field: "Queues", Name: "queues", Zero: "auto", Reload: Live},
		spelling: intSpelling("queues", func(c *Config) *int { return &c.Queues }),
		check: func(c *Config, _ hostFacts) error {
			if c.Queues < 0 {
				return inputErr("--queues %d: want 0 (auto: the CPUs, at most the links' queue counts) or a count of 1..the links' queue count", c.Queues)
			}
			return nil
		},
		keep: func(n *Config, p *Plan) { n.Queues = p.Queues }, apply: (*Forwarder).applyQueues},
	{Setting: Setting{Field: "FrameSize", Name: "frame-size"}, spelling: frameSizeSpelling,
		check: func(c *Config, _ hostFacts) error {
			if c.FrameSize != 0 && c.FrameSize != 2048 && c.FrameSize != 4096 {
				return inputErr("--frame-size %d: want 2048 or 4096, or 0 (auto)", c.FrameSize)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.FrameSize) }},
	{Setting: Setting{Field: "MultiBufferMode", Name: "multi-buffer", Bool: true}, spelling: multiBufferSpelling,
		check: func(c *Config, _ hostFacts) error {
			if c.MultiBufferMode < MultiBufferAuto || c.MultiBufferMode > MultiBufferOff {
				return inputErr("--multi-buffer %v: want auto, on or off (MultiBufferAuto, MultiBufferOn or MultiBufferOff)", c.MultiBufferMode)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.MultiBuffer) }},
	{Setting: Setting{Field: "RingSize", Name: "ring-size", Zero: "auto"},
		spelling: ringSpelling("ring-size", func(c *Config) *uint32 { return &c.RingSize }),
		check:    func(c *Config, _ hostFacts) error { return checkRingSize("--ring-size", c.RingSize) },
		planned:  func(p *Plan) string { return fmt.Sprint(p.RingSize) }},
	{Setting: Setting{Field: "AddedRingSize", Name: "added-ring-size", Zero: "auto"},
		spelling: ringSpelling("added-ring-size", func(c *Config) *uint32 { return &c.AddedRingSize }),
		check: func(c *Config, _ hostFacts) error {
			if c.AddedRingSize != 0 && c.RingSize != 0 && c.AddedRingSize > c.RingSize {
				return inputErr("--added-ring-size %d: want at most --ring-size %d", c.AddedRingSize, c.RingSize)
			}
			return checkRingSize("--added-ring-size", c.AddedRingSize)
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.AddedRingSize) }},
	{Setting: Setting{Field: "MaxUMEM", Name: "max-umem", Zero: fmt.Sprintf("%d GiB", DefaultMaxUMEM>>30)}, spelling: maxUMEMSpelling,
		check: func(c *Config, _ hostFacts) error {
			if c.MaxUMEM < 0 {
				return inputErr("--max-umem %d: want a size in bytes, or 0 (%d MiB)", c.MaxUMEM, DefaultMaxUMEM>>20)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.MaxUMEM) }},
	{Setting: Setting{Field: "Batch", Zero: fmt.Sprint(defaultBatch)},
		check: func(c *Config, _ hostFacts) error {
			if b := cmp0(c.Batch, defaultBatch); b < linearize.MaxDescs || c.RingSize != 0 && uint32(b) > c.RingSize {
				return inputErr("batch %d: want %d..ring size, or 0 (%d)", c.Batch, linearize.MaxDescs, defaultBatch)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.Batch) }},
	{Setting: Setting{Field: "XPS", Name: "xps", Reload: Live}, spelling: xpsSpelling,
		keep: func(n *Config, p *Plan) { n.XPS = p.XPS }, apply: (*Forwarder).applyXPS},
	{Setting: Setting{Field: "XPSAsymmetric", Name: "xps-asymmetric", Bool: true},
		spelling: boolSpelling("xps-asymmetric", func(c *Config) *bool { return &c.XPSAsymmetric }),
		planned:  func(p *Plan) string { return fmt.Sprint(p.XPSAsymmetric) }},
	{Setting: Setting{Field: "FlowTableSize", Name: "flow-table-size", Zero: fmt.Sprint(xps.DefaultSize)},
		spelling: intSpelling("flow-table-size", func(c *Config) *int { return &c.FlowTableSize }),
		planned:  func(p *Plan) string { return fmt.Sprint(p.FlowTableSize) }},
	{Setting: Setting{Field: "CPUs", Name: "cpus", Zero: "one per worker"}, spelling: cpusSpelling,
		check: func(c *Config, host hostFacts) error {
			if !allowed(c.CPUs, host.cpus) {
				return inputErr("--cpus %v: want CPUs the process may run on, of %v", c.CPUs, host.cpus)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.CPUs) }},
	{Setting: Setting{Field: "Spin", Name: "spin", Zero: "auto"}, spelling: spinSpelling,
		planned: func(p *Plan) string { return spinString(p.Spin) }},
	{Setting: Setting{Field: "Coalesce", Name: "coalesce", Zero: "off"},
		spelling: durationSpelling("coalesce", time.Millisecond, func(c *Config) *time.Duration { return &c.Coalesce }),
		planned:  func(p *Plan) string { return fmt.Sprint(p.Coalesce) }},
	{Setting: Setting{Field: "BusyPoll", Name: "busy-poll", Zero: "off"},
		spelling: durationSpelling("busy-poll", time.Second, func(c *Config) *time.Duration { return &c.BusyPoll }),
		planned:  func(p *Plan) string { return fmt.Sprint(p.BusyPoll) }},

	{Setting: Setting{Field: "InlineMax", Name: "inline-max", Zero: "256", Reload: Live}, spelling: inlineMaxSpelling,
		check: func(c *Config, _ hostFacts) error {
			if _, err := inline.ResolveMax(c.InlineMax); err != nil {
				return inputErr("--inline-max: %w", err)
			}
			return nil
		},
		keep:  func(n *Config, p *Plan) { n.InlineMax = p.InlineMax }, // a Plan's value is a Config's
		apply: (*Forwarder).applyInlineMax},
	{Setting: Setting{Field: "FragOrder", Name: "frag-order", Zero: "4"}, spelling: fragOrderSpelling,
		check: func(c *Config, _ hostFacts) error {
			if c.FragOrder > 0 && c.FragOrder != 3 && c.FragOrder != 4 {
				return inputErr("--frag-order %d: want 3 (32 KiB), 4 (64 KiB), 0 (the default, 4) or off (FragOff: no frag zone)", c.FragOrder)
			}
			return nil
		},
		planned: func(p *Plan) string { return fragOrderString(p.FragOrder) }},
	{Setting: Setting{Field: "MaxTxFrags", Name: "max-tx-frags", Zero: "4"},
		spelling: intSpelling("max-tx-frags", func(c *Config) *int { return &c.MaxTxFrags }),
		check: func(c *Config, _ hostFacts) error {
			if n := cmp0(c.MaxTxFrags, defaultMaxTxFrags); n < 1 || n > linearize.MaxDescs {
				return inputErr("--max-tx-frags %d: want 1..%d, or 0 (%d)", c.MaxTxFrags, linearize.MaxDescs, defaultMaxTxFrags)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.MaxTxFrags) }},
	{Setting: Setting{Field: "Checksums", Name: "complete-checksums"}, spelling: checksumsSpelling,
		check: func(c *Config, _ hostFacts) error {
			if c.Checksums < ChecksumsAuto || c.Checksums > ChecksumsOff {
				return inputErr("--complete-checksums %d: want auto, on or off (ChecksumsAuto, ChecksumsOn or ChecksumsOff)", c.Checksums)
			}
			return nil
		},
		planned: func(p *Plan) string { return fmt.Sprint(p.Checksums) }},

	{Setting: Setting{Field: "Force", Name: "force", Bool: true},
		spelling: boolSpelling("force", func(c *Config) *bool { return &c.Force }),
		planned:  func(p *Plan) string { return fmt.Sprint(p.Force) }},
}

// Settings returns Config's settings, in the order of xdpfwd's --help.
func Settings() []Setting {
	out := make([]Setting, len(settings))
	for i, s := range settings {
		out[i] = s.Setting
	}
	return out
}

// SettingNamed returns the setting whose flag is name.
func SettingNamed(name string) (Setting, bool) {
	for _, s := range settings {
		if s.Name == name && name != "" {
			return s.Setting, true
		}
	}
	return Setting{}, false
}

// check validates what the Config alone decides, before any link is looked
// up: a bad setting is refused even when the links are missing. resolve
// runs it; New runs it ahead of the link lookup and then plan.
func (c *Config) check(host hostFacts) error {
	for _, s := range settings {
		if s.check == nil {
			continue
		}
		if err := s.check(c, host); err != nil {
			return err
		}
	}
	return nil
}

func checkLinks(c *Config, _ hostFacts) error {
	switch {
	case c.Handler == nil && len(c.Links) != 2:
		return inputErr("need exactly two links without a Handler (two --link flags in xconnect mode), got %d", len(c.Links))
	case len(c.Links) < 1 || len(c.Links) > MaxLinks:
		return inputErr("need 1..%d links (--link flags), got %d", MaxLinks, len(c.Links))
	case repeated(c.Links) != "":
		return inputErr("link %q given twice: the links must differ", repeated(c.Links))
	}
	return nil
}

func checkMaxLinks(c *Config, _ hostFacts) error {
	switch {
	case c.MaxLinks < 0 || c.MaxLinks > MaxLinks || c.MaxLinks != 0 && c.MaxLinks < len(c.Links):
		return inputErr("--max-links %d: want %d..%d (the links given up to a LinkSet's size), or 0 (the links given)", c.MaxLinks, len(c.Links), MaxLinks)
	case c.Handler == nil && c.MaxLinks > 2:
		return inputErr("--max-links %d: without a Handler (xconnect) the links are the two given", c.MaxLinks)
	}
	return nil
}

// checkRingSize checks a ring size set (0 is auto), naming the flag.
func checkRingSize(flag string, n uint32) error {
	if n != 0 && (n&(n-1) != 0 || n < MinRingSize || n > MaxRingSize) {
		return inputErr("%s %d: want a power of two, %d..%d, or 0 (auto)", flag, n, MinRingSize, MaxRingSize)
	}
	return nil
}

// liveHere reports whether f changes s while running.
func (f *Forwarder) liveHere(s *setting) bool {
	switch s.Reload {
	case Live:
		return true
	case LiveLinks:
		return f.linksFixed() == nil
	}
	return false
}

// Reconfigure resolves next against the links and host facts New resolved
// its Config against, and applies the difference from what runs: Queues
// (SetQueues; 0 is DefaultQueues), XPS (SetXPS) and InlineMax
// (SetInlineMax) change live; any other setting whose resolved value
// differs is not applied and is listed in Restart. A live change that
// fails stays as it was, in Failed (a later Reconfigure tries it again).
// A Config that does not resolve changes nothing: the error says why.
//
// Where links may be added and removed while running (AddLink), a
// changed Links is applied too: the links no longer listed are removed,
// then the new ones added (each taking the lowest free index), and the
// Change is "Links"; one that fails is in Failed.
func (f *Forwarder) Reconfigure(next Config) (Reconfiguration, error) {
	var r Reconfiguration
	if err := next.check(f.host); err != nil {
		return r, err
	}
	// The rest of next resolves against what New resolved its Config
	// against (an auto ring size is the links given's), with the live
	// settings as they run.
	kept := next
	for i := range settings {
		if s := &settings[i]; f.liveHere(s) {
			s.keep(&kept, &f.plan)
		}
	}
	facts := f.startLinks
	if facts == nil {
		facts = f.links // a Forwarder not made by New (tests)
	}
	np, err := resolve(kept, facts, f.host)
	if err != nil {
		return r, err
	}
	r.Restart = restartChanges(&f.plan, &np, f.liveHere)
	var errs []error
	for i := range settings {
		s := &settings[i]
		if !f.liveHere(s) {
			continue
		}
		c, err := s.apply(f, &next)
		if err != nil {
			errs = append(errs, err)
		}
		if c != (Change{}) {
			r.Applied = append(r.Applied, c)
		}
	}
	r.Failed = errors.Join(errs...)
	return r, nil
}

// restartChanges compares two plans in the settings a running
// forwarder cannot change: those with a Plan's value that live (nil:
// none) does not say it changes.
func restartChanges(cur, next *Plan, live func(*setting) bool) []Change {
	var out []Change
	for i := range settings {
		s := &settings[i]
		if s.planned == nil || live != nil && live(s) {
			continue
		}
		if a, b := s.planned(cur), s.planned(next); a != b {
			out = append(out, Change{Field: s.Field, From: a, To: b})
		}
	}
	return out
}

// applyLinks removes the links next no longer lists, then adds its new
// ones; the Change lists the links before and after.
func (f *Forwarder) applyLinks(next *Config) (Change, error) {
	_, names := f.liveLinks()
	var errs []error
	for _, n := range names {
		if !slices.Contains(next.Links, n) {
			errs = append(errs, f.RemoveLink(n))
		}
	}
	for _, n := range next.Links {
		if !slices.Contains(names, n) {
			errs = append(errs, f.AddLink(n))
		}
	}
	if _, now := f.liveLinks(); !slices.Equal(now, names) {
		return Change{"Links", strings.Join(names, ","), strings.Join(now, ",")}, errors.Join(errs...)
	}
	return Change{}, errors.Join(errs...)
}

func (f *Forwarder) applyInlineMax(next *Config) (Change, error) {
	n, _ := inline.ResolveMax(next.InlineMax) // checked
	cur := f.InlineBytes()
	if n == cur {
		return Change{}, nil
	}
	if err := f.SetInlineMax(next.InlineMax); err != nil {
		return Change{}, err
	}
	return Change{"InlineMax", fmt.Sprint(cur), fmt.Sprint(n)}, nil
}

func (f *Forwarder) applyXPS(next *Config) (Change, error) {
	cur := xps.Mode(f.live.xpsMode.Load())
	if next.XPS == cur {
		return Change{}, nil
	}
	f.SetXPS(next.XPS)
	return Change{"XPS", cur.String(), next.XPS.String()}, nil
}

func (f *Forwarder) applyQueues(next *Config) (Change, error) {
	n := next.Queues
	if n == 0 {
		n = f.DefaultQueues()
	}
	cur := f.ActiveQueues()
	if n == cur {
		return Change{}, nil
	}
	if err := f.SetQueues(n); err != nil {
		return Change{}, err
	}
	return Change{"Queues", fmt.Sprint(cur), fmt.Sprint(n)}, nil
}
