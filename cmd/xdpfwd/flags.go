// The command line: the flag.Value types of the flags, fwdFlags (the
// forwarder's flags, which run and demo share, registered from the
// settings table; those fwd spells set a fwd.Config directly,
// settingFlag) and its translation into a fwd.Config and a mode's
// handler, and the parse helpers every command's flags go through
// (parseFlags).

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// fwdFlags are the forwarder's flags, shared by run and demo.
type fwdFlags struct {
	// cfg holds the settings fwd spells (fwd.Setting.Set), which their
	// flags and config keys set directly (settingFlag): everything of the
	// Config but the links, the mode's handler, --max-links and the
	// logger, which config adds.
	cfg       fwd.Config
	links     listFlag
	logFormat string
	logLevel  string
	maxLinks  maxLinksFlag

	mode      string
	fdbAge    time.Duration
	fdbSize   int
	fdbStatic listFlag
	// vlans and trunks are --access-vlan and --trunk: the --link links'
	// VLANs.
	vlans, trunks listFlag
	// portSecurity is --port-security: on (the default) secures the links
	// added over the control socket with their pod's MAC.
	portSecurity string
	// sw is the switch of --mode switch, once config built it.
	sw *modes.Switch
	// sink is the counting sink of --mode sink.
	sink *modes.CountingSink
	swapMACFlags
}

// register registers the forwarder's flags on fs, as the settings table
// declares them; withLinks, run's, adds those that name links (--link,
// --force).
func (ff *fwdFlags) register(fs *flag.FlagSet, withLinks bool) {
	scopes := []scope{forwarderFlag}
	if withLinks {
		scopes = append(scopes, runLinkFlag)
	}
	registerSettings(fs, flagVars{ff: ff}, scopes...)
}

func (ff *fwdFlags) config(stderr io.Writer) (fwd.Config, *slog.Logger, error) {
	cfg := ff.cfg
	cfg.CPUs = slices.Clone(ff.cfg.CPUs)
	bad := func(err error) error { return usageError{err.Error()} }
	var level slog.Level
	if err := level.UnmarshalText([]byte(ff.logLevel)); err != nil {
		return cfg, nil, bad(fmt.Errorf("log level %q: want debug, info, warn or error", ff.logLevel))
	}
	opts := &slog.HandlerOptions{Level: level}
	var logger *slog.Logger
	switch ff.logFormat {
	case "text":
		logger = slog.New(slog.NewTextHandler(stderr, opts))
	case "json":
		logger = slog.New(slog.NewJSONHandler(stderr, opts))
	default:
		return cfg, nil, bad(fmt.Errorf("log format %q: want text or json", ff.logFormat))
	}
	cfg.Links = ff.links
	cfg.Logger = logger
	if err := ff.handler(&cfg); err != nil {
		return cfg, nil, bad(err)
	}
	var err error
	if cfg.MaxLinks, err = ff.resolveMaxLinks(len(cfg.Links)); err != nil {
		return cfg, nil, bad(err)
	}
	return cfg, logger, nil
}

// settingFlag is the flag of a setting whose values fwd spells: it sets
// its field of cfg as the config file's key of the same name does.
type settingFlag struct {
	cfg *fwd.Config
	s   fwd.Setting
}

func (f *settingFlag) String() string {
	if f.cfg == nil { // the flag package's probe of a zero value
		return ""
	}
	return f.s.Format(f.cfg)
}

func (f *settingFlag) Set(v string) error { return f.s.Set(f.cfg, v) }

// IsBoolFlag: a boolean setting's flag may stand alone, and, as
// --multi-buffer, take a value that follows it (joinOptionalValues).
func (f *settingFlag) IsBoolFlag() bool { return f.s.Bool }

// defaultMaxLinks is --max-links auto in the modes that take links while
// running: a node's containers.
const defaultMaxLinks = 64

// linksAtRuntime reports whether --mode takes links while running (xdpfwd
// link add/del): a switch, a reflector and a sink, whose handlers need
// nothing per link.
func linksAtRuntime(mode string) bool {
	return mode == "switch" || mode == "reflect" || mode == "sink"
}

// resolveMaxLinks is fwd.Config.MaxLinks for --max-links with n --link
// flags: auto is defaultMaxLinks in the modes that take links while
// running, 0 in the others; a count is the Config's.
func (ff *fwdFlags) resolveMaxLinks(n int) (int, error) {
	m := ff.maxLinks.n
	switch {
	case ff.maxLinks.auto() && linksAtRuntime(ff.mode):
		return max(defaultMaxLinks, n), nil
	case ff.maxLinks.auto() || m == 0:
		return 0, nil
	case !linksAtRuntime(ff.mode):
		return 0, fmt.Errorf("--max-links is for --mode switch, reflect or sink (links added while running)")
	case m < n || m > fwd.MaxLinks:
		return 0, fmt.Errorf("--max-links %d: want %d..%d (the --link links up to %d), 0 (the --link links only) or auto", m, n, fwd.MaxLinks, fwd.MaxLinks)
	}
	return m, nil
}

