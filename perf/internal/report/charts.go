// The PNG charts: grouped bars with min–max whiskers, one chart per
// workload group, drawn with gonum/plot.

package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// barSeries is one contender's bars across the groups of a chart.
type barSeries struct {
	label       string
	med, lo, hi []float64
}

// palette: the reference (xdpfwd) is always the first colour, and every
// series of a chart gets a colour of its own (a udp chart has 10, a cost
// chart 11): Tableau's ten, then six more that stay apart from them.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0xe3, 0x77, 0xc2, 0xff}, // pink
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
	{0xbc, 0xbd, 0x22, 0xff}, // olive
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
	{0x00, 0x00, 0x00, 0xff}, // black
	{0xff, 0xd7, 0x00, 0xff}, // gold
	{0x00, 0x00, 0x80, 0xff}, // navy
	{0x80, 0x00, 0x00, 0xff}, // maroon
	{0x98, 0xdf, 0x8a, 0xff}, // light green
	{0xc5, 0xb0, 0xd5, 0xff}, // lavender
}

// Colours is how many series a chart can draw, each in a colour of its own.
func Colours() int { return len(palette) }

// whiskers draws min–max ranges over grouped bars; bars and whiskers share
// the same offset in canvas units, which an XY plotter cannot express.
type whiskers struct {
	x, lo, hi []float64
	offset    vg.Length
}

func (w *whiskers) Plot(c draw.Canvas, plt *plot.Plot) {
	trX, trY := plt.Transforms(&c)
	ls := draw.LineStyle{Color: color.Black, Width: vg.Points(0.8)}
	tick := vg.Points(2.5)
	for i := range w.x {
		if w.hi[i] <= w.lo[i] {
			continue
		}
		x := trX(w.x[i]) + w.offset
		y0, y1 := trY(w.lo[i]), trY(min(w.hi[i], plt.Y.Max))
		c.StrokeLine2(ls, x, y0, x, y1)
		c.StrokeLine2(ls, x-tick, y0, x+tick, y0)
		if w.hi[i] <= plt.Y.Max {
			c.StrokeLine2(ls, x-tick, y1, x+tick, y1)
		} else {
			// Off the chart: an arrow head instead of a cap.
			c.StrokeLine2(ls, x-tick, y1-tick, x, y1)
			c.StrokeLine2(ls, x, y1, x+tick, y1-tick)
		}
	}
}

func (w *whiskers) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = 0, float64(len(w.x)-1)
	// The chart's height follows the bars (groupedBars sets Y.Max); a
	// whisker that runs higher is cut with an arrow.
	return xmin, xmax, 0, 0
}

// niceTicks label 4 to 8 round values (steps of 1, 2, 2.5 or 5 times a
// power of ten) with as many decimals as the step needs: gonum's default
// gives as few as two labels, and its values carry binary rounding
// (0.30000000000000004). An unlabelled tick halves each step.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	// The smallest round step that gives at most 8 labels.
	step := niceStep((hi - lo) / 10)
	for math.Floor(hi/step+1e-9)-math.Ceil(lo/step-1e-9)+1 > 8 {
		step = niceStep(step * (1 + 1e-6))
	}
	dec := decimals(step)
	var ts []plot.Tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k * step
		if v == 0 {
			v = 0 // not -0
		}
		label := strconv.FormatFloat(v, 'f', dec, 64)
		if v == 0 {
			label = "0"
		}
		ts = append(ts, plot.Tick{Value: v, Label: label})
		if m := v + step/2; m <= hi {
			ts = append(ts, plot.Tick{Value: m})
		}
	}
	return ts
}

