// `xdpfwd run`'s settings: the one parser of its command line and
// --config file (parseRun), and the reloader that applies the file again
// on SIGHUP.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xdpfwd/xdpfwd/fwd"
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
// Flags given on the command line override the file. The command line, the
// file and a SIGHUP reload go through one parser (parseRun): the same
// setting spelled the same way is the same fwd.Config value everywhere,
// zero values included. A SIGHUP parses the command line and the re-read
// file again and applies the difference (fwd.Forwarder.Reconfigure): what
// can change while running (queues, xps, inline-max, stats-interval) is
// put in force, anything else that differs is logged as needing a restart.

// runSettings is one parse of `xdpfwd run`: its flags, filled from the
// command line and the --config file, and the fwd.Config they make.
type runSettings struct {
	fs                                *flag.FlagSet
	ff                                fwdFlags
	interval                          time.Duration
	summary, metrics, config, control string
	// takeover is --takeover: the control socket of the daemon whose
	// datapath this one takes over (takeover.go), "auto", or "".
	takeover string
	// afterHandover is --after-handover: "exit" or "wait".
	afterHandover string
	pidFile       string
	waitLinks     bool
	gf            genFlags // --mode txonly's

	cfg    fwd.Config
	logger *slog.Logger
	// given are the flags set on the command line; file the --config
	// file's settings (nil without one).
	given map[string]bool
	file  map[string][]string
}

// newRunFlags registers the flags of `xdpfwd run` on a new flag set: every
// setting of the table.
func newRunFlags() *runSettings {
	s := &runSettings{fs: flag.NewFlagSet("run", flag.ContinueOnError)}
	registerSettings(s.fs, flagVars{ff: &s.ff, run: s}, forwarderFlag, runLinkFlag, runFlag)
	return s
}

// parseRun is the one parser of `xdpfwd run`'s settings: the command line,
// then the --config file for every flag the command line does not set,
// then the fwd.Config they make (logging to stderr). A reload calls it
// again with the same args.
func parseRun(args []string, stderr io.Writer) (*runSettings, error) {
	s := newRunFlags()
	if err := parseFlags(s.fs, args, stderr); err != nil {
		return nil, err
	}
	s.given = commandLineFlags(s.fs)
	if s.config != "" {
		vals, err := applyConfigFile(s.fs, s.config)
		if err != nil {
			return nil, err
		}
		s.file = vals
	}
	if s.interval < 0 {
		return nil, usageError{"--stats-interval must not be negative"}
	}
	if s.afterHandover != "exit" && s.afterHandover != "wait" {
		return nil, usageError{fmt.Sprintf("--after-handover %q: want exit or wait", s.afterHandover)}
	}
	// A successor serves the socket it took over: another --control
	// would be ignored.
	if t := s.takeover; t != "" && t != "auto" && s.control != "" && s.control != t {
		return nil, usageError{fmt.Sprintf("--takeover %s and --control %s: a successor serves the control socket it took the datapath over on", t, s.control)}
	}
	var err error
	if s.cfg, s.logger, err = s.ff.config(stderr); err != nil {
		return nil, err
	}
	if err := s.ff.checkLinks(len(s.cfg.Links), s.cfg.MaxLinks); err != nil {
		return nil, err
	}
	// Refused before run acts on anything (the summary file, waiting for
	// links), as fwd.New would refuse it. txonly builds no Forwarder.
	if err := s.cfg.Check(); err != nil && s.ff.mode != "txonly" {
		return nil, err
	}
	return s, nil
}

// value is flag k's value as the flag spells it.
func (s *runSettings) value(k string) string {
	if f := s.fs.Lookup(k); f != nil {
		return f.Value.String()
	}
	return ""
}

// configFlags name, by fwd.Config field, the flag that sets it (the
// settings table's fields): how a reload's changes are reported. The
// forwarder compares these (resolved); every other flag is xdpfwd's own
// and compared here.
var configFlags = fieldFlags(settings)

// flagOf is the flag of fwd.Config field name.
func flagOf(field string) string {
	if f, ok := configFlags[field]; ok {
		return f
	}
	return field
}

// configFlag reports whether flag k sets a fwd.Config field (mode aside:
// its switch settings are xdpfwd's, so a change of mode is compared here
// too).
func configFlag(k string) bool {
	for _, f := range configFlags {
		if f == k && k != "mode" {
			return true
		}
	}
	return false
}

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
		if s := settingNamed(k); s != nil && s.noKey || fs.Lookup(k) == nil {
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
	// args is the command line, parsed again with the re-read file.
	args []string
	// start is the parse the forwarder was built from; last the newest
	// parse a reload read (nil before the first), whose live settings a
	// forwarder rebuilt from start gets (restore).
	start, last *runSettings
	f           *fwd.Forwarder
	logger      *slog.Logger
	// ctl is the control socket, nil in tests without one. Its linkOps
	// is held while a reload reads the links and changes them, so that
	// no link added over the socket in between is taken for one the
	// file dropped; and it is told the file's links after (configLinks).
	ctl *controlSocket
	// needsRestart are the keys the last reload read changed and could
	// not apply: a successor applies them (successor.go).
	needsRestart []string
}

