package fwd

import (
	"fmt"
	"time"
)

// LinkStats are one link's counters, summed over its queues.
type LinkStats struct {
	RXPackets uint64            `json:"rx_packets"`
	RXBytes   uint64            `json:"rx_bytes"`
	TXPackets uint64            `json:"tx_packets"`
	TXBytes   uint64            `json:"tx_bytes"`
	Drops     map[string]uint64 `json:"drops"`
	XDPMode   string            `json:"xdp_mode"`
	BindMode  string            `json:"bind_mode"`
	Queues    int               `json:"queues"`
}

// Drop reasons. The kernel's come from XDP_STATISTICS of every socket.
const (
	DropRXDropped      = "rx_dropped"               // kernel: no room or frame too long
	DropRXRingFull     = "rx_ring_full"             // kernel: our RX ring was full
	DropFillRingEmpty  = "rx_fill_ring_empty_descs" // kernel: no frame to receive into
	DropRXInvalid      = "rx_invalid_descs"         // kernel: bad fill address
	DropTXInvalid      = "tx_invalid_descs"         // kernel: bad TX descriptor
	DropUMEMExhausted  = "umem_exhausted"           // us: fill refill found no free frame
	DropTXKickFailures = "tx_kick_errors"           // us: sendto failed (link down)
)

// LinkStats returns the counters of link i (0 or 1). It is safe to call
// while the forwarder runs: it sums per-worker atomics and reads the
// kernel's statistics with one getsockopt per socket.
func (f *Forwarder) LinkStats(i int) LinkStats {
	l := LinkStats{Drops: map[string]uint64{}, Queues: f.cfg.Queues}
	if f.progs[i] != nil {
		l.XDPMode = f.progs[i].Mode()
	}
	if len(f.socks[i]) > 0 && f.socks[i][0] != nil {
		l.BindMode = f.socks[i][0].BindMode()
	}
	for q, w := range f.workers {
		p := &w.ports[i]
		l.RXPackets += p.stats.rxPackets.Load()
		l.RXBytes += p.stats.rxBytes.Load()
		l.TXPackets += p.stats.txPackets.Load()
		l.TXBytes += p.stats.txBytes.Load()
		l.Drops[DropUMEMExhausted] += p.stats.fillShort.Load()
		l.Drops[DropTXKickFailures] += p.tx.KickErrors.Load()
		if q < len(f.socks[i]) && f.socks[i][q] != nil {
			if ks, err := f.socks[i][q].Stats(); err == nil {
				l.Drops[DropRXDropped] += ks.Rx_dropped
				l.Drops[DropRXRingFull] += ks.Rx_ring_full
				l.Drops[DropFillRingEmpty] += ks.Rx_fill_ring_empty_descs
				l.Drops[DropRXInvalid] += ks.Rx_invalid_descs
				l.Drops[DropTXInvalid] += ks.Tx_invalid_descs
			}
		}
	}
	return l
}

// TotalDrops sums every drop reason.
func (l LinkStats) TotalDrops() uint64 {
	var n uint64
	for _, v := range l.Drops {
		n += v
	}
	return n
}

// UMEMSummary describes the region in the summary.
type UMEMSummary struct {
	Backing         string `json:"backing"`
	SizeBytes       int    `json:"size_bytes"`
	LeakedAddresses int    `json:"leaked_addresses"`
}

// Summary is the --summary JSON document. Later versions add fields and
// never rename these.
type Summary struct {
	Links     map[string]LinkStats `json:"links"`
	UMEM      UMEMSummary          `json:"umem"`
	DurationS float64              `json:"duration_s"`
}

// Summary collects the final counters; call it after Run returned and
// before Close, then read Leaked after Close (FinishSummary does both).
func (f *Forwarder) Summary() Summary {
	s := Summary{Links: map[string]LinkStats{}}
	for i, l := range f.links {
		s.Links[l.name] = f.LinkStats(i)
	}
	if f.region != nil {
		s.UMEM = UMEMSummary{Backing: string(f.region.Backing()), SizeBytes: f.region.Size()}
	}
	end := f.stopped
	if end.IsZero() {
		end = time.Now()
	}
	if !f.started.IsZero() {
		s.DurationS = end.Sub(f.started).Seconds()
	}
	return s
}

// Shutdown is the end of a run: it takes the summary, closes the forwarder
// and records what leaked. The summary is returned even if Close fails.
func (f *Forwarder) Shutdown() (Summary, error) {
	s := f.Summary()
	err := f.Close()
	s.UMEM.LeakedAddresses = f.Leaked()
	return s, err
}

// StatsLine formats one report line from two snapshots taken dt apart:
// per direction, packets/s, Mbit/s and new drops.
func StatsLine(names [2]string, prev, cur [2]LinkStats, dt time.Duration) string {
	sec := dt.Seconds()
	dir := func(a, b int) string {
		pk := cur[a].RXPackets - prev[a].RXPackets
		by := cur[a].RXBytes - prev[a].RXBytes
		dr := cur[a].TotalDrops() - prev[a].TotalDrops()
		return fmt.Sprintf("%s→%s %9.0f pps %8.1f Mbit/s drops %d", names[a], names[b], float64(pk)/sec, float64(by)*8/sec/1e6, dr)
	}
	return dir(0, 1) + " | " + dir(1, 0)
}
