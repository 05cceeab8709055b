// Results, the model of results.json, and the queries every renderer
// shares: a metric's median and range, ratios to the reference contender,
// the contenders and workloads of a group; bench.txt.

package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// SchemaVersion is the version of results.json this package writes and
// reads.
const SchemaVersion = 1

// Results is everything a run measured; results.json is this, and every
// table, chart and README section is rendered from it alone.
type Results struct {
	Schema      int               `json:"schema"`
	Started     time.Time         `json:"started"`
	ElapsedS    float64           `json:"elapsed_s"`
	Command     string            `json:"command"`
	Interrupted bool              `json:"interrupted,omitempty"`
	Machine     Machine           `json:"machine"`
	Settings    Settings          `json:"settings"`
	Contenders  []ContenderResult `json:"contenders"`
	Workloads   []WorkloadInfo    `json:"workloads"`
	Samples     []Sample          `json:"samples"`
	// Topology is every namespace, link and bridge perf created, all
	// removed by the end of the run.
	Topology []string `json:"topology"`
	Notes    []string `json:"notes,omitempty"`
	// LoadAvg is the 1-minute load average at the start and the end:
	// other processes on the machine share its CPUs.
	LoadAvg [2]float64 `json:"load_avg"`
}

// Settings are the run's parameters.
type Settings struct {
	Quick       bool    `json:"quick"`
	Rounds      int     `json:"rounds"`
	DurationS   float64 `json:"duration_s"`
	WarmupS     float64 `json:"warmup_s"`
	CostRatePPS int     `json:"cost_rate_pps"`
	Source      string  `json:"source,omitempty"` // the UDP workloads' sender (--source)
	FwdCPU      int     `json:"fwd_cpu"`
	LoadCPUs    []int   `json:"load_cpus"`
	Queues      int     `json:"queues"`
	// PodRPSCPUs is where the namespaces' veth ends run their receive
	// processing (RPS); empty: the kernel's default, the sending CPU.
	PodRPSCPUs []int `json:"pod_rps_cpus,omitempty"`
	GOMAXPROCS int   `json:"gomaxprocs"`
}

// ContenderResult says what a contender is and whether it ran.
type ContenderResult struct {
	Name     string         `json:"name"`
	Label    string         `json:"label"`
	Desc     string         `json:"description"`
	Baseline bool           `json:"baseline,omitempty"`
	Ran      bool           `json:"ran"`
	Skipped  string         `json:"skipped,omitempty"` // why it did not run (at all, or after a failure)
	Errors   []string       `json:"errors,omitempty"`
	Details  map[string]any `json:"details,omitempty"` // what it reported about itself, last round
}

// WorkloadInfo describes a workload in the results.
type WorkloadInfo struct {
	Name   string `json:"name"`
	Group  string `json:"group"`
	Title  string `json:"title"`
	Metric string `json:"metric"`
	Unit   string `json:"unit"`
	// Queues of the pair it ran on, when not Settings.Queues; Workers,
	// xdpfwd's --queues there, when not Queues.
	Queues  int `json:"queues,omitempty"`
	Workers int `json:"workers,omitempty"`
	// The reordering workload's traffic: IP packet size, flows, datagrams
	// of every flow per round on one queue, and the pause after a round.
	Size  int     `json:"size,omitempty"`
	Flows int     `json:"flows,omitempty"`
	Burst int     `json:"burst,omitempty"`
	GapUS float64 `json:"gap_us,omitempty"`
	// The latency and delivery workloads: requests or packets per
	// second, requests per sample, forwarders run with their defaults.
	Rate        int  `json:"rate,omitempty"`
	Count       int  `json:"count,omitempty"`
	FwdDefaults bool `json:"fwd_defaults,omitempty"`
	// The switch, scale and reflect workloads: hosts of their topology;
	// source MACs behind host 0 (scale), when more than one; the UDP
	// 5-tuples spread over every pod (scale), if any.
	Hosts       int `json:"hosts,omitempty"`
	MACs        int `json:"macs,omitempty"`
	SpreadFlows int `json:"spread_flows,omitempty"`
}

// Sample is one measured window: one contender, one workload, one round.
type Sample struct {
	Round     int                `json:"round"`
	Contender string             `json:"contender"`
	Workload  string             `json:"workload"`
	Metrics   map[string]float64 `json:"metrics"`
	Error     string             `json:"error,omitempty"`
}

