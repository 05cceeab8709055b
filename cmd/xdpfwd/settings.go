// The settings of `xdpfwd run`, each declared once (settings): its flag
// and config-file key, default, its --help group and help, and where its
// value goes. A setting of the forwarder extends fwd's row of the same
// name (fwd.Settings), which says the fwd.Config field it sets, what its
// zero value means, whether a reload changes it and, for all but the
// links, the mode and --max-links, how its values are spelled (the flag
// sets the Config field through fwd's parser); xdpfwd's own say so here.
// What used to be kept in parallel lists is derived from the table: the
// flags of run and demo (registerSettings), the --help groups
// (flagGroups), the fwd.Config field each flag sets (configFlags) and,
// through it, what a reload compares. settings_test.go holds the table
// to the flags registered, to fwd's reload (which settings it applies
// live, which need a restart) and to docs/reference.md's flag table.

package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/xdpfwd/xdpfwd/control"
	"github.com/xdpfwd/xdpfwd/fdb"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/gen"
)

// setting is one setting of `xdpfwd run`: a flag, and the config file's
// key of the same name.
type setting struct {
	// name is the flag's name and the --config file's key.
	name string
	// group is the --help heading it is listed under, and the bold row
	// above it in docs/reference.md's table; "" for txonly's, listed last
	// under the command's name.
	group string
	// scope says which commands take it and where its value goes.
	scope scope
	// def is the default as the flag spells it. A flag.Value's default is
	// its zero value, which def spells; for the others def is parsed into
	// the default (a duration as time.ParseDuration reads it). fwd's (the
	// zero Config's, as it spells it) for a setting whose values it spells.
	def string
	// zero is what the zero value (0, "") means where it is not itself:
	// an automatic choice, a default of fwd's, off. docs/reference.md
	// gives it (TestSettingsDocs). fwd's for a setting of the forwarder.
	zero string
	// field is the fwd.Config field it sets (fwd's Setting.Field), which
	// the forwarder compares on a reload (Forwarder.Reconfigure): a
	// change is reported by the field, under this setting's name. "": a
	// setting of xdpfwd's own, which the reloader compares.
	field string
	// reload is what a reload does with a change of it: fwd's for a
	// setting of the forwarder.
	reload fwd.Reload
	// noKey: a flag only, not a key of the config file.
	noKey bool
	// value names the flag's value in --help, as docs/reference.md does
	// (N, D, FILE, MODE): fwd's for a setting whose values it spells.
	// "": a `word` in help names it (flag.UnquoteUsage), or the flag is
	// a switch.
	value string
	// help is its --help text.
	help string
	// ptr is where its value goes in v: a *string, *int, *uint, *uint64,
	// *bool, *time.Duration or a flag.Value; for a setting whose values
	// fwd spells, a settingFlag setting its field of v.ff.cfg.
	ptr func(v flagVars) any
}

// scope is which commands take a setting, and where its value goes.
type scope int

const (
	// forwarderFlag is a field of fwdFlags: run and demo take it.
	forwarderFlag scope = iota
	// runLinkFlag is a field of fwdFlags that only run takes: the demo
	// makes its own links.
	runLinkFlag
	// runFlag is a field of runSettings (txonly's, of its genFlags):
	// only run takes it.
	runFlag
)

// flagVars are the variables the flags of a command set: a setting's ptr
// points into them.
type flagVars struct {
	ff  *fwdFlags
	run *runSettings // nil for the demo
}

// The --help groups, in the order of docs/reference.md's table.
const (
	linksAndMode   = "links and mode"
	queuesAndRings = "queues and rings"
	txPaths        = "TX paths"
	operations     = "operations"
)

