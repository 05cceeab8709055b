package main

// The iommu workload: what forwarding costs a guest's IOMMU, counted in a
// QEMU VM with real igb and virtio-net drivers behind an emulated Intel
// IOMMU in strict mode. The VM and the measurement are internal/vmtest's
// (TestNICs/<vm>/iommu); perf runs those tests, collects the rows they
// write to $XDPFWD_IOMMU_OUT, and renders the table and the chart. Under
// TCG only counts mean anything, so the workload reports counts per 1,000
// packets, never rates.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/perf/internal/report"
)

// iommuVMs are the TestNICs VMs with an iommu scenario, in the order they
// run and are reported.
var iommuVMs = []string{"igb", "virtio-1q", "virtio-noindirect"}

// iommuTestTimeout bounds each VM's go test: a boot and ten measurements
// take 2–3 minutes under TCG on a loaded two-core machine.
const iommuTestTimeout = 20 * time.Minute

// runIOMMU runs the iommu scenario of every VM in iommuVMs, one go test
// per VM (each row is labelled with the VM it ran in), from the checkout
// src, and returns the rows in order. A VM whose test fails still
// contributes the rows it wrote; the error says which failed, and the
// test's whole output is in logDir.
func runIOMMU(ctx context.Context, src, logDir string, progress io.Writer) ([]report.IOMMURow, error) {
	tmp, err := os.MkdirTemp("", "xdpfwd-perf-iommu-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var rows []report.IOMMURow
	var errs []error
	for _, vm := range iommuVMs {
		if ctx.Err() != nil {
			break
		}
		out := filepath.Join(tmp, vm+".jsonl")
		logPath := filepath.Join(logDir, "iommu-"+vm+".log")
		terr := iommuTest(ctx, src, vm, out, logPath, progress)
		if terr != nil && ctx.Err() == nil && bootFailed(logPath, out) {
			// Under TCG on a loaded machine the guest kernel now and
			// then panics in its early timer check, before any
			// measurement: one more boot, said so.
			fmt.Fprintf(progress, "perf: iommu: %s: the guest did not boot (see %s); booting it once more\n", vm, logPath)
			os.Rename(logPath, strings.TrimSuffix(logPath, ".log")+"-boot1.log")
			terr = iommuTest(ctx, src, vm, out, logPath, progress)
		}
		rs, rerr := report.ReadIOMMURows(out, vm)
		rows = append(rows, rs...)
		switch {
		case terr != nil:
			errs = append(errs, fmt.Errorf("vm %s: %w (log: %s)", vm, terr, logPath))
		case rerr != nil:
			errs = append(errs, fmt.Errorf("vm %s: %w", vm, rerr))
		case len(rs) == 0:
			errs = append(errs, fmt.Errorf("vm %s: the test passed but wrote no rows (log: %s)", vm, logPath))
		}
	}
	return rows, errors.Join(errs...)
}

// bootFailed says whether a failed VM test failed before its guest's agent
// started (so before any measurement), having written no rows to out.
func bootFailed(logPath, out string) bool {
	if _, err := os.Stat(out); err == nil {
		return false
	}
	b, err := os.ReadFile(logPath)
	return err == nil && strings.Contains(string(b), "guest agent did not start")
}

// progressLine matches the lines of `go test -v` worth showing while a VM
// test runs: subtests starting and ending, the first line of each log or
// error, and the verdict.
var progressLine = regexp.MustCompile(`^\s*(=== RUN|--- (PASS|FAIL|SKIP)|ok\s|FAIL|panic:|[\w.-]+\.go:\d+: )`)

// iommuTest runs TestNICs/<vm>/iommu with its rows going to out, streams
// its progress lines to progress and all of its output to logPath.
func iommuTest(ctx context.Context, src, vm, out, logPath string, progress io.Writer) error {
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	run := fmt.Sprintf("^TestNICs$/^%s$/^iommu$", regexp.QuoteMeta(vm))
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "-timeout", iommuTestTimeout.String(),
		"-run", run, "./internal/vmtest/")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "XDPFWD_IOMMU_OUT="+out, "XDPFWD_REQUIRE_INTEGRATION=1")
	// Ctrl-C reaches go test and the test binary from the terminal; a
	// cancelled context (SIGTERM) asks go test the same way, then kills.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGINT) }
	cmd.WaitDelay = 30 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	fmt.Fprintf(progress, "perf: iommu: %s: go test -run '%s' ./internal/vmtest/ (in %s)\n", vm, run, src)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("go test: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			if progressLine.MatchString(line) {
				fmt.Fprintf(progress, "perf: iommu: %s %4.0fs  %s\n", vm, time.Since(start).Seconds(), strings.TrimSpace(line))
			}
		}
		io.Copy(io.Discard, pr) // a line over 1 MiB: keep go test unblocked
	}()
	err = cmd.Wait()
	pw.Close()
	<-done
	if err != nil {
		return fmt.Errorf("go test: %w", err)
	}
	return nil
}

// iommuMain is `perf --iommu`: run the VM tests (or, with --from, read a
// saved iommu.jsonl), write iommu.jsonl, iommu.md and iommu.png to o.Out,
// print the table, and with --readme rewrite the iommu section of
// perf/README.md.
func iommuMain(ctx context.Context, o Options, stdout, stderr io.Writer) int {
	if o.Out == "" {
		o.Out = "perf-results"
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		fmt.Fprintf(stderr, "perf: %v\n", err)
		return 1
	}
	var rows []report.IOMMURow
	var runErr error
	var when time.Time
	if o.From != "" {
		var err error
		if rows, err = report.ReadIOMMURows(o.From, ""); err != nil {
			fmt.Fprintf(stderr, "perf: %v\n", err)
			return 1
		}
		if len(rows) == 0 {
			fmt.Fprintf(stderr, "perf: %s: no rows\n", o.From)
			return 1
		}
		if st, err := os.Stat(o.From); err == nil {
			when = st.ModTime()
		}
	} else {
		if os.Geteuid() != 0 {
			fmt.Fprintf(stderr, "perf: the iommu workload needs root (the VM's taps and namespaces); euid is %d\n", os.Geteuid())
			return 1
		}
		src := o.Src
		if src == "" {
			var err error
			if src, err = moduleRoot(); err != nil {
				fmt.Fprintf(stderr, "perf: %v\n", err)
				return 1
			}
		}
		when = time.Now()
		rows, runErr = runIOMMU(ctx, src, o.Out, stderr)
		if len(rows) > 0 {
			if err := report.WriteIOMMURows(filepath.Join(o.Out, "iommu.jsonl"), rows); err != nil {
				runErr = errors.Join(runErr, err)
			}
		}
	}
	if len(rows) == 0 {
		fmt.Fprintf(stderr, "perf: iommu: no rows: %v\n", runErr)
		return 1
	}
	md := report.IOMMUMarkdown(rows, when, o.Command)
	mdPath, pngPath := filepath.Join(o.Out, "iommu.md"), filepath.Join(o.Out, "iommu.png")
	err := errors.Join(runErr, os.WriteFile(mdPath, []byte(md), 0o644), report.IOMMUChart(pngPath, rows))
	fmt.Fprintf(stdout, "iommu: %d rows; %s, %s\n\n%s", len(rows), mdPath, pngPath, report.IOMMUTable(rows))
	if o.Readme {
		if rerr := report.RewriteIOMMUReadme(readmePath(o), md, rows); rerr != nil {
			err = errors.Join(err, rerr)
		} else {
			fmt.Fprintf(stderr, "perf: rewrote the iommu section of %s\n", readmePath(o))
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "perf: %v\n", err)
		return 1
	}
	return 0
}
