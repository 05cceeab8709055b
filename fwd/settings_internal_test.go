package fwd

import (
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// TestSettingsTable: every Config field is a setting once, or in
// notSettings saying why; names are unique; a setting Reconfigure changes
// live can be kept and applied, one it cannot has a Plan's value to
// compare.
func TestSettingsTable(t *testing.T) {
	cfg := reflect.TypeFor[Config]()
	seen := map[string]bool{}
	names := map[string]string{}
	for _, s := range settings {
		if _, ok := cfg.FieldByName(s.Field); !ok {
			t.Errorf("setting %q: Config has no field %s", s.Name, s.Field)
		}
		if seen[s.Field] {
			t.Errorf("Config.%s: two settings", s.Field)
		}
		seen[s.Field] = true
		if o, ok := names[s.Name]; ok && s.Name != "" {
			t.Errorf("name %q: settings %s and %s", s.Name, o, s.Field)
		}
		names[s.Name] = s.Field
		if s.Reload != Restart && (s.keep == nil || s.apply == nil) {
			t.Errorf("Config.%s: live, without keep and apply", s.Field)
		}
		if s.Reload != Live && s.planned == nil {
			t.Errorf("Config.%s: a restart's (somewhere), without a Plan's value to compare", s.Field)
		}
		if got, ok := SettingNamed(s.Name); s.Name != "" && (!ok || got != s.Setting) {
			t.Errorf("SettingNamed(%q) = %+v, %v", s.Name, got, ok)
		}
	}
	for i := range cfg.NumField() {
		f := cfg.Field(i).Name
		why, not := notSettings[f]
		switch {
		case !seen[f] && !not:
			t.Errorf("Config.%s: no setting, and notSettings does not say why", f)
		case seen[f] && not:
			t.Errorf("Config.%s: a setting, yet in notSettings (%s)", f, why)
		}
	}
	if _, ok := SettingNamed(""); ok {
		t.Error(`SettingNamed(""): found a setting of the library alone`)
	}
}

// TestSettingsCheck: a bad value of each setting that has a check is
// refused with an InputError naming the setting as its flag does, and the
// Config is left as it was.
func TestSettingsCheck(t *testing.T) {
	drop := HandlerFunc(func([]Packet) {})
	bad := map[string]func(*Config){
		"Links":           func(c *Config) { c.Links = []string{"a", "a"} },
		"MaxLinks":        func(c *Config) { c.MaxLinks = MaxLinks + 1 },
		"Promisc":         func(c *Config) { c.Promisc = PromiscOff + 1 },
		"Queues":          func(c *Config) { c.Queues = -1 },
		"FrameSize":       func(c *Config) { c.FrameSize = 3000 },
		"MultiBufferMode": func(c *Config) { c.MultiBufferMode = -1 },
		"RingSize":        func(c *Config) { c.RingSize = 100 },
		"AddedRingSize":   func(c *Config) { c.RingSize, c.AddedRingSize = 128, 256 },
		"MaxUMEM":         func(c *Config) { c.MaxUMEM = -1 },
		"Batch":           func(c *Config) { c.Batch = 1 },
		"CPUs":            func(c *Config) { c.CPUs = []int{7} },
		"InlineMax":       func(c *Config) { c.InlineMax = 300 },
		"FragOrder":       func(c *Config) { c.FragOrder = 5 },
		"MaxTxFrags":      func(c *Config) { c.MaxTxFrags = 100 },
		"Checksums":       func(c *Config) { c.Checksums = ChecksumsOff + 1 },
	}
	for _, s := range settings {
		if s.check == nil {
			continue
		}
		t.Run(s.Field, func(t *testing.T) {
			mod, ok := bad[s.Field]
			if !ok {
				t.Fatalf("Config.%s has a check, and no bad value here", s.Field)
			}
			c := Config{Links: []string{"a", "b"}, Handler: drop}
			if err := s.check(&c, twoCPUs); err != nil {
				t.Fatalf("a good Config: %v", err)
			}
			mod(&c)
			was := c
			was.Links = slices.Clone(c.Links)
			err := c.check(twoCPUs)
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("Config.check: %v, want an InputError", err)
			}
			name := s.Name
			if name == "" {
				name = strings.ToLower(s.Field)
			}
			if !strings.Contains(err.Error(), name) {
				t.Errorf("Config.check: %q does not name %s", err, name)
			}
			c.Handler, was.Handler = nil, nil // funcs are never deeply equal
			if !reflect.DeepEqual(c, was) {
				t.Errorf("Config.check changed the Config: %+v, was %+v", c, was)
			}
			t.Log(err)
		})
	}
}