// settings are the settings of `xdpfwd run`, in the order of its --help
// and of docs/reference.md's table: each group's together.
var settings = extendForwarder([]setting{
	// links and mode
	{name: "link", group: linksAndMode, scope: runLinkFlag,
		help: "`NAME` of a link to forward between (repeat: two for xconnect, 2..64 for switch (1 with --max-links), 1..64 for reflect, sink, 5tswap, mac and txonly)",
		ptr:  func(v flagVars) any { return &v.ff.links }},
	{name: "mode", group: linksAndMode, def: "xconnect", value: "MODE",
		help: "what to do with each packet: xconnect (two links, each to the other)|switch (learning L2 switch)|reflect (back out, MACs swapped)|sink (count and drop; loss, reordering and latency of txonly's frames)|5tswap (back out, MAC and IP addresses and TCP/UDP ports swapped)|mac (out of the paired link, 0-1, 2-3, ..., or back out of a lone one, MACs set to that link's and --eth-peer's)|txonly (generate: see --size, --rate)",
		ptr:  func(v flagVars) any { return &v.ff.mode }},
	{name: "eth-peer", group: linksAndMode,
		help: "mac: the `MAC` address every frame is sent to, or LINK=MAC for the frames leaving one link (repeat; testpmd's --eth-peer)",
		ptr:  func(v flagVars) any { return &v.ff.ethPeer }},
	{name: "fdb-size", group: linksAndMode, def: strconv.Itoa(fdb.DefaultSize), value: "N",
		help: "switch: addresses the forwarding database holds",
		ptr:  func(v flagVars) any { return &v.ff.fdbSize }},
	{name: "fdb-age", group: linksAndMode, def: "300s", value: "D",
		help: "switch: forget an address not seen for this long",
		ptr:  func(v flagVars) any { return &v.ff.fdbAge }},
	{name: "fdb-static", group: linksAndMode,
		help: "switch: a static entry `MAC[/VLAN]=LINK`, never aged or moved (repeat)",
		ptr:  func(v flagVars) any { return &v.ff.fdbStatic }},
	{name: "access-vlan", group: linksAndMode, scope: runLinkFlag,
		help: "switch: make a --link link an access port of a VLAN, `LINK=VID` (1..4094): its untagged frames are in the VLAN, it receives the VLAN's untagged and no other's, a tagged frame from it is spoofed_vlan (repeat; docs/vlans.md)",
		ptr:  func(v flagVars) any { return &v.ff.vlans }},
	{name: "trunk", group: linksAndMode, scope: runLinkFlag,
		help: "switch: make a --link link a trunk of VLANs, `LINK=VLANS` (0,100,200-209; 0 is the untagged network): its frames carry their VLAN's tag, another VLAN's are spoofed_vlan (repeat). A link with neither is a port of every VLAN (docs/vlans.md)",
		ptr:  func(v flagVars) any { return &v.ff.trunks }},
	{name: "max-links", group: linksAndMode, def: "auto", value: "N",
		help: fmt.Sprintf("switch, reflect, sink: the most links at once, those of --link and those added while running (xdpfwd link add); the UMEM is sized for them at start. auto (default): %d in those modes; 0: the --link links only", defaultMaxLinks),
		ptr:  func(v flagVars) any { return &v.ff.maxLinks }},
	{name: "port-security", group: linksAndMode, def: "on", value: "on|off",
		help: "switch: port security of the links added over the control socket with their pod's MAC (xdpfwd-cni gives it; xdpfwd link add --mac): on: frames from another source MAC are dropped (spoofed_source), the MAC is pinned to the link (a static FDB entry no other link moves) and nothing else is learned there; with the pod's IPs, packets and ARP from other IPs are dropped (spoofed_ip). off: such links learn like any. An add's own port_security (--port-security of xdpfwd link add) overrides; --link links are never secured",
		ptr:  func(v flagVars) any { return &v.ff.portSecurity }},
	{name: "xdp-mode", group: linksAndMode,
		help: "XDP attach mode: auto|native|generic"},
	{name: "zerocopy", group: linksAndMode,
		help: "AF_XDP bind mode: auto (zero-copy where the driver has it; links that cannot, veths, and links added while running bind in copy mode in a UMEM of their own), on (every --link link in zero-copy or fail; links added while running in copy mode, in a UMEM of their own), off (copy mode, one UMEM)"},
	{name: "promisc", group: linksAndMode,
		help: "hold the links in promiscuous mode while running (released on exit, kill -9 included): auto (on but in sink mode)|on|off"},
	{name: "hugepages", group: linksAndMode,
		help: "UMEM backing: auto|on|off"},

	// queues and rings
	{name: "queues", group: queuesAndRings,
		help: "workers, each transmitting on a TX queue of its own on every link; every RX queue gets a socket whatever the count. 0 (default): auto, the CPUs the process may use, at most the smallest RX or TX queue count of the links (on a reload, at most the workers started)"},
	{name: "frame-size", group: queuesAndRings,
		help: "RX frame size: 2048 or 4096 (default 2048; 4096 when a link's driver would cut MTU-sized frames in 2048-byte ones in zero-copy mode)"},
	{name: "multi-buffer", group: queuesAndRings,
		help: "AF_XDP multi-buffer (XDP_USE_SG), packets longer than a frame: auto (on when a link's MTU needs more than one frame)|on|off; bare --multi-buffer is on (default auto)"},
	{name: "ring-size", group: queuesAndRings,
		help: fmt.Sprintf("entries per RX and TX ring (fill and completion rings get twice as many): a power of two, %d..%d; 0 = auto", fwd.MinRingSize, fwd.MaxRingSize)},
	{name: "added-ring-size", group: queuesAndRings,
		help: fmt.Sprintf("switch, reflect, sink: entries per ring of a link added while running (xdpfwd link add), whose memory is set aside at start for each of --max-links: a power of two, %d..%d, at most --ring-size; 0 = auto, what --max-links links would get at start (64 at 64)", fwd.MinRingSize, fwd.MaxRingSize)},
	{name: "max-umem", group: queuesAndRings,
		help: fmt.Sprintf("most packet memory (UMEM) to pin, e.g. 256MiB or 2GiB: a plan needing more is refused at start, naming what takes it; 0 (default): %d MiB", fwd.DefaultMaxUMEM>>20)},
	{name: "xps", group: queuesAndRings,
		help: "TX queue per flow, with --queues > 1: sticky|hash|cpu"},
	{name: "xps-asymmetric", group: queuesAndRings,
		help: "key the two directions of a connection apart (default: they share a queue index)"},
	{name: "flow-table-size", group: queuesAndRings,
		help: "entries in the sticky flow table (0: 65536)"},
	{name: "cpus", group: queuesAndRings,
		help: "pin worker q to the q-th CPU of this list, e.g. 0,1 or 2-3"},
	{name: "spin", group: queuesAndRings,
		help: "empty rounds a worker busy-polls its dry rings before sleeping in poll(2): auto or 0 (64, skipped while spins catch nothing; and a window for the answer when what it forwards is answered within 200µs, at most a quarter of its time), N (every time), off (sleep at once), or busy (never sleep: a CPU per worker, idle too)"},
	{name: "coalesce", group: queuesAndRings,
		help: "after the spin rounds, keep polling until the rings have been dry this long before sleeping: fewer wake-ups for as much polling; 0: off"},
	{name: "busy-poll", group: queuesAndRings,
		help: "kernel busy polling: SO_PREFER_BUSY_POLL and SO_BUSY_POLL (this long) on every socket, and a recvfrom per empty polling round to run the link's NAPI (veth in copy mode has none to run: CPU only); 0: off"},

	// TX paths
	{name: "inline-max", group: txPaths,
		help: "largest packet copied whole into a 256-byte inline TX slot, `N` = 1..256 bytes; off turns the inline path off; 0 (default): 256"},
	{name: "frag-order", group: txPaths,
		help: "frag block size for repacked multi-buffer packets and a mode's flood copies: 3 (32 KiB), 4 (64 KiB), off (no frag zone); 0 (default): 4. Without multi-buffer in xconnect mode no packet uses one, and there is none"},
	{name: "max-tx-frags", group: txPaths,
		help: "most descriptors a multi-buffer packet may leave as before it is repacked, 1..18; 0 (default): 4"},
	{name: "complete-checksums", group: txPaths,
		help: "finish TCP/UDP checksums left partial for offload: auto (on for veth links)|on|off"},

	// operations
	{name: "force", group: operations, scope: runLinkFlag,
		help: "replace a foreign XDP program already on a link"},
	{name: "wait-for-links", group: operations, scope: runFlag, def: "false",
		help: "when a link is missing or deleted, wait for it to return instead of exiting",
		ptr:  func(v flagVars) any { return &v.run.waitLinks }},
	{name: "stats-interval", group: operations, scope: runFlag, def: "1s", zero: "off", reload: fwd.Live, value: "D",
		help: "period of the stats line on stderr; 0 turns it off",
		ptr:  func(v flagVars) any { return &v.run.interval }},
	{name: "summary", group: operations, scope: runFlag, value: "FILE",
		help: "write a JSON summary to this file on exit",
		ptr:  func(v flagVars) any { return &v.run.summary }},
	{name: "metrics", group: operations, scope: runFlag, value: "ADDR",
		help: "serve Prometheus metrics and /healthz on this address (e.g. 127.0.0.1:9425)",
		ptr:  func(v flagVars) any { return &v.run.metrics }},
	{name: "control", group: operations, scope: runFlag, zero: control.Dir + "/FIRST-LINK.sock", value: "PATH",
		help: "unix socket for xdpfwd capture, mode 0600 (default " + control.Dir + "/FIRST-LINK.sock; off: none)",
		ptr:  func(v flagVars) any { return &v.run.control }},
	{name: "takeover", group: operations, scope: runFlag, noKey: true, zero: "start afresh",
		help: "take the datapath over from the xdpfwd serving this control `SOCKET` (its sockets, rings, UMEM and programs, handed over without a gap), then serve that socket; auto: if one serves --control, else start afresh. The settings must give its layout",
		ptr:  func(v flagVars) any { return &v.run.takeover }},
	{name: "after-handover", group: operations, scope: runFlag, def: "exit", value: "exit|wait",
		help: "what the daemon does once it handed its datapath to a successor: exit (0), or wait for SIGTERM (a pod's container, which Kubernetes would restart)",
		ptr:  func(v flagVars) any { return &v.run.afterHandover }},
	{name: "pid-file", group: operations, scope: runFlag,
		help: "write the daemon's PID to this `FILE` once it forwards, and its successor's when it hands over (systemd's PIDFile=); removed at exit",
		ptr:  func(v flagVars) any { return &v.run.pidFile }},
	{name: "config", group: operations, scope: runFlag, noKey: true, value: "FILE",
		help: "YAML file of settings named like these flags; flags override it; SIGHUP re-reads it",
		ptr:  func(v flagVars) any { return &v.run.config }},
	{name: "log-format", group: operations, def: "text", value: "text|json",
		help: "log format: text|json",
		ptr:  func(v flagVars) any { return &v.ff.logFormat }},
	{name: "log-level", group: operations, def: "info", value: "LEVEL",
		help: "log level: debug|info|warn|error",
		ptr:  func(v flagVars) any { return &v.ff.logLevel }},

	// txonly's: no group, listed last under run's name
	{name: "size", scope: runFlag, def: "64", value: "SIZE",
		help: "txonly: frame size in bytes with FCS (64..1518, to the MTU), a list 64,512 cycled over the packets, or imix (7:4:1 of 64, 594, 1518)",
		ptr:  func(v flagVars) any { return &v.run.gf.size }},
	{name: "count", scope: runFlag, def: "0", zero: "until a signal", value: "N",
		help: "txonly: packets to send in all, then exit (0: until --duration or a signal)",
		ptr:  func(v flagVars) any { return &v.run.gf.count }},
	{name: "duration", scope: runFlag, def: "0", zero: "until a signal", value: "D",
		help: "txonly: send this long, then exit (0: until --count or a signal)",
		ptr:  func(v flagVars) any { return &v.run.gf.duration }},
	{name: "rate", scope: runFlag, def: "0", zero: "as fast as the links take them", value: "RATE",
		help: "txonly: target packets per second over all queues, e.g. 100k or 1.5M (0: as fast as the links take them); a finite number, at most 1G",
		ptr:  func(v flagVars) any { return &v.run.gf.rate }},
	{name: "flows", scope: runFlag, def: "0", zero: "links × queues", value: "N",
		help: fmt.Sprintf("txonly: flows, 1..%d, at least links × queues (0: links × queues)", gen.MaxFlows),
		ptr:  func(v flagVars) any { return &v.run.gf.flows }},
	{name: "flows-by", scope: runFlag, def: "port", value: "port|ip",
		help: "txonly: what tells flows apart: port (UDP source port) or ip (source address)",
		ptr:  func(v flagVars) any { return &v.run.gf.flowsBy }},
	{name: "vlan", scope: runFlag, def: "0", zero: "none", value: "VID",
		help: "txonly: 802.1Q VLAN ID to tag frames with, 1..4094 (0: untagged)",
		ptr:  func(v flagVars) any { return &v.run.gf.vlan }},
	{name: "batch", scope: runFlag, def: "64", value: "N",
		help: "txonly: most packets per TX round (one kick at most per round); paced (--rate), a round sends at most what is due in 1 ms, at least 1",
		ptr:  func(v flagVars) any { return &v.run.gf.batch }},
	{name: "dst-mac", scope: runFlag, def: "ff:ff:ff:ff:ff:ff", value: "MAC",
		help: "txonly: destination MAC address",
		ptr:  func(v flagVars) any { return &v.run.gf.dstMAC }},
	{name: "src-ip", scope: runFlag, def: "198.18.0.1", value: "IP",
		help: "txonly: IPv4 source address (of flow 0 with --flows-by ip)",
		ptr:  func(v flagVars) any { return &v.run.gf.srcIP }},
	{name: "dst-ip", scope: runFlag, def: "198.18.0.2", value: "IP",
		help: "txonly: IPv4 destination address",
		ptr:  func(v flagVars) any { return &v.run.gf.dstIP }},
	{name: "src-port", scope: runFlag, def: "1024", value: "PORT",
		help: "txonly: UDP source port (of flow 0 with --flows-by port)",
		ptr:  func(v flagVars) any { return &v.run.gf.srcPort }},
	{name: "dst-port", scope: runFlag, def: "9", value: "PORT",
		help: "txonly: UDP destination port",
		ptr:  func(v flagVars) any { return &v.run.gf.dstPort }},
})