// niceStep is the smallest of 1, 2, 2.5, 5 times a power of ten not below
// raw (> 0).
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw*(1-1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// decimals is the number of decimals that writes every multiple of step
// exactly: 0 for 500, 1 for 0.5, 2 for 0.25.
func decimals(step float64) int {
	for d := 0; d < 12; d++ {
		x := step * math.Pow(10, float64(d))
		if math.Abs(x-math.Round(x)) <= 1e-6*x {
			return d
		}
	}
	return 12
}

// groupedBars draws one bar per series in every group, with whiskers.
func groupedBars(path, title, ylabel string, groups []string, series []barSeries) error {
	return groupedBarsLabelled(path, title, ylabel, groups, series, nil, 0)
}

// groupedBarsLabelled is groupedBars with every bar's median written above
// it and its whisker by format (a bar of 0 is otherwise invisible, a short
// one unreadable next to a tall one); a nil format writes three
// significant digits where the bars are wide enough for them, nothing
// elsewhere. A yCap > 0 is the most the y axis shows (120 for a
// percentage: the room above 100 % holds the legend and the labels).
func groupedBarsLabelled(path, title, ylabel string, groups []string, series []barSeries, format func(float64) string, yCap float64) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	n := len(series)
	if n > len(palette) {
		return fmt.Errorf("%d series, %d distinct colours", n, len(palette))
	}
	width := vg.Points(min(28, 360/float64(n*len(groups))))
	if format == nil && width >= vg.Points(22) {
		format = barLabel
	}
	top := 0.0
	for i, s := range series {
		bc, err := plotter.NewBarChart(plotter.Values(s.med), width)
		if err != nil {
			return err
		}
		bc.Color = palette[i]
		bc.LineStyle.Width = 0
		bc.Offset = width * vg.Length(float64(i)-float64(n-1)/2)
		p.Add(bc)
		p.Legend.Add(s.label, bc)
		x := make([]float64, len(s.med))
		for g := range x {
			x[g] = float64(g)
			top = max(top, s.med[g])
		}
		p.Add(&whiskers{x: x, lo: s.lo, hi: s.hi, offset: bc.Offset})
	}
	if top <= 0 {
		top = 1 // all bars 0: still an axis to draw them on
	}
	ymax := chartYMax(top, n, yCap)
	if format != nil {
		for i, s := range series {
			xy := plotter.XYLabels{XYs: make(plotter.XYs, len(s.med))}
			for g, v := range s.med {
				xy.XYs[g] = plotter.XY{X: float64(g), Y: min(max(v, s.hi[g]), ymax)}
				xy.Labels = append(xy.Labels, format(v))
			}
			l, err := plotter.NewLabels(xy)
			if err != nil {
				return err
			}
			for j := range l.TextStyle {
				l.TextStyle[j].XAlign = draw.XCenter
				l.TextStyle[j].Font.Size = vg.Points(8)
			}
			l.Offset = vg.Point{X: width * vg.Length(float64(i)-float64(n-1)/2), Y: vg.Points(3)}
			p.Add(l)
		}
	}
	// Room above the bars for the legend and some of the whiskers; longer
	// whiskers end in an arrow at the top.
	p.Y.Max = ymax
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Y.Tick.Marker = niceTicks{}
	p.NominalX(groups...)
	// Half a group of room at each end, so that the outer bars do not
	// touch the axis or the image's edge.
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	return p.Save(24*vg.Centimeter, 13*vg.Centimeter, path)
}

// barLabel writes v with three significant digits, as an axis in
// thousands or millions needs them: 0.132, 2.59, 35.1, 812.
func barLabel(v float64) string {
	if v == 0 {
		return "0"
	}
	if a := math.Abs(v); a > 0 && a < 1 {
		return strconv.FormatFloat(v, 'f', 2-int(math.Floor(math.Log10(a))), 64)
	}
	return sig3(v)
}

// chartYMax is the top of a chart's y axis: room above the tallest bar
// for the legend (a line per series) and the whiskers, at most yCap (if
// > 0) unless a bar is taller.
func chartYMax(top float64, series int, yCap float64) float64 {
	ymax := top * (1.6 + 0.09*float64(series))
	if yCap > 0 && ymax > yCap {
		ymax = max(yCap, top*1.05)
	}
	return ymax
}