// maxLinksFlag is --max-links: auto, its zero value and the default
// (defaultMaxLinks in the modes that take links while running, the --link
// links in the others), or a count as fwd.Config.MaxLinks takes it, 0
// being the --link links only there as here. -1, auto's spelling before
// 0 meant the same in the flag and the Config, is refused with the new
// one: fwd.Config refuses -1 too.
type maxLinksFlag struct {
	n   int
	set bool // a count given: not auto
}

func (m *maxLinksFlag) auto() bool { return !m.set }

func (m *maxLinksFlag) String() string {
	if m.auto() {
		return "auto"
	}
	return strconv.Itoa(m.n)
}

func (m *maxLinksFlag) Set(s string) error {
	if s == "auto" {
		*m = maxLinksFlag{}
		return nil
	}
	n, err := strconv.Atoi(s)
	switch {
	case n == -1:
		return fmt.Errorf("max links -1: the default is spelled auto (%d in switch, reflect and sink); 0 is the --link links only", defaultMaxLinks)
	case err != nil || n < 0:
		return fmt.Errorf("max links %q: want auto, 0 (the --link links only) or a count of links, up to %d", s, fwd.MaxLinks)
	}
	*m = maxLinksFlag{n: n, set: true}
	return nil
}

// handler sets cfg.Handler for --mode, after checking the link count and
// the switch's settings.
func (ff *fwdFlags) handler(cfg *fwd.Config) error {
	m, err := modes.ParseMode(ff.mode)
	if err != nil {
		return err
	}
	if m != modes.SwitchMode && len(ff.fdbStatic) > 0 {
		return fmt.Errorf("--fdb-static is for --mode switch")
	}
	if m != modes.SwitchMode && len(ff.vlans)+len(ff.trunks) > 0 {
		return fmt.Errorf("--access-vlan and --trunk are for --mode switch")
	}
	if ff.portSecurity != "on" && ff.portSecurity != "off" {
		return fmt.Errorf("--port-security %q: want on or off", ff.portSecurity)
	}
	if m != modes.MACMode && len(ff.ethPeer) > 0 {
		return fmt.Errorf("--eth-peer is for --mode mac")
	}
	switch m {
	case modes.ReflectMode:
		cfg.Handler = modes.Reflect
	case modes.SinkMode:
		ff.sink = modes.NewSink(nil)
		cfg.Handler = ff.sink
	case modes.FiveTupleSwapMode:
		cfg.Handler = ff.swapHandler()
	case modes.MACMode:
		if cfg.Handler, err = ff.macHandler(cfg.Links); err != nil {
			return err
		}
	case modes.SwitchMode:
		if ff.fdbAge <= 0 {
			return fmt.Errorf("--fdb-age %v: want a positive age", ff.fdbAge)
		}
		if ff.fdbSize < 64 || ff.fdbSize > fdb.MaxSize {
			return fmt.Errorf("--fdb-size %d: want 64..%d entries", ff.fdbSize, fdb.MaxSize)
		}
		ff.sw = modes.NewSwitch(len(cfg.Links), ff.fdbSize, ff.fdbAge)
		for _, e := range ff.fdbStatic {
			mac, vlan, link, err := parseStatic(e, cfg.Links)
			if err != nil {
				return err
			}
			if err := ff.sw.Table.AddStatic(mac, vlan, link); err != nil {
				return err
			}
		}
		vlans, err := parseLinkVLANs(ff.vlans, ff.trunks, cfg.Links)
		if err != nil {
			return err
		}
		for name, v := range vlans {
			if err := ff.sw.SetVLANs(name, v); err != nil {
				return fmt.Errorf("link %s: %w", name, err)
			}
		}
		cfg.Handler = ff.sw
	}
	return nil
}

// checkLinks checks the number of --link flags against what --mode needs
// beyond what fwd.New checks (two links without a Handler, 1..MaxLinks
// with one): a switch needs two, or one (a node's uplink) when links may
// be added while running (maxLinks, fwd.Config.MaxLinks, above n).
func (ff *fwdFlags) checkLinks(n, maxLinks int) error {
	m, err := modes.ParseMode(ff.mode)
	if err != nil {
		return usageError{err.Error()}
	}
	lo, hi := m.Links()
	if m == modes.SwitchMode && maxLinks > n {
		lo = 1
	}
	if m != modes.XConnect && n >= 1 && n <= fwd.MaxLinks && (n < lo || n > hi) {
		msg := fmt.Sprintf("--mode %s takes %d..%d --link flags, got %d", m, lo, hi, n)
		if m == modes.SwitchMode {
			msg += " (one takes links added while running: --max-links above 1)"
		}
		return usageError{msg}
	}
	return nil
}