// extendForwarder gives each setting of the forwarder (fwd's of the same
// name) fwd's field, zero and reload, which its row does not repeat; and,
// to one whose values fwd spells, its default and a flag that sets the
// fwd.Config field (settingFlag).
func extendForwarder(settings []setting) []setting {
	for i := range settings {
		s := &settings[i]
		fs, ok := fwd.SettingNamed(s.name)
		if !ok {
			continue
		}
		if s.zero != "" || s.field != "" || s.reload != fwd.Restart {
			panic(fmt.Sprintf("setting %s: fwd's, yet its row repeats its zero, field or reload", s.name))
		}
		s.field, s.zero, s.reload = fs.Field, fs.Zero, fs.Reload
		if !fs.Spelled() {
			continue // the links, the mode, --max-links' auto: xdpfwd's to spell
		}
		if s.def != "" || s.ptr != nil || s.value != "" {
			panic(fmt.Sprintf("setting %s: spelled by fwd, yet its row gives a default, a value or its name", s.name))
		}
		s.def, s.value = fs.Format(&fwd.Config{}), fs.ValueName()
		s.ptr = func(v flagVars) any { return &settingFlag{cfg: &v.ff.cfg, s: fs} }
	}
	return settings
}

// settingNamed is the setting of flag name, or nil.
func settingNamed(name string) *setting {
	for i := range settings {
		if settings[i].name == name {
			return &settings[i]
		}
	}
	return nil
}

