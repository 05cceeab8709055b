package main

// Tests that hold the settings table (settings.go) to what it describes:
// the flags run and demo register, fwd.Config's fields, what a reload does
// with each setting, and docs/reference.md's flag table.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// sameDefault reports whether a flag's default, as the flag spells it,
// is def: durations by value ("300s" is 5m0s).
func sameDefault(got, def string) bool {
	if got == def {
		return true
	}
	a, errA := time.ParseDuration(got)
	b, errB := time.ParseDuration(def)
	return errA == nil && errB == nil && a == b
}

// TestSettingsFlags: run registers one flag per setting of the table and
// nothing else, each with the table's default and help; the demo takes
// the forwarder's settings and not run's link flags; each group's
// settings are together, so that the groups of --help are the table's.
func TestSettingsFlags(t *testing.T) {
	seen := map[string]bool{}
	groups := map[string]bool{}
	for i, s := range settings {
		if seen[s.name] {
			t.Errorf("setting %s: declared twice", s.name)
		}
		seen[s.name] = true
		if s.group != "" && groups[s.group] && settings[i-1].group != s.group {
			t.Errorf("setting %s: group %q is not together in the table", s.name, s.group)
		}
		groups[s.group] = true
		if s.group == "" && s.scope != runFlag {
			t.Errorf("setting %s: no group, yet a forwarder setting (only txonly's go without)", s.name)
		}
	}

	rs := newRunFlags()
	var n int
	rs.fs.VisitAll(func(f *flag.Flag) {
		n++
		s := settingNamed(f.Name)
		if s == nil {
			t.Errorf("--%s: a flag of run, not in the settings table", f.Name)
			return
		}
		if !sameDefault(f.DefValue, s.def) {
			t.Errorf("--%s: default %q, the table says %q", f.Name, f.DefValue, s.def)
		}
		if f.Usage != s.help {
			t.Errorf("--%s: help %q, the table says %q", f.Name, f.Usage, s.help)
		}
	})
	if n != len(settings) {
		t.Errorf("run has %d flags, the table %d settings", n, len(settings))
	}

	// The table registered anew: the same flags, of the same types.
	fresh := flag.NewFlagSet("run", flag.ContinueOnError)
	var v runSettings
	registerSettings(fresh, flagVars{ff: &v.ff, run: &v}, forwarderFlag, runLinkFlag, runFlag)
	fresh.VisitAll(func(f *flag.Flag) {
		g := rs.fs.Lookup(f.Name)
		if g == nil {
			t.Errorf("--%s: registered from the table, not a flag of run", f.Name)
			return
		}
		if f.DefValue != g.DefValue || f.Usage != g.Usage || reflect.TypeOf(f.Value) != reflect.TypeOf(g.Value) {
			t.Errorf("--%s: from the table %T default %q, run's %T default %q", f.Name, f.Value, f.DefValue, g.Value, g.DefValue)
		}
	})

	demo := helpFlags(t, "demo")
	for _, s := range settings {
		_, taken := demo[s.name]
		switch {
		case s.scope == forwarderFlag && !taken:
			t.Errorf("--%s: a forwarder setting, not taken by demo", s.name)
		case s.scope == runLinkFlag && taken:
			t.Errorf("--%s: run's alone (the demo makes its own links), yet a flag of demo", s.name)
		}
	}
}

// notSettings are the fwd.Config fields no setting of xdpfwd sets, and
// why.
var notSettings = map[string]string{
	"Batch":  "no flag: fwd's default (--batch is txonly's generator's)",
	"NoPin":  "no flag: --cpus says where workers are pinned, and they are by default",
	"Logger": "made of --log-format and --log-level, which the reloader compares as xdpfwd's own",
	"Env":    "the kernel; fwdtest's fake in tests",
}