// seriesFor collects the median and range of metric (scaled) over the
// given workloads for each contender.
func (r *Results) seriesFor(cs []ContenderResult, workloads []string, metrics []string, scale float64) []barSeries {
	var out []barSeries
	for _, c := range cs {
		s := barSeries{label: c.Label}
		any := false
		for i, w := range workloads {
			m := metrics[0]
			if len(metrics) > 1 {
				m = metrics[i]
			}
			st, ok := r.Stat(c.Name, w, m)
			any = any || ok
			s.med = append(s.med, st.Median*scale)
			s.lo = append(s.lo, st.Min*scale)
			s.hi = append(s.hi, st.Max*scale)
		}
		if any {
			out = append(out, s)
		}
	}
	return out
}

// Charts draws the PNG charts into dir and returns their file names.
func (r *Results) Charts(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	charts := &chartSet{dir: dir}
	for _, chart := range []func(*chartSet) error{
		r.udpChart,
		r.costCharts,
		r.tcpChart,
		r.rrCharts,
		r.reorderChart,
		r.latencyChart,
		r.deliveryChart,
		r.l2Charts,
	} {
		if err := chart(charts); err != nil {
			return charts.names, err
		}
	}
	return charts.names, nil
}

// chartSet is the charts drawn into dir so far, by file name.
type chartSet struct {
	dir   string
	names []string
}

// draw draws grouped bars into dir/name, unless there is nothing to draw.
func (set *chartSet) draw(name, title, ylabel string, groups []string, series []barSeries) error {
	if len(series) == 0 || len(groups) == 0 {
		return nil
	}
	if err := groupedBars(filepath.Join(set.dir, name), title, ylabel, groups, series); err != nil {
		return fmt.Errorf("chart %s: %w", name, err)
	}
	set.names = append(set.names, name)
	return nil
}

// drawLabelled is draw with each bar labelled by format, the y axis
// capped at yCap (0: none).
func (set *chartSet) drawLabelled(name, title, ylabel string, groups []string, series []barSeries, format func(float64) string, yCap float64) error {
	if err := groupedBarsLabelled(filepath.Join(set.dir, name), title, ylabel, groups, series, format, yCap); err != nil {
		return fmt.Errorf("chart %s: %w", name, err)
	}
	set.names = append(set.names, name)
	return nil
}

// workloadAxis is the names of ws and their titles less prefix, the
// groups of a chart with a group per workload.
func workloadAxis(ws []WorkloadInfo, prefix string) (names, labels []string) {
	for _, w := range ws {
		names = append(names, w.Name)
		labels = append(labels, strings.TrimPrefix(w.Title, prefix))
	}
	return names, labels
}

// udpChart draws udp_pps.png: delivered packets/s per packet size.
func (r *Results) udpChart(charts *chartSet) error {
	ws := r.workloads("udp")
	if len(ws) == 0 {
		return nil
	}
	wn, labels := workloadAxis(ws, "UDP ")
	return charts.draw("udp_pps.png", "UDP one way: delivered packets/s at maximum offered load", "million packets/s",
		labels, r.seriesFor(r.ranContenders("udp", false), wn, []string{"pps"}, 1e-6))
}

// costCharts draws a chart per cost workload: own CPU per packet, gross
// and net of the baseline.
func (r *Results) costCharts(charts *chartSet) error {
	for _, w := range r.workloads("cost") {
		cr := append(r.ranContenders("cost", false), r.ranContenders("cost", true)...)
		wn := []string{w.Name, w.Name}
		series := r.seriesFor(cr, wn, []string{"own_cpu_ns_per_pkt", "own_cpu_ns_per_pkt_net"}, 1)
		title := fmt.Sprintf("CPU per delivered packet at %s packets/s offered (UDP 64 B)", si(float64(r.costRate(w))))
		file := "cpu_cost.png" // cost-64, at --cost-rate
		if w.Name != "cost-64" {
			file = "cpu_" + strings.ReplaceAll(w.Name, "-", "_") + ".png" // cpu_cost_64_20k.png
		}
		if err := charts.draw(file, title, "CPU ns per packet (own)",
			[]string{"generator, receiver and forwarder", "net of the no-forwarder baseline"}, series); err != nil {
			return err
		}
	}
	return nil
}