// Contender is the entry of the contender named c.Name, c added (in table
// order: the order of the first calls) if there is none yet.
func (r *Results) Contender(c ContenderResult) *ContenderResult {
	for i := range r.Contenders {
		if r.Contenders[i].Name == c.Name {
			return &r.Contenders[i]
		}
	}
	r.Contenders = append(r.Contenders, c)
	return &r.Contenders[len(r.Contenders)-1]
}

// AddTopology records namespaces, links and bridges the run created
// ("netns NAME", "link NAME", "bridge NAME"), each once.
func (r *Results) AddTopology(items ...string) {
	for _, it := range items {
		if !slices.Contains(r.Topology, it) {
			r.Topology = append(r.Topology, it)
		}
	}
}

// deriveNet adds the net CPU cost to every cost sample: its CPU per packet
// minus the baseline's in the same round, for both measures.
func (r *Results) DeriveNet() {
	for _, m := range []string{"cpu_ns_per_pkt", "own_cpu_ns_per_pkt"} {
		base := map[string]float64{}
		key := func(s *Sample) string { return fmt.Sprint(s.Round, "/", s.Workload) }
		for i := range r.Samples {
			s := &r.Samples[i]
			if r.IsBaseline(s.Contender) && s.Error == "" {
				if v, ok := s.Metrics[m]; ok {
					base[key(s)] = v
				}
			}
		}
		for i := range r.Samples {
			s := &r.Samples[i]
			if s.Error != "" || r.IsBaseline(s.Contender) {
				continue
			}
			b, ok := base[key(s)]
			v, ok2 := s.Metrics[m]
			if ok && ok2 {
				s.Metrics[m+"_net"] = v - b
			}
		}
	}
}

// IsBaseline reports whether the contender name is the no-forwarder
// baseline.
func (r *Results) IsBaseline(name string) bool {
	for _, c := range r.Contenders {
		if c.Name == name {
			return c.Baseline
		}
	}
	return false
}

// Group is the group of workload; "" if the run has no such workload.
func (r *Results) Group(workload string) string {
	for _, w := range r.Workloads {
		if w.Name == workload {
			return w.Group
		}
	}
	return ""
}

// Stat is the median and range of one metric over the rounds.
type Stat struct {
	Median, Min, Max float64
	N                int
}

// Stat is the median and range of metric over the good samples of
// contender on workload; false when there is none.
func (r *Results) Stat(contender, workload, metric string) (Stat, bool) {
	var v []float64
	for _, s := range r.Samples {
		if s.Contender != contender || s.Workload != workload || s.Error != "" {
			continue
		}
		if x, ok := s.Metrics[metric]; ok {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Stat{}, false
	}
	sort.Float64s(v)
	st := Stat{Min: v[0], Max: v[len(v)-1], N: len(v)}
	if n := len(v); n%2 == 1 {
		st.Median = v[n/2]
	} else {
		st.Median = (v[n/2-1] + v[n/2]) / 2
	}
	return st, true
}

// ratio is contender's median over the reference's, same workload and
// metric, same run.
func (r *Results) Ratio(contender, workload, metric string) (float64, bool) {
	a, ok := r.Stat(contender, workload, metric)
	if !ok {
		return 0, false
	}
	b, ok := r.Stat(r.RefFor(workload), workload, metric)
	// A ratio of a difference that crossed zero (a net CPU cost in the
	// noise) means nothing.
	if !ok || b.Median <= 0 || a.Median < 0 {
		return 0, false
	}
	return a.Median / b.Median, true
}

// sampleErrors counts failed samples of a contender.
func (r *Results) sampleErrors(contender string) (n int, first string) {
	for _, s := range r.Samples {
		if s.Contender == contender && s.Error != "" {
			if n == 0 {
				first = s.Workload + ": " + s.Error
			}
			n++
		}
	}
	return n, first
}

// LoadResults reads a results.json.
func LoadResults(path string) (*Results, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.Schema != SchemaVersion {
		return nil, fmt.Errorf("%s: schema %d, this perf reads %d", path, r.Schema, SchemaVersion)
	}
	return &r, nil
}

// WriteDir writes results.json, bench.txt, results.md and the charts.
func (r *Results) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.txt"), r.benchText(), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.Markdown()), 0o644); err != nil {
		return err
	}
	_, err = r.Charts(dir)
	return err
}