// TestSettingsConfigFields: every field the table names is fwd.Config's,
// set by one setting only; every field of fwd.Config is a setting's or
// in notSettings; configFlags is the table's.
func TestSettingsConfigFields(t *testing.T) {
	cfg := reflect.TypeFor[fwd.Config]()
	by := map[string]string{}
	for _, s := range settings {
		if f := s.field; f != "" {
			if _, ok := cfg.FieldByName(f); !ok {
				t.Errorf("setting %s: sets fwd.Config.%s, which is no field", s.name, f)
			}
			if o, ok := by[f]; ok {
				t.Errorf("fwd.Config.%s: set by %s and %s", f, o, s.name)
			}
			by[f] = s.name
		}
	}
	for _, fs := range fwd.Settings() {
		if fs.Name != "" && settingNamed(fs.Name) == nil {
			t.Errorf("fwd's setting %s (Config.%s): no setting of xdpfwd extends it", fs.Name, fs.Field)
		}
	}
	for i := range cfg.NumField() {
		f := cfg.Field(i).Name
		_, set := by[f]
		why, not := notSettings[f]
		switch {
		case !set && !not:
			t.Errorf("fwd.Config.%s: no setting sets it, and notSettings does not say why", f)
		case set && not:
			t.Errorf("fwd.Config.%s: set by %s, yet in notSettings (%s)", f, by[f], why)
		}
	}
	for f := range notSettings {
		if _, ok := cfg.FieldByName(f); !ok {
			t.Errorf("notSettings names fwd.Config.%s, which is no field", f)
		}
	}
	if !maps.Equal(configFlags, by) {
		t.Errorf("configFlags %v, the table's %v", configFlags, by)
	}
}

// reloadChange is a setting's value in the file of TestSettingsReload's
// reload, other than the base file's (the mode's defaults, and the keys
// of reloadBase): one that resolves to another forwarder. A list is a
// repeated flag's.
var reloadChange = map[string][]string{
	"link": {"s0", "s2"}, "mode": {"reflect"}, "eth-peer": {"02:00:00:00:00:02"},
	"fdb-size": {"1024"}, "fdb-age": {"60s"}, "fdb-static": {"02:00:00:00:00:01=s0"},
	"access-vlan": {"s0=100"}, "trunk": {"s1=0,100"},
	"max-links": {"8"}, "port-security": {"off"}, "xdp-mode": {"generic"}, "zerocopy": {"on"},
	"promisc": {"off"}, "hugepages": {"on"},
	"queues": {"1"}, "frame-size": {"4096"}, "multi-buffer": {"on"}, "ring-size": {"128"},
	"added-ring-size": {"128"}, "max-umem": {"2GiB"}, "xps": {"hash"}, "xps-asymmetric": {"true"},
	"flow-table-size": {"1024"}, "cpus": {"0"}, "spin": {"off"}, "coalesce": {"100us"}, "busy-poll": {"100us"},
	"inline-max": {"128"}, "frag-order": {"3"}, "max-tx-frags": {"8"}, "complete-checksums": {"on"},
	"force": {"true"}, "wait-for-links": {"true"}, "stats-interval": {"5s"}, "summary": {"/nonexistent/s.json"},
	"metrics": {"127.0.0.1:0"}, "control": {"off"}, "after-handover": {"wait"}, "pid-file": {"/nonexistent/x.pid"},
	"log-format": {"json"}, "log-level": {"debug"},
	"size": {"128"}, "count": {"10"}, "duration": {"1s"}, "rate": {"1k"}, "flows": {"8"}, "flows-by": {"ip"},
	"vlan": {"5"}, "batch": {"32"}, "dst-mac": {"02:00:00:00:00:03"}, "src-ip": {"198.18.0.9"},
	"dst-ip": {"198.18.0.8"}, "src-port": {"2000"}, "dst-port": {"7"},
}

// reloadBase is the base file of TestSettingsReload's forwarders, by
// mode: two links of two queues each, two workers, little memory.
var reloadBase = map[string]map[string][]string{
	"switch":   {"link": {"s0", "s1"}, "mode": {"switch"}, "queues": {"2"}, "max-links": {"4"}, "hugepages": {"off"}},
	"xconnect": {"link": {"s0", "s1"}, "queues": {"2"}, "hugepages": {"off"}},
	"mac":      {"link": {"s0", "s1"}, "mode": {"mac"}, "eth-peer": {"02:00:00:00:00:01"}, "queues": {"2"}, "hugepages": {"off"}},
}

