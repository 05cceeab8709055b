package report

import (
	"go/ast"
	"go/parser"
	"go/token"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// testdata/iommu.jsonl holds fixed, made-up rows (not a measurement) in
// perf's iommu.jsonl format: two VMs with every forwarder at 64 and 1500
// bytes, and virtio-noindirect with zero-copy alone, as TestNICs has them.
func loadIOMMUTestdata(t *testing.T) []IOMMURow {
	t.Helper()
	rows, err := ReadIOMMURows(filepath.Join("testdata", "iommu.jsonl"), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 22 {
		t.Fatalf("testdata: %d rows, want 22", len(rows))
	}
	return rows
}

// TestIOMMUTable: one table line per row, in the rows' order, labelled by
// VM (the two virtio VMs apart), with the received count out of the sent,
// the counts with one decimal, and no page count for the bridge, which has
// no descriptors.
func TestIOMMUTable(t *testing.T) {
	rows := loadIOMMUTestdata(t)
	md := IOMMUTable(rows)
	lines := strings.Split(strings.TrimSuffix(md, "\n"), "\n")
	if len(lines) != 2+len(rows) {
		t.Fatalf("%d lines, want a header, a rule and %d rows:\n%s", len(lines), len(rows), md)
	}
	wantHead := []string{"NIC", "forwarder", "frame", "received", "IOMMU maps / 1k pkts", "unmaps / 1k pkts", "TX 4 KiB pages / 1k descs"}
	if got := mdCells(lines[0]); !reflect.DeepEqual(got, wantHead) {
		t.Errorf("header %q, want %q", got, wantHead)
	}
	for _, c := range []struct {
		line int // of the table, header 0
		want []string
	}{
		{2, []string{"igb", "bridge", "64 B", "1998/2000", "1003.5", "1003.5", "–"}},
		{8, []string{"igb", "xdpfwd-zerocopy", "64 B", "1998/2000", "2.0", "1.5", "12.5"}},
		{11, []string{"igb", "xdpfwd-zerocopy-noinline", "1500 B", "2000/2000", "0.0", "0.0", "500.0"}},
		{18, []string{"virtio-1q", "xdpfwd-zerocopy", "64 B", "1998/2000", "1002.0", "1001.5", "12.5"}},
		{22, []string{"virtio-noindirect", "xdpfwd-zerocopy", "64 B", "2000/2000", "0.5", "0.5", "12.5"}},
	} {
		if got := mdCells(lines[c.line]); !reflect.DeepEqual(got, c.want) {
			t.Errorf("line %d: %q, want %q", c.line, got, c.want)
		}
	}
	// iommu.md carries the table and says what the counts are.
	full := IOMMUMarkdown(rows, testTime, "go run ./perf --iommu")
	if !strings.Contains(full, md) || !strings.Contains(full, "not rates") || !strings.Contains(full, "2026-12-01 10:00 UTC") {
		t.Errorf("iommu.md lacks the table, the counts-not-rates note or the time:\n%s", full)
	}
}

// TestIOMMUBars: one group per VM and frame size in the rows' order, one
// series per forwarder, and no value (NaN, drawn "not run") where the
// forwarder did not run, never a 0 that reads as "no maps".
func TestIOMMUBars(t *testing.T) {
	b := iommuBarsOf(loadIOMMUTestdata(t))
	wantGroups := []string{"igb, 64 B", "igb, 1500 B", "virtio-1q, 64 B", "virtio-1q, 1500 B", "virtio-noindirect, 64 B", "virtio-noindirect, 1500 B"}
	if !reflect.DeepEqual(b.groups, wantGroups) {
		t.Errorf("groups %q, want %q", b.groups, wantGroups)
	}
	wantFwds := []string{"bridge", "xdpfwd-copy", "xdpfwd-copy-noinline", "xdpfwd-zerocopy", "xdpfwd-zerocopy-noinline"}
	if !reflect.DeepEqual(b.fwds, wantFwds) {
		t.Fatalf("series %q, want %q", b.fwds, wantFwds)
	}
	for f, fw := range b.fwds {
		for g, v := range b.maps[f] {
			measured := g < 4 || fw == "xdpfwd-zerocopy"
			if measured == math.IsNaN(v) {
				t.Errorf("%s in %s: %v, measured %v", fw, b.groups[g], v, measured)
			}
		}
	}
	if v := b.maps[3][5]; v != 0.5 {
		t.Errorf("xdpfwd-zerocopy in virtio-noindirect, 1500 B: %v, want the row's 0.5", v)
	}
}

// TestIOMMUChart: the chart is a PNG of a readable size in which every
// forwarder's bar has its own colour.
func TestIOMMUChart(t *testing.T) {
	rows := loadIOMMUTestdata(t)
	path := filepath.Join(t.TempDir(), "iommu.png")
	if err := IOMMUChart(path, rows); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	bounds := img.Bounds()
	if bounds.Dx() < 600 || bounds.Dy() < 300 {
		t.Errorf("chart %v: too small to read", bounds)
	}
	// Count the pixels of each series' colour: a bar, a legend swatch.
	n := len(iommuBarsOf(rows).fwds)
	count := make([]int, n)
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			for i := range n {
				p := palette[i]
				if uint8(r>>8) == p.R && uint8(g>>8) == p.G && uint8(b>>8) == p.B {
					count[i]++
				}
			}
		}
	}
	for i, c := range count {
		if c < 50 {
			t.Errorf("series %d (%v): %d pixels of its colour", i, palette[i], c)
		}
	}
	if err := IOMMUChart(path, nil); err == nil {
		t.Error("a chart of no rows: no error")
	}
}

