package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const installUsage = `usage: xdpfwd-cni install (--conflist FILE | --plugin-only) [--bin-dir DIR] [--conf-dir DIR]
                          [--wait-for-daemon SOCKET [--timeout D]] [--sleep]

Installs this binary as DIR/xdpfwd-cni (default /opt/cni/bin) and FILE, a
CNI network configuration list, into --conf-dir (default /etc/cni/net.d),
each written beside its place and renamed into it, so that a runtime never
reads half a file. The image has no shell to copy with. --plugin-only
installs the binary alone, for networks defined elsewhere (Multus's
NetworkAttachmentDefinitions).

--wait-for-daemon SOCKET installs only once the xdpfwd on that control
socket is available, as the plugin's STATUS judges it (it answers, takes
links, is neither stopping nor stalled), asked every 500ms: a runtime then
never sees the network before the daemon can serve it. --timeout gives up
after D (exit 1, nothing installed); 0, the default, waits for ever.
--sleep then sleeps until SIGTERM or SIGINT (exit 0), for a container
beside the daemon's in its pod, which must not exit. Nothing is removed on
exit: the network stays configured while the daemon restarts or is
updated (STATUS says 50 meanwhile, ADD 11); remove the files by hand to
uninstall.
`

// install is `xdpfwd-cni install`: not a CNI command (those come through
// CNI_COMMAND), so it runs only without CNI_COMMAND set.
func install(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	binDir := fs.String("bin-dir", "/opt/cni/bin", "where the runtime looks for CNI plugins")
	confDir := fs.String("conf-dir", "/etc/cni/net.d", "where the runtime reads network configurations")
	conflist := fs.String("conflist", "", "the network configuration list to install (or --plugin-only)")
	waitFor := fs.String("wait-for-daemon", "", "install once the xdpfwd on this control socket is available")
	timeout := fs.Duration("timeout", 0, "with --wait-for-daemon: give up after this long (0: never)")
	sleep := fs.Bool("sleep", false, "after installing, sleep until SIGTERM or SIGINT")
	pluginOnly := fs.Bool("plugin-only", false, "install the plugin alone, no conflist (a network defined elsewhere: Multus)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, installUsage)
			return 0
		}
		fmt.Fprintf(stderr, "xdpfwd-cni install: %v\n\n%s", err, installUsage)
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "xdpfwd-cni install: unexpected argument %q\n\n%s", fs.Arg(0), installUsage)
		return 2
	case *pluginOnly && *conflist != "":
		fmt.Fprintf(stderr, "xdpfwd-cni install: --plugin-only installs no conflist: not with --conflist\n\n%s", installUsage)
		return 2
	case *conflist == "" && !*pluginOnly:
		fmt.Fprintf(stderr, "xdpfwd-cni install: --conflist FILE (or --plugin-only) is required\n\n%s", installUsage)
		return 2
	case *timeout < 0:
		fmt.Fprintf(stderr, "xdpfwd-cni install: --timeout %v: want 0 (wait for ever) or more\n\n%s", *timeout, installUsage)
		return 2
	case *timeout > 0 && *waitFor == "":
		fmt.Fprintf(stderr, "xdpfwd-cni install: --timeout is for --wait-for-daemon\n\n%s", installUsage)
		return 2
	}
	var conf []byte
	if !*pluginOnly {
		var err error
		if conf, err = os.ReadFile(*conflist); err != nil {
			fmt.Fprintf(stderr, "xdpfwd-cni install: --conflist: %v\n", err)
			return 2
		}
		var list struct {
			Name    string `json:"name"`
			Plugins []struct {
				Type string `json:"type"`
			} `json:"plugins"`
		}
		if err := json.Unmarshal(conf, &list); err != nil || list.Name == "" || len(list.Plugins) == 0 {
			fmt.Fprintf(stderr, "xdpfwd-cni install: %s: not a CNI conflist (want a name and plugins): %v\n", *conflist, err)
			return 2
		}
	}
	// SIGTERM while waiting or sleeping: the pod is going.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *waitFor != "" {
		if err := waitForDaemon(ctx, *waitFor, *timeout, stderr); err != nil {
			fmt.Fprintf(stderr, "xdpfwd-cni install: %v: nothing installed\n", err)
			return 1
		}
	}
	self, err := os.Executable()
	var bin []byte
	if err == nil {
		bin, err = os.ReadFile(self)
	}
	installed := []string{filepath.Join(*binDir, "xdpfwd-cni")}
	if err == nil {
		err = writeAtomic(installed[0], bin, 0o755)
	}
	if err == nil && !*pluginOnly {
		installed = append(installed, filepath.Join(*confDir, filepath.Base(*conflist)))
		err = writeAtomic(installed[1], conf, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "xdpfwd-cni install: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "xdpfwd-cni install: %s\n", strings.Join(installed, ", "))
	if *sleep {
		<-ctx.Done()
		fmt.Fprintf(stderr, "xdpfwd-cni install: stopping; %s stay\n", strings.Join(installed, " and "))
	}
	return 0
}

// Waiting for the daemon: asked every waitPoll; why it is not available
// is said at once and then every waitSay, not every time.
const (
	waitPoll = 500 * time.Millisecond
	waitSay  = 10 * time.Second
)

// waitForDaemon returns once the daemon at control is available
// (daemonAvailable, STATUS's judgement), or an error when ctx ends or
// timeout (0: none) passes first.
func waitForDaemon(ctx context.Context, control string, timeout time.Duration, stderr io.Writer) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := time.Now()
	var said time.Time
	t := time.NewTicker(waitPoll)
	defer t.Stop()
	for {
		err := daemonAvailable(control)
		if err == nil {
			fmt.Fprintf(stderr, "xdpfwd-cni install: xdpfwd on %s is available (after %v)\n", control, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Since(said) >= waitSay {
			fmt.Fprintf(stderr, "xdpfwd-cni install: waiting for xdpfwd: %v\n", err)
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("xdpfwd not available within %v: %w", timeout, err)
			}
			return fmt.Errorf("stopped while waiting for xdpfwd: %w", err)
		case <-t.C:
		}
	}
}

// writeAtomic writes path through a temporary file beside it.
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("install %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".")
	if err != nil {
		return fmt.Errorf("install %s: %w", path, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), mode)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("install %s: %w", path, err)
	}
	return nil
}