// TestSettingsReload: a reload that changes a setting puts it in force,
// or logs it as needing a restart, as the table says (its reload), and
// reports it under its name: each setting changed alone in the file of a
// running forwarder (fwdtest's in-memory links), then changed back. The
// forwarder's side of it is fwd's restartFields and Reconfigure; the
// reloader's, its comparison of xdpfwd's own settings.
func TestSettingsReload(t *testing.T) {
	env := fwdtest.New()
	for _, n := range []string{"s0", "s1", "s2"} {
		env.AddLink(n, fwdtest.LinkOptions{Queues: 2})
	}
	for _, mode := range []string{"switch", "xconnect", "mac"} {
		t.Run(mode, func(t *testing.T) {
			rt := startReloadable(t, env, reloadBase[mode])
			for _, s := range settings {
				switch {
				case s.noKey:
					continue
				case mode == "xconnect" && s.name != "link",
					mode == "mac" && s.name != "eth-peer",
					mode == "switch" && s.name == "eth-peer": // mac's alone
					continue
				}
				change, ok := reloadChange[s.name]
				if !ok {
					t.Errorf("setting %s: no value to change it to in reloadChange", s.name)
					continue
				}
				file := maps.Clone(reloadBase[mode])
				file[s.name] = change
				applied, restart := rt.reload(t, file)
				wantLive := s.reload == fwd.Live || s.reload == fwd.LiveLinks && linksAtRuntime(mode)
				t.Logf("%s: %v → applied %q, needs restart %q", s.name, change, applied, restart)
				if wantLive && (!slices.Contains(applied, s.name) || slices.Contains(restart, s.name)) {
					t.Errorf("%s changed: applied %q, needs restart %q; the table says a reload puts it in force", s.name, applied, restart)
				}
				if !wantLive && (!slices.Contains(restart, s.name) || slices.Contains(applied, s.name)) {
					t.Errorf("%s changed: applied %q, needs restart %q; the table says it needs a restart", s.name, applied, restart)
				}
				if _, restart := rt.reload(t, reloadBase[mode]); len(restart) > 0 {
					t.Fatalf("%s changed back: %q still need a restart", s.name, restart)
				}
			}
		})
	}
}

// reloadable is a running forwarder of fwdtest's links, built as run
// builds one from a --config file, and its reloader.
type reloadable struct {
	path string
	rl   *reloader
	log  *bytes.Buffer
}

// startReloadable runs a forwarder of the config file file.
func startReloadable(t *testing.T, env *fwdtest.Env, file map[string][]string) *reloadable {
	t.Helper()
	rt := &reloadable{path: filepath.Join(t.TempDir(), "xdpfwd.yaml"), log: &bytes.Buffer{}}
	rt.write(t, file)
	args := []string{"--config", rt.path}
	st, err := parseRun(args, io.Discard)
	if err != nil {
		t.Fatalf("parse %v: %v", file, err)
	}
	cfg := st.cfg
	cfg.Env = env
	f, err := fwd.New(cfg)
	if err != nil {
		t.Fatalf("fwd.New of %v: %v", file, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		f.Shutdown()
		f.Close()
	})
	rt.rl = &reloader{args: args, start: st, f: f, logger: slog.New(slog.NewJSONHandler(rt.log, nil))}
	return rt
}

