package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Handovers is what a daemon says of the handovers its datapath went
// through (xdpfwd run --takeover): how many, counted across the daemons
// that ran it, and the pause of the last one, from the predecessor's
// freeze to this daemon's first round (0: none yet).
type Handovers struct {
	Count     uint64
	LastPause time.Duration
}

// handoverCollector exports Options.Handovers.
type handoverCollector struct {
	read         func() Handovers
	count, pause *prometheus.Desc
}

func newHandoverCollector(read func() Handovers) *handoverCollector {
	return &handoverCollector{read: read,
		count: prometheus.NewDesc("xdpfwd_handovers_total", "Handovers of the datapath from a running daemon to its successor (xdpfwd run --takeover), across the daemons that ran it.", nil, nil),
		pause: prometheus.NewDesc("xdpfwd_handover_pause_seconds", "The last handover's pause: from the predecessor's freeze to its successor's first round; frames arriving meanwhile waited on the RX rings.", nil, nil),
	}
}

func (c *handoverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.pause
}

func (c *handoverCollector) Collect(ch chan<- prometheus.Metric) {
	h := c.read()
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.CounterValue, float64(h.Count))
	ch <- prometheus.MustNewConstMetric(c.pause, prometheus.GaugeValue, h.LastPause.Seconds())
}