// TestSettingsReconfigure: a Config that changes one setting alone
// (and what follows from it, also) is applied if the setting is live and
// listed for a restart if not, under its field, on a forwarder whose
// links cannot change (one without a Handler of its own running).
func TestSettingsReconfigure(t *testing.T) {
	links := twoLinks(func(n string) linkInfo { return vethLink(n, 2) })
	drop := HandlerFunc(func([]Packet) {})
	start := Config{Links: []string{"a", "b"}, Handler: drop, Queues: 2, RingSize: 128, HugePages: umem.HugePagesOff,
		Logger: slog.New(slog.DiscardHandler)}
	host := hostFacts{cpus: []int{0, 1}}
	changes := map[string]struct {
		mod  func(*Config)
		also []string // fields that follow the change
	}{
		"Links":           {func(c *Config) { c.Links = []string{"a", "c"} }, nil},
		"Handler":         {func(c *Config) { c.Handler = nil }, []string{"FragOrder"}},
		"MaxLinks":        {func(c *Config) { c.MaxLinks = 4 }, nil},
		"XDPMode":         {func(c *Config) { c.XDPMode = xsk.XDPGeneric }, nil},
		"ZeroCopy":        {func(c *Config) { c.ZeroCopy = xsk.ZeroCopyOff }, nil},
		"Promisc":         {func(c *Config) { c.Promisc = PromiscOff }, nil},
		"HugePages":       {func(c *Config) { c.HugePages = umem.HugePagesOn }, nil},
		"Queues":          {func(c *Config) { c.Queues = 1 }, nil},
		"FrameSize":       {func(c *Config) { c.FrameSize = 4096 }, nil},
		"MultiBufferMode": {func(c *Config) { c.MultiBufferMode = MultiBufferOn }, nil},
		"RingSize":        {func(c *Config) { c.RingSize = 256 }, []string{"AddedRingSize"}}, // auto: the links given's
		"AddedRingSize":   {func(c *Config) { c.AddedRingSize = 64 }, nil},
		"MaxUMEM":         {func(c *Config) { c.MaxUMEM = 512 << 20 }, nil},
		"Batch":           {func(c *Config) { c.Batch = 32 }, nil},
		"XPS":             {func(c *Config) { c.XPS = xps.ModeHash }, nil},
		"XPSAsymmetric":   {func(c *Config) { c.XPSAsymmetric = true }, nil},
		"FlowTableSize":   {func(c *Config) { c.FlowTableSize = 1024 }, nil},
		"CPUs":            {func(c *Config) { c.CPUs = []int{1, 0} }, nil},
		"Spin":            {func(c *Config) { c.Spin = 8 }, nil},
		"Coalesce":        {func(c *Config) { c.Coalesce = 100 * time.Microsecond }, nil},
		"BusyPoll":        {func(c *Config) { c.BusyPoll = 100 * time.Microsecond }, nil},
		"InlineMax":       {func(c *Config) { c.InlineMax = 100 }, nil},
		"FragOrder":       {func(c *Config) { c.FragOrder = 3 }, nil},
		"MaxTxFrags":      {func(c *Config) { c.MaxTxFrags = 8 }, nil},
		"Checksums":       {func(c *Config) { c.Checksums = ChecksumsOff }, nil},
		"Force":           {func(c *Config) { c.Force = true }, nil},
	}
	for _, s := range settings {
		t.Run(s.Field, func(t *testing.T) {
			ch, ok := changes[s.Field]
			if !ok {
				t.Fatalf("Config.%s: no change to make here", s.Field)
			}
			p, err := resolve(start, links, host)
			if err != nil {
				t.Fatal(err)
			}
			r, err := umem.New(p.UMEM)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			f := &Forwarder{plan: p, links: links, host: host, doms: []*domain{{region: r}}}
			f.live.inlineMax.Store(int32(p.inlineBytes()))
			f.live.xpsMode.Store(uint32(p.XPS))
			next := start
			ch.mod(&next)
			rc, err := f.Reconfigure(next)
			if err != nil || rc.Failed != nil {
				t.Fatalf("Reconfigure: %v, failed %v", err, rc.Failed)
			}
			fields := func(cs []Change) (out []string) {
				for _, c := range cs {
					out = append(out, c.Field)
				}
				return out
			}
			applied, restart := fields(rc.Applied), fields(rc.Restart)
			t.Logf("applied %v, restart %v", rc.Applied, rc.Restart)
			want, other := restart, applied
			if f.liveHere(&s) {
				want, other = applied, restart
			}
			if !slices.Contains(want, s.Field) || slices.Contains(other, s.Field) {
				t.Errorf("applied %v, restart %v: want %s in %s alone (Reload %d)", applied, restart, s.Field,
					map[bool]string{true: "applied", false: "restart"}[f.liveHere(&s)], s.Reload)
			}
			for _, c := range slices.Concat(applied, restart) {
				if c != s.Field && !slices.Contains(ch.also, c) {
					t.Errorf("%s changed too", c)
				}
			}
		})
	}
}