// register registers s's flag on fs, its value in v.
func (s *setting) register(fs *flag.FlagSet, v flagVars) {
	switch p := s.ptr(v).(type) {
	case flag.Value: // its zero value is the default, which s.def spells
		fs.Var(p, s.name, s.help)
	case *string:
		fs.StringVar(p, s.name, s.def, s.help)
	case *bool:
		fs.BoolVar(p, s.name, s.def == "true", s.help)
	case *int:
		fs.IntVar(p, s.name, must(strconv.Atoi(s.def)), s.help)
	case *uint:
		fs.UintVar(p, s.name, uint(must(strconv.ParseUint(s.def, 10, 0))), s.help)
	case *uint64:
		fs.Uint64Var(p, s.name, must(strconv.ParseUint(s.def, 10, 64)), s.help)
	case *time.Duration:
		fs.DurationVar(p, s.name, must(time.ParseDuration(s.def)), s.help)
	default:
		panic(fmt.Sprintf("setting %s: a %T", s.name, p))
	}
}

// must is v, or a panic: a default of the table that does not parse is
// a bug that every test of the flags meets.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// registerSettings registers, on fs, the settings of the scopes given.
func registerSettings(fs *flag.FlagSet, v flagVars, scopes ...scope) {
	for i := range settings {
		if s := &settings[i]; slices.Contains(scopes, s.scope) {
			s.register(fs, v)
		}
	}
}

// flagGroup is a heading of --help and its flags.
type flagGroup struct {
	title string
	flags []string
}

// groupsOf are the groups of settings, in the table's order.
func groupsOf(settings []setting) []flagGroup {
	var out []flagGroup
	for _, s := range settings {
		switch {
		case s.group == "":
		case len(out) == 0 || out[len(out)-1].title != s.group:
			out = append(out, flagGroup{s.group, []string{s.name}})
		default:
			out[len(out)-1].flags = append(out[len(out)-1].flags, s.name)
		}
	}
	return out
}

// fieldFlags are, by fwd.Config field, the settings that set them.
func fieldFlags(settings []setting) map[string]string {
	out := map[string]string{}
	for _, s := range settings {
		if s.field != "" {
			out[s.field] = s.name
		}
	}
	return out
}