// lockLinks holds the control socket's linkOps, if any, until the
// returned function.
func (r *reloader) lockLinks() (unlock func()) {
	if r.ctl == nil {
		return func() {}
	}
	r.ctl.linkOps.Lock()
	return r.ctl.linkOps.Unlock
}

// restore brings a forwarder rebuilt from the start-up Config (after
// --wait-for-links saw a link come back) to the settings reloads applied
// since, and returns the stats interval in force.
func (r *reloader) restore(interval time.Duration) time.Duration {
	if r.last == nil {
		return interval
	}
	// r.last has the command line's flags as at start: only the
	// file's settings differ. Its links are fixed (a rebuilt forwarder's
	// links cannot change: fwd's links.go), as the last one's were.
	next := r.last.cfg
	unlock := r.lockLinks()
	next.Links = slices.DeleteFunc(r.f.Links(), func(s string) bool { return s == "" })
	rc, err := r.f.Reconfigure(next)
	unlock()
	err = errors.Join(err, rc.Failed)
	if applied := r.applied(rc, r.last); len(applied) > 0 {
		r.logger.Info("reloaded settings applied to the rebuilt forwarder", "file", r.last.config, "applied", strings.Join(applied, " "))
	}
	if err != nil {
		r.logger.Error("reloaded settings not applied to the rebuilt forwarder", "err", err)
	}
	return r.last.interval
}

// reloadLinks is the link list a reload asks the forwarder for: the links
// it has (live, holes "" included), less those the file listed before
// (was) and no longer does (now), plus those it lists now. A link added
// over the control socket (a pod's, by the CNI plugin) is no link of the
// file's: a reload keeps it.
func reloadLinks(live, was, now []string) []string {
	var out []string
	for _, n := range live {
		if n != "" && (slices.Contains(now, n) || !slices.Contains(was, n)) {
			out = append(out, n)
		}
	}
	for _, n := range now {
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// applied names the live changes of rc as flag=value, spelled as next's
// flags spell them.
func (r *reloader) applied(rc fwd.Reconfiguration, next *runSettings) []string {
	var out []string
	for _, c := range rc.Applied {
		k := flagOf(c.Field)
		out = append(out, k+"="+next.value(k))
	}
	return out
}

// reload parses the command line and the re-read file again and applies
// the difference; it returns the new stats interval (or the old one) and
// an error that leaves everything as it was when the file is bad, or
// names what could not be applied.
func (r *reloader) reload(interval time.Duration) (time.Duration, error) {
	next, err := parseRun(r.args, io.Discard)
	if err != nil {
		return interval, err
	}
	prev := r.start
	if r.last != nil {
		prev = r.last
	}
	cfg := next.cfg
	unlock := r.lockLinks()
	if r.ctl != nil && r.ctl.handedOver.Load() {
		// It waited on the lock a handover held: the datapath is the
		// successor's, which reads the file itself.
		unlock()
		r.needsRestart = nil
		return interval, errHandedOver
	}
	live := r.f.Links()
	cfg.Links = reloadLinks(live, prev.cfg.Links, next.cfg.Links)
	rc, err := r.f.Reconfigure(cfg)
	if err == nil && r.ctl != nil {
		dropped := slices.DeleteFunc(live, func(n string) bool { return n == "" || slices.Contains(cfg.Links, n) })
		r.ctl.configLinks(r.f, next.cfg.Links, dropped)
	}
	unlock()
	if err != nil {
		return interval, err
	}
	r.last = next
	applied := r.applied(rc, next)
	var restart []string
	for _, c := range rc.Restart {
		restart = appendNew(restart, flagOf(c.Field))
	}
	// xdpfwd's own settings: the stats interval changes live, the rest
	// (logging, the switch's database, sockets and files) at a restart.
	next.fs.VisitAll(func(fl *flag.Flag) {
		k := fl.Name
		switch {
		case k == "stats-interval":
			if next.interval != interval {
				interval = next.interval
				applied = append(applied, k+"="+fl.Value.String())
			}
		case !configFlag(k) && fl.Value.String() != r.start.value(k):
			restart = appendNew(restart, k)
		}
	})
	var overridden []string
	for _, k := range unionKeys(r.start.file, next.file) {
		if next.given[k] && !slices.Equal(r.start.file[k], next.file[k]) {
			overridden = append(overridden, k)
		}
	}
	slices.Sort(restart)
	r.needsRestart = restart
	r.logger.Info("config reloaded", "file", next.config, "applied", strings.Join(applied, " "),
		"needs_restart", strings.Join(restart, " "), "overridden_by_flags", strings.Join(overridden, " "))
	if len(restart) > 0 {
		r.logger.Warn("config changes that need a restart were not applied", "keys", strings.Join(restart, " "), "changes", rc.RestartError())
	}
	if rc.Failed != nil {
		return interval, failedChanges{rc.Failed}
	}
	return interval, nil
}

// failedChanges is reload's error when the file was read and applied but
// for some of its changes (a link that could not be added): the others,
// logged as applied, are in force.
type failedChanges struct{ error }

func (f failedChanges) Unwrap() error { return f.error }

func appendNew(s []string, v string) []string {
	if slices.Contains(s, v) {
		return s
	}
	return append(s, v)
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
