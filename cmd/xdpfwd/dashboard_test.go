package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

const dashboardFile = "deploy/grafana/xdpfwd.json"

// dashboard is what the tests read of deploy/grafana/xdpfwd.json.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Type       string `json:"type"`
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(readDoc(t, dashboardFile)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// queries are the dashboard's PromQL: every panel's targets, and its
// variables' label_values.
func (d dashboard) queries() []string {
	var qs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if m, ok := v.Query.(map[string]any); ok {
			if q, ok := m["query"].(string); ok {
				qs = append(qs, q)
			}
		}
	}
	return qs
}

// TestDashboardShape: the dashboard is Grafana JSON a Prometheus data
// source chosen by its variable feeds: unique panel ids, panels within
// the 24-column grid, each with its data source and at least one query,
// each legend naming only labels its query keeps.
func TestDashboardShape(t *testing.T) {
	d := readDashboard(t)
	if d.UID == "" {
		t.Error("no uid")
	}
	ids := map[int]bool{}
	byLabels := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: id %d used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: data source %q, %d queries; want ${datasource} and a query", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, tg := range p.Targets {
			var kept []string
			for _, m := range byLabels.FindAllStringSubmatch(tg.Expr, -1) {
				kept = append(kept, splitLabels(m[1])...)
			}
			for _, m := range regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !slices.Contains(kept, m[1]) {
					t.Errorf("panel %q: legend %q names %s, which %q does not keep", p.Title, tg.LegendFormat, m[1], tg.Expr)
				}
			}
		}
	}
}

func splitLabels(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// targetLabels are the labels Prometheus gives every series it scrapes.
var targetLabels = []string{"instance", "job"}

// TestDashboardQueries: every metric the dashboard's queries name is one
// a switch daemon serving a pod exports, and every label they match on,
// group by or read (label_values) is one of that metric's (or a target
// label Prometheus adds): scraped from a running daemon, not a list.
func TestDashboardQueries(t *testing.T) {
	h := newHosts(t, 2)
	dir := t.TempDir()
	ctl := filepath.Join(dir, "ctl.sock")
	d := startBin(t, "run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl, "--metrics", "127.0.0.1:0")
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	if r := runBin(t, 10*time.Second, nil, "link", "add", h.Links[1], "--pod", "default/web-0", "--control", ctl); r.code != 0 {
		t.Fatalf("link add: exit %d, %s", r.code, r.stderr)
	}
	if res, err := topo.Ping(h.NS[1], h.V4[0], 1, 3*time.Second); err != nil || res.Received != 1 {
		t.Fatalf("ping: %+v %v", res, err)
	}
	labels := exported(scrapeFamilies(t, "http://"+waitMetricsAddr(t, d, 5*time.Second)+"/metrics"))

	metric := regexp.MustCompile(`\b((?:xdpfwd|process)_[a-z0-9_]+)\b(\s*\{([^}]*)\})?`)
	matcher := regexp.MustCompile(`(\w+)\s*(?:=~|!~|!=|=)`)
	byLabels := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelValues := regexp.MustCompile(`label_values\(\s*((?:xdpfwd|process)_[a-z0-9_]+)[^,]*,\s*(\w+)\s*\)`)
	has := func(name, label string) bool {
		return slices.Contains(targetLabels, label) || slices.Contains(labels[name], label)
	}
	named := 0
	for _, q := range readDashboard(t).queries() {
		refs := metric.FindAllStringSubmatchIndex(q, -1)
		for _, r := range refs {
			name := q[r[2]:r[3]]
			named++
			if _, ok := labels[name]; !ok {
				t.Errorf("%q: %s is no metric the daemon exports", q, name)
				continue
			}
			if r[6] >= 0 {
				for _, m := range matcher.FindAllStringSubmatch(q[r[6]:r[7]], -1) {
					if !has(name, m[1]) {
						t.Errorf("%q: %s has no label %s (it has %v)", q, name, m[1], labels[name])
					}
				}
			}
		}
		// A by or without clause groups the metric that follows it.
		for _, b := range byLabels.FindAllStringSubmatchIndex(q, -1) {
			next := slices.IndexFunc(refs, func(r []int) bool { return r[0] > b[1] })
			if next < 0 {
				t.Errorf("%q: a by clause with no metric after it", q)
				continue
			}
			name := q[refs[next][2]:refs[next][3]]
			for _, l := range splitLabels(q[b[2]:b[3]]) {
				if !has(name, l) {
					t.Errorf("%q: groups by %s, which %s does not have (it has %v)", q, l, name, labels[name])
				}
			}
		}
		for _, m := range labelValues.FindAllStringSubmatch(q, -1) {
			if !has(m[1], m[2]) {
				t.Errorf("%q: label_values of %s's %s, which it does not have", q, m[1], m[2])
			}
		}
	}
	if named < 20 {
		t.Errorf("the dashboard's queries name %d metrics; want its panels' (at least 20)", named)
	}
	if !t.Failed() {
		t.Logf("%d metric references in the dashboard's queries, each exported with the labels it is matched or grouped on", named)
	}
}

// exported is the label names of each family's samples, by family name.
func exported(fams map[string]*dto.MetricFamily) map[string][]string {
	out := map[string][]string{}
	for name, f := range fams {
		ls := []string{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(ls, l.GetName()) {
					ls = append(ls, l.GetName())
				}
			}
		}
		out[name] = ls
	}
	return out
}
