package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/xps"
)

// A --config file is YAML whose keys are the flag names of `xdpfwd run`,
// without dashes in front:
//
//	link: [eth1, eth2]
//	queues: 2
//	inline-max: 128
//	xps: sticky
//	stats-interval: 5s
//
// Flags given on the command line override the file. SIGHUP re-reads the
// file and applies, without a restart, what can change while running
// (reloadable); anything else that changed is logged as needing a restart.

// reloadable are the keys a SIGHUP applies.
var reloadable = []string{"inline-max", "xps", "queues", "stats-interval"}

// readConfigFile returns the file's settings as flag values (lists as
// several values), checked against the flags fs knows.
func readConfigFile(fs *flag.FlagSet, path string) (map[string][]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError{fmt.Sprintf("--config: %v", err)}
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, usageError{fmt.Sprintf("--config %s: %v", path, err)}
	}
	out := map[string][]string{}
	for k, v := range raw {
		if k == "config" || fs.Lookup(k) == nil {
			return nil, usageError{fmt.Sprintf("--config %s: unknown setting %q (keys are the flag names of 'xdpfwd run')", path, k)}
		}
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				out[k] = append(out[k], fmt.Sprint(e))
			}
		case nil:
		default:
			out[k] = []string{fmt.Sprint(v)}
		}
	}
	return out, nil
}

// applyConfigFile sets every flag the file names and the command line did
// not, and returns the file's settings.
func applyConfigFile(fs *flag.FlagSet, path string) (map[string][]string, error) {
	vals, err := readConfigFile(fs, path)
	if err != nil {
		return nil, err
	}
	given := commandLineFlags(fs)
	for k, vs := range vals {
		if given[k] {
			continue
		}
		for _, v := range vs {
			if err := fs.Set(k, v); err != nil {
				return nil, usageError{fmt.Sprintf("--config %s: %s: %v", path, k, err)}
			}
		}
	}
	return vals, nil
}

func commandLineFlags(fs *flag.FlagSet) map[string]bool {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return given
}

// reloader applies a re-read config file to a running forwarder.
type reloader struct {
	fs    *flag.FlagSet
	path  string
	given map[string]bool // set on the command line: the file cannot change them
	// initial is the file the forwarder's Config was built from; current
	// is the file as far as it is in force: a key that failed, needs a
	// restart or is overridden by a flag keeps its old value here, so the
	// next reload tries (or reports) it again.
	initial, current map[string][]string
	f                *fwd.Forwarder
	logger           *slog.Logger
}

// value is the flag value of key k in file vals: its last value, or the
// flag's default when the file does not name it.
func (r *reloader) value(vals map[string][]string, k string) string {
	if vs := vals[k]; len(vs) > 0 {
		return vs[len(vs)-1]
	}
	if fl := r.fs.Lookup(k); fl != nil {
		return fl.DefValue
	}
	return ""
}

// restore brings a forwarder rebuilt from the start-up Config (after
// --wait-for-links saw a link come back) to the settings reloads applied
// since, and returns the stats interval in force.
func (r *reloader) restore(interval time.Duration) time.Duration {
	var restored []string
	var errs []error
	for _, k := range reloadable {
		if r.given[k] || slices.Equal(r.initial[k], r.current[k]) {
			continue
		}
		v := r.value(r.current, k)
		if err := r.apply(k, v, &interval); err != nil {
			errs = append(errs, err)
			continue
		}
		restored = append(restored, k+"="+v)
	}
	if len(restored) > 0 {
		r.logger.Info("reloaded settings applied to the rebuilt forwarder", "file", r.path, "applied", strings.Join(restored, " "))
	}
	if err := errors.Join(errs...); err != nil {
		r.logger.Error("reloaded settings not applied to the rebuilt forwarder", "err", err)
	}
	return interval
}

// reload re-reads the file and applies what changed; it returns the new
// stats interval (or the old one) and an error that leaves everything as
// it was when the file is bad.
func (r *reloader) reload(interval time.Duration) (time.Duration, error) {
	next, err := readConfigFile(r.fs, r.path)
	if err != nil {
		return interval, err
	}
	var applied, restart, overridden []string
	var errs []error
	inForce := maps.Clone(r.current)
	for _, k := range unionKeys(r.current, next) {
		if slices.Equal(r.current[k], next[k]) {
			continue
		}
		if r.given[k] {
			overridden = append(overridden, k)
			continue
		}
		if !slices.Contains(reloadable, k) {
			restart = append(restart, k)
			continue
		}
		v := r.value(next, k) // removed from the file: back to the default
		if err := r.apply(k, v, &interval); err != nil {
			errs = append(errs, err)
			continue
		}
		applied = append(applied, k+"="+v)
		if _, ok := next[k]; ok {
			inForce[k] = next[k]
		} else {
			delete(inForce, k)
		}
	}
	r.current = inForce
	r.logger.Info("config reloaded", "file", r.path, "applied", strings.Join(applied, " "),
		"needs_restart", strings.Join(restart, " "), "overridden_by_flags", strings.Join(overridden, " "))
	if len(restart) > 0 {
		r.logger.Warn("config changes that need a restart were not applied", "keys", strings.Join(restart, " "))
	}
	return interval, errors.Join(errs...)
}

func (r *reloader) apply(k, v string, interval *time.Duration) error {
	var n int
	switch k {
	case "inline-max":
		n, err := fwd.ParseInlineMax(v)
		if err != nil {
			return err
		}
		return r.f.SetInlineMax(n)
	case "queues":
		if _, err := fmt.Sscan(v, &n); err != nil {
			return fmt.Errorf("queues %q: %w", v, err)
		}
		if n == 0 {
			n = r.f.DefaultQueues() // as at start, within the workers started
		}
		return r.f.SetQueues(n)
	case "xps":
		m, err := xps.ParseMode(v)
		if err != nil {
			return err
		}
		r.f.SetXPS(m)
	case "stats-interval":
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("stats-interval %q: want a duration ≥ 0", v)
		}
		*interval = d
	}
	return nil
}

func unionKeys(a, b map[string][]string) []string {
	var ks []string
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	return ks
}