// TestIOMMURowsRoundTrip: perf's iommu.jsonl reads back as written, and a
// row in vmtest's format (no vm) takes the VM perf ran it in.
func TestIOMMURowsRoundTrip(t *testing.T) {
	rows := loadIOMMUTestdata(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "iommu.jsonl")
	if err := WriteIOMMURows(path, rows); err != nil {
		t.Fatal(err)
	}
	back, err := ReadIOMMURows(path, "other")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, rows) {
		t.Errorf("read back %+v,\nwant %+v", back, rows)
	}
	vmt := filepath.Join(dir, "vmtest.jsonl")
	os.WriteFile(vmt, []byte(`{"nic":"virtio","forwarder":"xdpfwd-zerocopy","frame_bytes":64,"sent":2000,"received":1990,"maps_per_1k":1.5,"unmaps_per_1k":1.5,"tx_pages_4k_per_1k_desc":3}`+"\n"), 0o644)
	got, err := ReadIOMMURows(vmt, "virtio-noindirect")
	want := []IOMMURow{{VM: "virtio-noindirect", NIC: "virtio", Forwarder: "xdpfwd-zerocopy", Frame: 64, Sent: 2000, Received: 1990, MapsPer1K: 1.5, UnmapsPer: 1.5, Pages4KPer1K: 3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("vmtest row: %+v, %v; want %+v", got, err, want)
	}
	if rows, err := ReadIOMMURows(filepath.Join(dir, "none.jsonl"), "igb"); err != nil || len(rows) != 0 {
		t.Errorf("missing file: %v rows, %v; want none, no error", len(rows), err)
	}
	os.WriteFile(vmt, []byte("{\"nic\":\n"), 0o644)
	if _, err := ReadIOMMURows(vmt, "igb"); err == nil || !strings.Contains(err.Error(), "row 1") {
		t.Errorf("truncated file: %v, want an error naming row 1", err)
	}
}

// TestIOMMURowTags: perf decodes internal/vmtest's IOMMURow by its JSON
// tags without importing its test code, so the two must keep the same tags.
func TestIOMMURowTags(t *testing.T) {
	src := filepath.Join("..", "..", "..", "internal", "vmtest", "iommu_test.go")
	f, err := parser.ParseFile(token.NewFileSet(), src, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var vmtest []string
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "IOMMURow" {
			return true
		}
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			tag := reflect.StructTag(strings.Trim(fl.Tag.Value, "`"))
			vmtest = append(vmtest, tag.Get("json"))
		}
		return false
	})
	var perf []string
	rt := reflect.TypeFor[IOMMURow]()
	for i := range rt.NumField() {
		if tag := rt.Field(i).Tag.Get("json"); tag != "vm,omitempty" {
			perf = append(perf, tag)
		}
	}
	if len(vmtest) == 0 || !reflect.DeepEqual(vmtest, perf) {
		t.Errorf("vmtest's IOMMURow tags %q, perf's IOMMURow %q", vmtest, perf)
	}
}

var testTime = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// mdCells splits a Markdown table line into its trimmed cells.
func mdCells(line string) []string {
	var cells []string
	for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
		cells = append(cells, strings.TrimSpace(c))
	}
	return cells
}

// TestIOMMUReadme: --iommu --readme replaces what is between the iommu
// markers, and nothing else, with iommu.md and the chart it draws into
// perf/charts/iommu.png; a README without the markers is an error.
func TestIOMMUReadme(t *testing.T) {
	rows := loadIOMMUTestdata(t)
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "perf"), 0o755)
	readme := filepath.Join(root, "perf", "README.md")
	before, after := "# perf\n\nintro\n\n", "\n\n## Results\n\nkept\n"
	os.WriteFile(readme, []byte(before+IOMMUReadmeBegin+"\nold table\n"+IOMMUReadmeEnd+after), 0o644)
	md := IOMMUMarkdown(rows, testTime, "go run ./perf --iommu --readme")
	if err := RewriteIOMMUReadme(readme, md, rows); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(readme)
	s := string(b)
	if !strings.HasPrefix(s, before+IOMMUReadmeBegin) || !strings.HasSuffix(s, IOMMUReadmeEnd+after) ||
		!strings.Contains(s, md) || strings.Contains(s, "old table") || !strings.Contains(s, "![iommu](charts/iommu.png)") {
		t.Errorf("README after the rewrite:\n%s", s)
	}
	if _, err := os.Stat(filepath.Join(root, "perf", "charts", "iommu.png")); err != nil {
		t.Errorf("chart: %v", err)
	}
	os.WriteFile(readme, []byte(before+after), 0o644)
	if err := RewriteIOMMUReadme(readme, md, rows); err == nil {
		t.Error("README without markers: no error")
	}
}