// TestSettingsSpelling: each setting fwd spells reads back what it
// writes, its default (the zero Config's) included, so a flag, a config
// file and a reload read the same values; a word none of its values
// spells is refused naming the word; the links, the mode, MaxLinks and
// Batch are xdpfwd's to spell, or no flag's.
func TestSettingsSpelling(t *testing.T) {
	values := map[string][]string{
		"xdp-mode": {"native", "generic"}, "zerocopy": {"on", "off"}, "promisc": {"on", "off"},
		"hugepages": {"on", "off"}, "queues": {"3"}, "frame-size": {"4096"}, "multi-buffer": {"on", "true", "false"},
		"ring-size": {"1024"}, "added-ring-size": {"64"}, "max-umem": {"256MiB", "2GiB", "12345"},
		"xps": {"hash", "cpu"}, "xps-asymmetric": {"true"}, "flow-table-size": {"1024"}, "cpus": {"1", "0,1", "2-3"},
		"spin": {"off", "busy", "64", "0"}, "coalesce": {"100µs", "1ms"}, "busy-poll": {"50µs", "1s"},
		"inline-max": {"off", "100", "0"}, "frag-order": {"off", "3", "-2"}, "max-tx-frags": {"8"},
		"complete-checksums": {"on", "off"}, "force": {"true"},
	}
	for _, s := range settings {
		if !s.Spelled() {
			if s.Name != "" && s.Field != "Links" && s.Field != "Handler" && s.Field != "MaxLinks" {
				t.Errorf("--%s: not spelled by fwd", s.Name)
			}
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			field := func(c *Config) any { return reflect.ValueOf(c).Elem().FieldByName(s.Field).Interface() }
			vs, ok := values[s.Name]
			if !ok {
				t.Fatalf("no values to spell here")
			}
			var zero Config
			for _, v := range append([]string{s.Format(&zero)}, vs...) {
				var c Config
				if err := s.Set(&c, v); err != nil {
					t.Errorf("Set(%q): %v", v, err)
					continue
				}
				written := s.Format(&c)
				var back Config
				if err := s.Set(&back, written); err != nil || !reflect.DeepEqual(field(&back), field(&c)) {
					t.Errorf("Set(%q) gives %v, written %q, which reads back as %v, %v", v, field(&c), written, field(&back), err)
				}
				t.Logf("%q → %v → %q", v, field(&c), written)
			}
			if isBool := reflect.TypeOf(field(&zero)).Kind() == reflect.Bool; (s.ValueName() == "") != isBool {
				t.Errorf("ValueName %q: help names a value unless it is a boolean's", s.ValueName())
			}
			if err := s.Set(&zero, "bogus"); err == nil || !strings.Contains(err.Error(), "bogus") {
				t.Errorf(`Set("bogus"): %v, want refused naming it`, err)
			}
		})
	}
}
