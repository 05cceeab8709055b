package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

const installUsage = `usage: xdpfwd-cni install --conflist FILE [--bin-dir DIR] [--conf-dir DIR]

Installs this binary as DIR/xdpfwd-cni (default /opt/cni/bin) and FILE, a
CNI network configuration list, into --conf-dir (default /etc/cni/net.d),
each written beside its place and renamed into it, so that a runtime never
reads half a file. For a DaemonSet's init container (the image has no
shell to copy with).
`

// install is `xdpfwd-cni install`: not a CNI command (those come through
// CNI_COMMAND), so it runs only without CNI_COMMAND set.
func install(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	binDir := fs.String("bin-dir", "/opt/cni/bin", "where the runtime looks for CNI plugins")
	confDir := fs.String("conf-dir", "/etc/cni/net.d", "where the runtime reads network configurations")
	conflist := fs.String("conflist", "", "the network configuration list to install (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, installUsage)
			return 0
		}
		fmt.Fprintf(stderr, "xdpfwd-cni install: %v\n\n%s", err, installUsage)
		return 2
	}
	if *conflist == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "xdpfwd-cni install: --conflist FILE (and nothing else) is required\n\n%s", installUsage)
		return 2
	}
	conf, err := os.ReadFile(*conflist)
	if err != nil {
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
	self, err := os.Executable()
	if err == nil {
		var bin []byte
		if bin, err = os.ReadFile(self); err == nil {
			err = writeAtomic(filepath.Join(*binDir, "xdpfwd-cni"), bin, 0o755)
		}
	}
	if err == nil {
		err = writeAtomic(filepath.Join(*confDir, filepath.Base(*conflist)), conf, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "xdpfwd-cni install: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "xdpfwd-cni install: %s, %s\n", filepath.Join(*binDir, "xdpfwd-cni"), filepath.Join(*confDir, filepath.Base(*conflist)))
	return 0
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