// write writes file as YAML, each value quoted, a repeated flag's as a
// list.
func (rt *reloadable) write(t *testing.T, file map[string][]string) {
	t.Helper()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(file)) {
		vs := file[k]
		q := make([]string, len(vs))
		for i, v := range vs {
			q[i] = fmt.Sprintf("%q", v)
		}
		if len(vs) == 1 && k != "link" {
			fmt.Fprintf(&b, "%s: %s\n", k, q[0])
		} else {
			fmt.Fprintf(&b, "%s: [%s]\n", k, strings.Join(q, ", "))
		}
	}
	if err := os.WriteFile(rt.path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// reload writes file and reloads it, and returns the settings the reload
// logged as applied and as needing a restart.
func (rt *reloadable) reload(t *testing.T, file map[string][]string) (applied, restart []string) {
	t.Helper()
	rt.write(t, file)
	rt.log.Reset()
	if _, err := rt.rl.reload(time.Second); err != nil {
		t.Fatalf("reload of %v: %v\n%s", file, err, rt.log)
	}
	for _, line := range strings.Split(strings.TrimSpace(rt.log.String()), "\n") {
		var rec struct {
			Msg          string `json:"msg"`
			Applied      string `json:"applied"`
			NeedsRestart string `json:"needs_restart"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Msg != "config reloaded" {
			continue
		}
		for _, a := range strings.Fields(rec.Applied) {
			k, _, _ := strings.Cut(a, "=")
			applied = append(applied, k)
		}
		return applied, strings.Fields(rec.NeedsRestart)
	}
	t.Fatalf("reload of %v: no \"config reloaded\" logged:\n%s", file, rt.log)
	return nil, nil
}

// TestSettingsDocs: docs/reference.md's table of `xdpfwd run` names every
// setting, in the table's order and group, with its default (a zero value
// with what it means, "0 (auto)", or that alone); every flag it names is a
// setting; the settings its reload paragraph says change while running
// are those the table says.
func TestSettingsDocs(t *testing.T) {
	sec := docSection(t, "docs/reference.md", readDoc(t, "docs/reference.md"), "### `xdpfwd run`")
	plain := func(s string) string { return strings.ReplaceAll(s, "`", "") }
	group := ""
	var order []string
	for _, row := range tableRows(sec) {
		if m := regexp.MustCompile(`^\*\*(.+)\*\*$`).FindStringSubmatch(row[0]); m != nil {
			group = m[1]
			continue
		}
		var names []string
		for _, m := range flagName.FindAllStringSubmatch(row[0], -1) {
			if !slices.Contains(names, m[1]) {
				names = append(names, m[1])
			}
		}
		defs := []string{row[1]}
		if len(names) > 1 {
			defs = strings.Split(row[1], ", ")
		}
		if len(defs) != len(names) {
			t.Errorf("docs row %q: %d defaults for %d flags", row[0], len(defs), len(names))
			continue
		}
		for i, name := range names {
			order = append(order, name)
			s := settingNamed(name)
			if s == nil {
				t.Errorf("--%s: in docs/reference.md's table of run, not a setting", name)
				continue
			}
			if want := cmp.Or(s.group, "run"); group != want {
				t.Errorf("--%s: under %q in docs/reference.md, in group %q in the table", name, group, want)
			}
			d := plain(defs[i])
			head, _, _ := strings.Cut(d, " (")
			switch {
			case s.def == "" && s.zero == "":
				if d != "—" {
					t.Errorf("--%s: docs give the default %q, want — (none)", name, d)
				}
			case s.zero != "" && d == plain(s.zero):
			case !sameDefault(head, s.def):
				t.Errorf("--%s: docs give the default %q, the table %q", name, d, s.def)
			}
			if s.zero != "" && !strings.Contains(plain(strings.Join(row, " ")), plain(s.zero)) {
				t.Errorf("--%s: docs do not say what its zero value means, %q", name, s.zero)
			}
		}
	}
	var names []string
	for _, s := range settings {
		names = append(names, s.name)
	}
	if !slices.Equal(order, names) {
		t.Errorf("docs/reference.md's table of run lists\n%q\nthe settings table\n%q", order, names)
	}

	// The whole text: docSection would end the section at the "# " of
	// its YAML example's comment.
	m := regexp.MustCompile(`(?s)what can change while running:(.*?); it logs`).FindStringSubmatch(readDoc(t, "docs/operating.md"))
	if m == nil {
		t.Fatal("docs/operating.md's reload section does not say what can change while running")
	}
	var docLive, tableLive []string
	for _, w := range regexp.MustCompile("`([a-z-]+)`").FindAllStringSubmatch(m[1], -1) {
		docLive = append(docLive, w[1])
	}
	for _, s := range settings {
		if s.reload != fwd.Restart {
			tableLive = append(tableLive, s.name)
		}
	}
	slices.Sort(docLive)
	slices.Sort(tableLive)
	if !slices.Equal(docLive, tableLive) {
		t.Errorf("docs/operating.md: a reload changes %q while running; the table says %q", docLive, tableLive)
	}
}

// TestSettingsZero: a setting whose zero value means something (the
// table's zero) and which sets fwd.Config fields gives them their zero
// value when it is given its zero (0, or "" for a list): the table's
// zero, which the docs give, is the Config's too. In switch mode, so
// that --max-links counts.
func TestSettingsZero(t *testing.T) {
	n := 0
	for _, s := range settings {
		if s.zero == "" || s.field == "" {
			continue
		}
		zero := "0"
		if f, _ := reflect.TypeFor[fwd.Config]().FieldByName(s.field); f.Type.Kind() == reflect.Slice {
			zero = ""
		}
		st, err := parseRun([]string{"--mode", "switch", "--link", "a", "--link", "b", "--" + s.name + "=" + zero}, io.Discard)
		if err != nil {
			t.Errorf("--%s=%q: %v", s.name, zero, err)
			continue
		}
		n++
		t.Logf("--%s=%q: %s", s.name, zero, s.zero)
		if v := reflect.ValueOf(st.cfg).FieldByName(s.field); !v.IsZero() {
			t.Errorf("--%s=%q (%s): fwd.Config.%s is %v, not its zero value", s.name, zero, s.zero, s.field, v)
		}
	}
	if n == 0 {
		t.Error("no setting has a zero value that sets fwd.Config")
	}
}