// parseLinkVLANs parses --access-vlan LINK=VID and --trunk LINK=VLANS, each
// naming one of links, once.
func parseLinkVLANs(access, trunks []string, links []string) (map[string]modes.VLANs, error) {
	out := map[string]modes.VLANs{}
	parse := func(flag, s string, value func(string) (modes.VLANs, error)) error {
		name, spec, ok := strings.Cut(s, "=")
		if !ok {
			return fmt.Errorf("--%s %q: want LINK=%s", flag, s, map[string]string{"access-vlan": "VID", "trunk": "VLANS"}[flag])
		}
		if !slices.Contains(links, name) {
			return fmt.Errorf("--%s %q: %q is not one of the links %v", flag, s, name, links)
		}
		if _, dup := out[name]; dup {
			return fmt.Errorf("--%s %q: link %s is given VLANs twice", flag, s, name)
		}
		v, err := value(spec)
		if err != nil {
			return fmt.Errorf("--%s %q: %w", flag, s, err)
		}
		out[name] = v
		return nil
	}
	for _, s := range access {
		if err := parse("access-vlan", s, func(spec string) (modes.VLANs, error) {
			n, err := strconv.ParseUint(spec, 10, 16)
			if err != nil || n == 0 || n > modes.MaxVID {
				return modes.VLANs{}, fmt.Errorf("VLAN %q: want 1..%d", spec, modes.MaxVID)
			}
			return modes.VLANs{Access: uint16(n)}, nil
		}); err != nil {
			return nil, err
		}
	}
	for _, s := range trunks {
		if err := parse("trunk", s, func(spec string) (modes.VLANs, error) {
			ids, err := modes.ParseTrunk(spec)
			return modes.VLANs{Trunk: ids}, err
		}); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseStatic parses a static FDB entry, MAC[/VLAN]=LINK.
func parseStatic(s string, links []string) (mac net.HardwareAddr, vlan uint16, link int, err error) {
	addr, name, ok := strings.Cut(s, "=")
	if !ok {
		return nil, 0, 0, fmt.Errorf("--fdb-static %q: want MAC[/VLAN]=LINK", s)
	}
	if a, v, ok := strings.Cut(addr, "/"); ok {
		n, err := strconv.ParseUint(v, 10, 12)
		if err != nil || n == 0 || n > 4094 {
			return nil, 0, 0, fmt.Errorf("--fdb-static %q: VLAN %q: want 1..4094", s, v)
		}
		addr, vlan = a, uint16(n)
	}
	if mac, err = net.ParseMAC(addr); err != nil || len(mac) != 6 {
		return nil, 0, 0, fmt.Errorf("--fdb-static %q: %q is not a MAC address", s, addr)
	}
	link = slices.Index(links, name)
	if link < 0 {
		return nil, 0, 0, fmt.Errorf("--fdb-static %q: %q is not one of the links %v", s, name, links)
	}
	return mac, vlan, link, nil
}

// joinOptionalValues rewrites "--flag value" to "--flag=value" for the
// flags whose value is optional (a boolean setting of fwd's, such as
// --multi-buffer, whose values are more than true and false), unless
// value is another flag: the flag package never gives a boolean flag the
// next argument. The commands take no arguments besides flags, so the
// next one can only be its value.
func joinOptionalValues(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		out = append(out, a)
		if a == "--" || len(a) < 2 || a[0] != '-' {
			// The end of the flags: the flag package stops here too.
			return append(out, args[i+1:]...)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		f := fs.Lookup(name)
		if f == nil || i+1 == len(args) { // name=value, or unknown: Parse judges
			continue
		}
		if cf, ok := f.Value.(*settingFlag); ok && cf.s.Bool {
			if next := args[i+1]; next == "" || next[0] != '-' {
				out[len(out)-1] = a + "=" + args[i+1]
				i++
			}
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		// The next argument is this flag's value, whatever it looks like.
		out = append(out, args[i+1])
		i++
	}
	return out
}

func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	// The flag package would print its error and the whole usage; we
	// print one line (exitCode) and the usage only when asked for it.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(joinOptionalValues(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stderr, fs)
			return err
		}
		return usageError{fmt.Sprintf("%s: %v (see 'xdpfwd %s --help')", fs.Name(), err, fs.Name())}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	return nil
}
