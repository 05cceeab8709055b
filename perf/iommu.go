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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// iommuRow is one row internal/vmtest's iommu scenario writes (its
// IOMMURow, decoded by its JSON tags), plus the VM it came from.
type iommuRow struct {
	// VM is the TestNICs subtest the row came from (igb, virtio-1q,
	// virtio-noindirect): NIC alone does not tell the two virtio VMs
	// apart. perf sets it; it is in perf's iommu.jsonl, not in vmtest's.
	VM        string `json:"vm,omitempty"`
	NIC       string `json:"nic"`
	Forwarder string `json:"forwarder"`
	// Path is vmtest's: "" for A → B through the NICs, "nic→pod" or
	// "pod→nic" for its pods scenario, whose rows perf does not collect.
	Path      string  `json:"path,omitempty"`
	Frame     int     `json:"frame_bytes"`
	Sent      int     `json:"sent"`
	Received  int     `json:"received"`
	MapsPer1K float64 `json:"maps_per_1k"`
	UnmapsPer float64 `json:"unmaps_per_1k"`
	// Pages4KPer1K: distinct 4 KiB pages xdpfwd's TX descriptors
	// referenced per 1,000 descriptors (0 for the bridge, which has none).
	Pages4KPer1K float64 `json:"tx_pages_4k_per_1k_desc"`
}

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
func runIOMMU(ctx context.Context, src, logDir string, progress io.Writer) ([]iommuRow, error) {
	tmp, err := os.MkdirTemp("", "xdpfwd-perf-iommu-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var rows []iommuRow
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
		rs, rerr := readIOMMURows(out, vm)
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

// readIOMMURows reads the JSON rows in path (one object a line), labelling
// each with vm when it has none. A missing file is no rows.
func readIOMMURows(path, vm string) ([]iommuRow, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []iommuRow
	dec := json.NewDecoder(f)
	for {
		var r iommuRow
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else if err != nil {
			return rows, fmt.Errorf("%s: row %d: %w", path, len(rows)+1, err)
		}
		if r.VM == "" {
			r.VM = vm
		}
		if r.VM == "" {
			r.VM = r.NIC
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// writeIOMMURows writes rows to path, one JSON object a line, as
// readIOMMURows reads them (--iommu --from).
func writeIOMMURows(path string, rows []iommuRow) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// iommuTable renders rows as a Markdown table, in their order.
func iommuTable(rows []iommuRow) string {
	var b strings.Builder
	b.WriteString("| NIC | forwarder | frame | received | IOMMU maps / 1k pkts | unmaps / 1k pkts | TX 4 KiB pages / 1k descs |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, r := range rows {
		pages := fmt.Sprintf("%.1f", r.Pages4KPer1K)
		if r.Forwarder == "bridge" {
			pages = "–" // no descriptors
		}
		fmt.Fprintf(&b, "| %s | %s | %d B | %d/%d | %.1f | %.1f | %s |\n",
			r.VM, r.Forwarder, r.Frame, r.Received, r.Sent, r.MapsPer1K, r.UnmapsPer, pages)
	}
	return b.String()
}

// iommuMarkdown is iommu.md: what was measured, then the table.
func iommuMarkdown(rows []iommuRow, when time.Time, command string) string {
	var b strings.Builder
	b.WriteString("### IOMMU maps per 1,000 forwarded packets (QEMU guest, TCG, intel-iommu strict)\n\n")
	if !when.IsZero() {
		fmt.Fprintf(&b, "Run %s: `%s`.\n\n", when.UTC().Format("2006-01-02 15:04 UTC"), command)
	}
	b.WriteString("Each row: 2,000 UDP frames of one size, paced, one flow from A to B through the guest; IOMMU map and unmap calls (tracefs `iommu:map`/`iommu:unmap`) and, for xdpfwd, distinct 4 KiB UMEM pages its TX descriptors referenced, per 1,000. `-noinline`: `--inline-max off`. Counts, not rates: under TCG only counts mean anything.\n\n")
	b.WriteString(iommuTable(rows))
	return b.String()
}

// iommuBars is the chart's data: groups (a VM and a frame size each, in
// the order of the rows), one series per forwarder (in the order they first
// appear), and maps[f][g] the value of series f in group g, NaN where that
// forwarder was not measured.
type iommuBars struct {
	groups []string
	fwds   []string
	maps   [][]float64
}

func iommuBarsOf(rows []iommuRow) iommuBars {
	type key struct {
		vm    string
		frame int
	}
	var b iommuBars
	gi, fi := map[key]int{}, map[string]int{}
	for _, r := range rows {
		k := key{r.VM, r.Frame}
		if _, ok := gi[k]; !ok {
			gi[k] = len(b.groups)
			b.groups = append(b.groups, fmt.Sprintf("%s, %d B", r.VM, r.Frame))
			for f := range b.maps {
				b.maps[f] = append(b.maps[f], math.NaN())
			}
		}
		if _, ok := fi[r.Forwarder]; !ok {
			fi[r.Forwarder] = len(b.fwds)
			b.fwds = append(b.fwds, r.Forwarder)
			b.maps = append(b.maps, make([]float64, len(b.groups)))
			for g := range b.groups {
				b.maps[len(b.maps)-1][g] = math.NaN()
			}
		}
		b.maps[fi[r.Forwarder]][gi[k]] = r.MapsPer1K
	}
	return b
}

// iommuChart draws the maps per 1,000 packets of rows as grouped bars into
// path: one group per VM and frame size, one bar per forwarder, each bar
// labelled with its count (the zero-copy bars are too short to read
// otherwise) or "not run" where that forwarder was not measured there.
func iommuChart(path string, rows []iommuRow) error {
	if len(rows) == 0 {
		return errors.New("no rows")
	}
	b := iommuBarsOf(rows)
	groups := b.groups
	n := len(b.fwds)
	if n > len(palette) {
		return fmt.Errorf("%d forwarders, %d distinct colours", n, len(palette))
	}
	p := plot.New()
	p.Title.Text = "IOMMU maps per 1,000 forwarded packets (strict mode, QEMU guest; counts, not rates)"
	p.Y.Label.Text = "IOMMU maps per 1,000 packets (lower is better)"
	width := vg.Points(min(22, 540/float64(n*len(groups))))
	top := 0.0
	for _, vs := range b.maps {
		for _, v := range vs {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	if top <= 0 {
		top = 1
	}
	// Room above the tallest bar for its upright label; the legend, in
	// the top left, stays above the first group's labels.
	ymax := top * 1.45
	for i, fw := range b.fwds {
		vs := make(plotter.Values, len(groups))
		xy := plotter.XYLabels{XYs: make(plotter.XYs, len(groups)), Labels: make([]string, len(groups))}
		for g, v := range b.maps[i] {
			xy.Labels[g] = iommuLabel(v)
			if math.IsNaN(v) {
				v, xy.Labels[g] = 0, "not run"
			}
			vs[g] = v
			xy.XYs[g] = plotter.XY{X: float64(g), Y: v}
		}
		bc, err := plotter.NewBarChart(vs, width)
		if err != nil {
			return err
		}
		bc.Color = palette[i]
		bc.LineStyle.Width = 0
		bc.Offset = width * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(bc)
		p.Legend.Add(fw, bc)
		l, err := plotter.NewLabels(xy)
		if err != nil {
			return err
		}
		// Upright text, from just above the bar: a count fits over a
		// narrow bar only that way.
		for j := range l.TextStyle {
			l.TextStyle[j].Rotation = math.Pi / 2
			l.TextStyle[j].XAlign = draw.XLeft
			l.TextStyle[j].YAlign = draw.YCenter
			l.TextStyle[j].Font.Size = vg.Points(8)
		}
		l.Offset = vg.Point{X: bc.Offset, Y: vg.Points(3)}
		p.Add(l)
	}
	p.Y.Min, p.Y.Max = 0, ymax
	p.Y.Tick.Marker = niceTicks{}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.NominalX(groups...)
	p.X.Tick.Label.Font.Size = vg.Points(9)
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	return p.Save(28*vg.Centimeter, 14*vg.Centimeter, path)
}

// iommuLabel writes a count per 1,000: whole above 100, one decimal below.
func iommuLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
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
	var rows []iommuRow
	var runErr error
	var when time.Time
	if o.From != "" {
		var err error
		if rows, err = readIOMMURows(o.From, ""); err != nil {
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
			if err := writeIOMMURows(filepath.Join(o.Out, "iommu.jsonl"), rows); err != nil {
				runErr = errors.Join(runErr, err)
			}
		}
	}
	if len(rows) == 0 {
		fmt.Fprintf(stderr, "perf: iommu: no rows: %v\n", runErr)
		return 1
	}
	md := iommuMarkdown(rows, when, o.Command)
	mdPath, pngPath := filepath.Join(o.Out, "iommu.md"), filepath.Join(o.Out, "iommu.png")
	err := errors.Join(runErr, os.WriteFile(mdPath, []byte(md), 0o644), iommuChart(pngPath, rows))
	fmt.Fprintf(stdout, "iommu: %d rows; %s, %s\n\n%s", len(rows), mdPath, pngPath, iommuTable(rows))
	if o.Readme {
		if rerr := rewriteIOMMUReadme(o, md, rows); rerr != nil {
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

const (
	iommuReadmeBegin = "<!-- BEGIN IOMMU: generated by `go run ./perf --iommu --readme`; do not edit by hand -->"
	iommuReadmeEnd   = "<!-- END IOMMU -->"
)

// rewriteIOMMUReadme replaces the iommu section of perf/README.md with md
// and the chart, drawn into perf/charts/iommu.png.
func rewriteIOMMUReadme(o Options, md string, rows []iommuRow) error {
	path := readmePath(o)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, iommuReadmeBegin), strings.Index(s, iommuReadmeEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no iommu markers (%q … %q)", path, iommuReadmeBegin, iommuReadmeEnd)
	}
	chartDir := filepath.Join(filepath.Dir(path), "charts")
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		return err
	}
	if err := iommuChart(filepath.Join(chartDir, "iommu.png"), rows); err != nil {
		return err
	}
	sec := iommuReadmeBegin + "\n\n" + md + "\n![iommu](charts/iommu.png)\n\n"
	return os.WriteFile(path, []byte(s[:i]+sec+s[j:]), 0o644)
}
