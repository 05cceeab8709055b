// The iommu workload's rows (internal/vmtest writes them, perf collects
// them into iommu.jsonl), its table and its chart.

package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// IOMMURow is one row internal/vmtest's iommu scenario writes (its
// IOMMURow, decoded by its JSON tags), plus the VM it came from.
type IOMMURow struct {
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

// WriteIOMMURows writes rows to path, one JSON object a line, as
// ReadIOMMURows reads them (--iommu --from).
func WriteIOMMURows(path string, rows []IOMMURow) error {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// IOMMUTable renders rows as a Markdown table, in their order.
func IOMMUTable(rows []IOMMURow) string {
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

// IOMMUMarkdown is iommu.md: what was measured, then the table.
func IOMMUMarkdown(rows []IOMMURow, when time.Time, command string) string {
	var b strings.Builder
	b.WriteString("### IOMMU maps per 1,000 forwarded packets (QEMU guest, TCG, intel-iommu strict)\n\n")
	if !when.IsZero() {
		fmt.Fprintf(&b, "Run %s: `%s`.\n\n", when.UTC().Format("2006-01-02 15:04 UTC"), command)
	}
	b.WriteString("Each row: 2,000 UDP frames of one size, paced, one flow from A to B through the guest; IOMMU map and unmap calls (tracefs `iommu:map`/`iommu:unmap`) and, for xdpfwd, distinct 4 KiB UMEM pages its TX descriptors referenced, per 1,000. `-noinline`: `--inline-max off`. Counts, not rates: under TCG only counts mean anything.\n\n")
	b.WriteString(IOMMUTable(rows))
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

func iommuBarsOf(rows []IOMMURow) iommuBars {
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

// IOMMUChart draws the maps per 1,000 packets of rows as grouped bars into
// path: one group per VM and frame size, one bar per forwarder, each bar
// labelled with its count (the zero-copy bars are too short to read
// otherwise) or "not run" where that forwarder was not measured there.
func IOMMUChart(path string, rows []IOMMURow) error {
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

// ReadIOMMURows reads the JSON rows in path (one object a line), labelling
// each with vm when it has none. A missing file is no rows.
func ReadIOMMURows(path, vm string) ([]IOMMURow, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []IOMMURow
	dec := json.NewDecoder(f)
	for {
		var r IOMMURow
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