// benchMetrics are the metrics bench.txt carries, with benchstat units.
var benchMetrics = []struct{ metric, unit string }{
	{"pps", "pkts/s"},
	{"own_cpu_ns_per_pkt", "own-cpu-ns/pkt"},
	{"own_cpu_ns_per_pkt_net", "net-own-cpu-ns/pkt"},
	{"cpu_ns_per_pkt", "machine-cpu-ns/pkt"},
	{"cpu_ns_per_pkt_net", "net-machine-cpu-ns/pkt"},
	{"gbps", "Gbit/s"},
	{"tps", "trans/s"},
	{"p50_us", "p50-us"},
	{"p99_us", "p99-us"},
	{"p999_us", "p999-us"},
	{"ooo_per_million", "ooo/Mpkt"},
	{"delivered_pct", "delivered-%"},
	{"fwd_counted_loss_pct", "counted-loss-%"},
	{"uncounted_loss_pct", "uncounted-loss-%"},
	{"fwd_ctxsw_per_1k", "ctxsw/kpkt"},
	{"wakeups_per_1k", "wakeups/kpkt"},
	{"syscalls_per_1k", "syscalls/kpkt"},
}

// benchText renders every sample in the Go benchmark format, one line per
// sample, so that benchstat can compare two runs (two commits).
func (r *Results) benchText() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "goos: linux\ngoarch: amd64\npkg: github.com/xdpfwd/xdpfwd/perf\ncpu: %s\n", r.Machine.CPU)
	if r.Machine.Commit != "" {
		fmt.Fprintf(&b, "commit: %s\n", r.Machine.Commit)
	}
	for _, s := range r.Samples {
		if s.Error != "" {
			continue
		}
		fmt.Fprintf(&b, "BenchmarkPerf/workload=%s/contender=%s 1", s.Workload, s.Contender)
		for _, m := range benchMetrics {
			if v, ok := s.Metrics[m.metric]; ok {
				fmt.Fprintf(&b, " %.6g %s", v, m.unit)
			}
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// ranContenders lists, in table order, the contenders with at least one
// good sample in group.
func (r *Results) ranContenders(group string, baseline bool) []ContenderResult {
	var out []ContenderResult
	for _, c := range r.Contenders {
		if c.Baseline != baseline {
			continue
		}
		for _, s := range r.Samples {
			if s.Contender == c.Name && s.Error == "" && r.Group(s.Workload) == group {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func (r *Results) workloads(group string) []WorkloadInfo {
	var out []WorkloadInfo
	for _, w := range r.Workloads {
		if w.Group == group {
			out = append(out, w)
		}
	}
	return out
}

func (r *Results) label(name string) string {
	for _, c := range r.Contenders {
		if c.Name == name {
			return c.Label
		}
	}
	return name
}

// hasRef reports whether every workload with a good sample has one of its
// reference contender (RefContender, or its group's in groupRefs).
func (r *Results) HasRef() bool {
	ok := map[string]bool{}
	for _, s := range r.Samples {
		if s.Error == "" && s.Contender == r.RefFor(s.Workload) {
			ok[s.Workload] = true
		}
	}
	any := false
	for _, s := range r.Samples {
		if s.Error == "" && !r.IsBaseline(s.Contender) {
			any = true
			if !ok[s.Workload] {
				return false
			}
		}
	}
	return any
}

// groupRefs are the reference contenders of the workload groups whose
// contenders are not the two-link ones: the ratios there are to the same
// xdpfwd mode.
var groupRefs = map[string]string{"switch": "xdpfwd-switch", "scale": "xdpfwd-switch", "reflect": "xdpfwd-reflect"}

// refFor is the contender the ratios of workload are given to.
func (r *Results) RefFor(workload string) string {
	if ref, ok := groupRefs[r.Group(workload)]; ok {
		return ref
	}
	return RefContender
}

// trim keeps s to one line of at most n runes.
func trim(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// Machine describes where a run happened.
type Machine struct {
	Kernel   string  `json:"kernel"`
	CPU      string  `json:"cpu"`
	CPUs     int     `json:"cpus"`
	MemGiB   float64 `json:"mem_gib"`
	Go       string  `json:"go"`
	Commit   string  `json:"commit,omitempty"`
	BridgeNF string  `json:"bridge_nf_call_iptables,omitempty"` // br_netfilter: bridged frames pass iptables when "1"
}

// String is the machine in one line, as results.md opens with it.
func (m Machine) String() string {
	s := fmt.Sprintf("Linux %s, %s, %d CPUs, %.0f GiB, %s", m.Kernel, m.CPU, m.CPUs, m.MemGiB, m.Go)
	if m.Commit != "" {
		s += ", xdpfwd " + m.Commit
	}
	return s
}

// RefContender is the contender every figure is given as a ratio to.
const RefContender = "xdpfwd"

// NoWorkloadApplies is why a contender did not run when no selected
// workload applies to it: not a failure, listed apart in the notes.
const NoWorkloadApplies = "not run: no selected workload applies"
