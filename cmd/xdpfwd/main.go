// Command xdpfwd forwards packets between Linux links from user space
// through AF_XDP sockets: a cross-connect, a learning switch, a reflector,
// a sink or a generator (run --mode), and the tools around a running
// daemon. Its commands, as usage lists them:
//
//	xdpfwd run --link A --link B [flags]   forward until SIGINT/SIGTERM
//	xdpfwd link list|add|del               a running daemon's links (its control socket)
//	xdpfwd capture -w FILE|- [FILTER]      what a running daemon receives, sends, drops, as pcapng
//	xdpfwd stats, xdpfwd fdb               a running daemon's counters per second, its FDB (--metrics)
//	xdpfwd demo [--duration 5s]            build two namespaces, forward, prove it
//	xdpfwd bench                           NDR/PDR and latency between namespaces
//	xdpfwd version
//
// Exit codes: 0 success, 1 runtime failure, 2 usage or bad input.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a bad command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: xdpfwd <command> [flags]

commands:
  run      forward between links until SIGINT/SIGTERM (--mode xconnect, switch, reflect, sink, 5tswap, mac, txonly)
  capture  write what a running xdpfwd receives, sends and drops as pcapng (from --control)
  link     list a running xdpfwd's links, add or remove one (from --control)
  demo     build two namespaces, forward between them, prove traffic crosses
  bench    NDR/PDR and latency of a bridge, XDP redirect or xdpfwd between namespaces (txonly to sink)
  stats    show a running daemon's counters per second (from --metrics)
  fdb      print a running switch's forwarding database (from --metrics)
  version  print the version

'xdpfwd <command> --help' lists a command's flags.
`

// commands are the commands of usage, by name, each a function of its
// arguments (those after its name) and of where to write.
var commands = map[string]func(args []string, stdout, stderr io.Writer) error{
	"run":     cmdRun,
	"capture": cmdCapture,
	"link":    cmdLink,
	"demo":    cmdDemo,
	"stats":   cmdStats,
	"bench":   cmdBench,
	"fdb":     cmdFDB,
}

// run is xdpfwd with args (without the program's name): it runs the
// command args[0] names and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "version", "--version":
		fmt.Fprintf(stdout, "xdpfwd %s\n", version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "xdpfwd: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	return exitCode(cmd(args[1:], stdout, stderr), stderr)
}

// exitCode is err's exit code, printing err but for a --help.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue) || fwd.IsInputError(err):
		fmt.Fprintf(stderr, "xdpfwd: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "xdpfwd: %v\n", err)
		return exitFailure
	}
}
