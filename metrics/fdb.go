package metrics

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpfwd/xdpfwd/fdb"
)

// FDB is a switch's forwarding database: its entries are served as JSON on
// /fdb and its counters as xdpfwd_fdb_* metrics. modes.Switch implements it.
type FDB interface {
	Entries() []fdb.Entry
	Stats() fdb.Stats
}

// fdbCollector exports an FDB's counters.
type fdbCollector struct {
	f                                    FDB
	entries, size, learned, moves, evict *prometheus.Desc
}

func newFDBCollector(f FDB) *fdbCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("xdpfwd_fdb_"+name, help, nil, nil)
	}
	return &fdbCollector{f: f,
		entries: d("entries", "Live entries in the switch's forwarding database."),
		size:    d("size", "Entries the forwarding database holds at most."),
		learned: d("learned_total", "Addresses learned (new entries)."),
		moves:   d("moves_total", "Addresses seen on another link while their entry was live: hosts that moved, or MAC flaps (a loop, or a spoofer)."),
		evict:   d("evictions_total", "Live entries pushed out by new addresses: the table is too small for the addresses it sees."),
	}
}

func (c *fdbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.entries, c.size, c.learned, c.moves, c.evict} {
		ch <- d
	}
}

func (c *fdbCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.f.Stats()
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(len(c.f.Entries())))
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(st.Size))
	ch <- prometheus.MustNewConstMetric(c.learned, prometheus.CounterValue, float64(st.Learned))
	ch <- prometheus.MustNewConstMetric(c.moves, prometheus.CounterValue, float64(st.Moves))
	ch <- prometheus.MustNewConstMetric(c.evict, prometheus.CounterValue, float64(st.Evictions))
}

// FDBDump is what /fdb serves.
type FDBDump struct {
	Stats   fdb.Stats   `json:"stats"`
	Entries []fdb.Entry `json:"entries"`
}

func serveFDB(f FDB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(FDBDump{Stats: f.Stats(), Entries: f.Entries()})
	}
}