// tcpChart draws tcp_bulk.png: Gbit/s per stream count.
func (r *Results) tcpChart(charts *chartSet) error {
	ws := r.workloads("tcp")
	if len(ws) == 0 {
		return nil
	}
	wn, labels := workloadAxis(ws, "TCP bulk, ")
	return charts.draw("tcp_bulk.png", "TCP bulk A → B", "Gbit/s",
		labels, r.seriesFor(r.ranContenders("tcp", false), wn, []string{"gbps"}, 1))
}

// rrCharts draws rr_tps.png and rr_latency.png for the first RR workload
// (later ones would need names of their own).
func (r *Results) rrCharts(charts *chartSet) error {
	ws := r.workloads("rr")
	if len(ws) == 0 {
		return nil
	}
	w, cr := ws[0], r.ranContenders("rr", false)
	if err := charts.draw("rr_tps.png", w.Title+": transactions/s", "thousand transactions/s",
		[]string{w.Title}, r.seriesFor(cr, []string{w.Name}, []string{"tps"}, 1e-3)); err != nil {
		return err
	}
	unit, scale := r.latencyUnit(cr, w.Name, "p999_us")
	return charts.draw("rr_latency.png", w.Title+": latency per transaction", unit,
		[]string{"p50", "p99", "p99.9"}, r.seriesFor(cr, []string{w.Name, w.Name, w.Name}, []string{"p50_us", "p99_us", "p999_us"}, scale))
}

// latencyUnit is µs, or ms where a contender's metric exceeds 20 ms, and
// the scale from µs to it.
func (r *Results) latencyUnit(cr []ContenderResult, workload, metric string) (unit string, scale float64) {
	unit, scale = "µs", 1.0
	for _, c := range cr {
		if st, ok := r.Stat(c.Name, workload, metric); ok && st.Max > 20000 {
			unit, scale = "ms", 1e-3
		}
	}
	return unit, scale
}

// reorderChart draws reorder.png: out-of-order datagrams per million, for
// the first reordering workload with samples.
func (r *Results) reorderChart(charts *chartSet) error {
	for _, w := range r.workloads("reorder") {
		series := r.seriesFor(r.ranContenders("reorder", false), []string{w.Name}, []string{"ooo_per_million"}, 1)
		if len(series) == 0 {
			continue
		}
		return charts.drawLabelled("reorder.png", "Reorders by xps mode: "+w.Title, "out-of-order datagrams per million received",
			[]string{"out-of-order per million (lower is better)"}, series, func(v float64) string {
				if v < 1000 {
					return fmt.Sprintf("%.0f", v)
				}
				return si(v)
			}, 0)
	}
	return nil
}

// latencyChart draws latency.png: p50 and p99 of the first latency
// workload.
func (r *Results) latencyChart(charts *chartSet) error {
	ws := r.workloads("latency")
	if len(ws) == 0 {
		return nil
	}
	w, cr := ws[0], r.ranContenders("latency", false)
	unit, scale := r.latencyUnit(cr, w.Name, "p99_us")
	return charts.draw("latency.png", "Latency: "+w.Title, unit+" (lower is better)",
		[]string{"p50", "p99"}, r.seriesFor(cr, []string{w.Name, w.Name}, []string{"p50_us", "p99_us"}, scale))
}

// deliveryChart draws delivery.png: the share delivered, for the first
// delivery workload with samples.
func (r *Results) deliveryChart(charts *chartSet) error {
	for _, w := range r.workloads("delivery") {
		series := r.seriesFor(r.ranContenders("delivery", false), []string{w.Name}, []string{"delivered_pct"}, 1)
		if len(series) == 0 {
			continue
		}
		return charts.drawLabelled("delivery.png", "Delivery: "+w.Title, "% of offered packets delivered",
			[]string{"delivered (higher is better)"}, series, func(v float64) string { return fmt.Sprintf("%.1f %%", v) }, 120)
	}
	return nil
}
