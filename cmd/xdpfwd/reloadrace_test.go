package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/umem"
)

// TestReloadRacesLinkAdd: a SIGHUP's reload and a link add over the
// control socket (a pod's, by the CNI plugin) at once. The reload reads
// the links, then asks for them less the file's removed ones: a link
// added in between was not in what it read, and was removed as if the
// file had dropped it (reasoned). Each add must find its link
// still there once it returned, whatever the reloads do; run with -race.
func TestReloadRacesLinkAdd(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("up0", fwdtest.LinkOptions{})
	env.AddLink("pod0", fwdtest.LinkOptions{})
	path := filepath.Join(t.TempDir(), "xdpfwd.yaml")
	if err := os.WriteFile(path, []byte("mode: switch\nqueues: 1\nmax-links: 4\nlink: [up0]\nhugepages: off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", path}
	st, err := parseRun(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.cfg
	cfg.Env = env
	f, err := fwd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		f.Close()
		if n := f.Leaked(); n != 0 {
			t.Errorf("%d UMEM addresses leaked", n)
		}
	}()
	cs := &controlSocket{mode: "switch"}
	cs.setForwarder(f)
	r := &reloader{args: args, start: st, f: f, logger: slog.New(slog.DiscardHandler), ctl: cs}
	if f.Plan().HugePages != umem.HugePagesOff {
		t.Fatalf("hugepages %v", f.Plan().HugePages)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := r.reload(time.Second); err != nil {
				t.Errorf("reload: %v", err)
				return
			}
		}
	})
	lost := 0
	for range 200 {
		if err := (daemonLinks{cs}).Add("pod0"); err != nil {
			t.Fatalf("link add pod0: %v", err)
		}
		if !slices.Contains(f.Links(), "pod0") {
			lost++
			continue // a reload took it out: nothing to delete
		}
		if err := (daemonLinks{cs}).Del("pod0"); errors.Is(err, linkop.ErrUnknownLink) {
			lost++ // taken out after the look
		} else if err != nil {
			t.Fatalf("link del pod0: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if lost > 0 {
		t.Errorf("%d of 200 links added over the control socket were gone when the add returned: a reload removed them", lost)
	}
}

// TestReloadAfterHandoverChangesNothing: a SIGHUP whose reload waited on
// the link lock a handover held finds the datapath its successor's: it
// changes nothing (a link the file adds would be attached by a daemon
// that no longer forwards) and says why.
func TestReloadAfterHandoverChangesNothing(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("up0", fwdtest.LinkOptions{})
	env.AddLink("pod0", fwdtest.LinkOptions{})
	path := filepath.Join(t.TempDir(), "xdpfwd.yaml")
	if err := os.WriteFile(path, []byte("mode: switch\nqueues: 1\nmax-links: 4\nlink: [up0]\nhugepages: off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", path}
	st, err := parseRun(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.cfg
	cfg.Env = env
	f, err := fwd.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cs := &controlSocket{mode: "switch"}
	cs.setForwarder(f)
	cs.handedOver.Store(true)
	r := &reloader{args: args, start: st, f: f, logger: slog.New(slog.DiscardHandler), ctl: cs}
	if err := os.WriteFile(path, []byte("mode: switch\nqueues: 1\nmax-links: 4\nlink: [up0, pod0]\nhugepages: off\ninline-max: off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.reload(time.Second); !errors.Is(err, linkop.ErrHandedOver) {
		t.Errorf("reload after the handover: %v, want it refused as handed over", err)
	}
	if got := f.Links(); !slices.Equal(got, []string{"up0"}) {
		t.Errorf("links after the reload: %q, want [up0] as they were", got)
	}
	if len(r.needsRestart) != 0 {
		t.Errorf("the reload asks for a successor (%q) of a daemon that handed over", r.needsRestart)
	}
}
