package metrics

import (
	"encoding/json"
	"iter"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpfwd/xdpfwd/fdb"
)

// FDB is a switch's forwarding database: its entries are served as JSON on
// /fdb and its counters as xdpfwd_fdb_* metrics. modes.Switch implements it.
//
// Neither a scrape nor /fdb lists the table into memory: the table may
// hold millions of entries, on the daemon that runs the workers.
type FDB interface {
	// Len is the number of live entries, counted without listing them.
	Len() int
	// All yields the live entries, in no order; each Entry's MAC is valid
	// until the next (fdb.Table.All).
	All() iter.Seq[fdb.Entry]
	Stats() fdb.Stats
}

// fdbCollector exports an FDB's counters.
type fdbCollector struct {
	f                                    FDB
	entries, size, learned, moves, evict *prometheus.Desc
	full, conflicts                      *prometheus.Desc
}

func newFDBCollector(f FDB) *fdbCollector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("xdpfwd_fdb_"+name, help, nil, nil)
	}
	return &fdbCollector{f: f,
		entries:   d("entries", "Live entries in the switch's forwarding database."),
		size:      d("size", "Entries the forwarding database holds at most."),
		learned:   d("learned_total", "Addresses learned (new entries)."),
		moves:     d("moves_total", "Addresses seen on another link while their entry was live: hosts that moved, or MAC flaps (a loop, or a spoofer)."),
		evict:     d("evictions_total", "Live entries pushed out by new addresses: the table is too small for the addresses it sees."),
		full:      d("full_total", "Addresses not learned: their bucket held only static entries."),
		conflicts: d("conflicts_total", "Frames from a link whose source address is static on another (a pod's MAC heard elsewhere: a spoofer behind a trusted link, or a pod whose address is not its own)."),
	}
}

func (c *fdbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.entries, c.size, c.learned, c.moves, c.evict, c.full, c.conflicts} {
		ch <- d
	}
}

func (c *fdbCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.f.Stats()
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(c.f.Len()))
	ch <- prometheus.MustNewConstMetric(c.size, prometheus.GaugeValue, float64(st.Size))
	ch <- prometheus.MustNewConstMetric(c.learned, prometheus.CounterValue, float64(st.Learned))
	ch <- prometheus.MustNewConstMetric(c.moves, prometheus.CounterValue, float64(st.Moves))
	ch <- prometheus.MustNewConstMetric(c.evict, prometheus.CounterValue, float64(st.Evictions))
	ch <- prometheus.MustNewConstMetric(c.full, prometheus.CounterValue, float64(st.Full))
	ch <- prometheus.MustNewConstMetric(c.conflicts, prometheus.CounterValue, float64(st.Conflicts))
}

// FDBDump is what /fdb serves. Its entries are in no order.
type FDBDump struct {
	Stats   fdb.Stats   `json:"stats"`
	Entries []fdb.Entry `json:"entries"`
}

// fdbChunk is how much of /fdb is buffered before it is written.
const fdbChunk = 32 << 10

// serveFDB writes an FDBDump as it reads the table, a chunk at a time: its
// memory does not grow with the table, and a client that goes away stops
// it at the next chunk.
func serveFDB(f FDB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		st, err := json.Marshal(f.Stats())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		buf := make([]byte, 0, fdbChunk+256)
		buf = append(append(append(buf, `{"stats":`...), st...), `,"entries":[`...)
		sep := false
		for e := range f.All() {
			if sep {
				buf = append(buf, ',')
			}
			sep = true
			buf = e.AppendJSON(buf)
			if len(buf) >= fdbChunk {
				if _, err := w.Write(buf); err != nil {
					return
				}
				buf = buf[:0]
			}
		}
		w.Write(append(buf, "]}\n"...))
	}
}
