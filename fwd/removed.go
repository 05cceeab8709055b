package fwd

import "slices"

// keepRemovedNamed is how many removed links keep their totals by name.
const keepRemovedNamed = 64

// removedTotals holds the totals of the links removed while running: by
// name for the keepRemovedNamed removed last, the older ones folded into
// one sum. A node whose pods come and go for months then keeps a bounded
// record (a LinkStats is about 1.7 KB) and a summary and stop log of
// bounded length, and every packet is still counted once. Written under
// Forwarder.teardown.mu held exclusively.
type removedTotals struct {
	byName map[string]LinkStats
	order  []string // names in byName, by last removal, oldest first
	// older sums the links folded out of byName; olderLinks counts them
	// (a name removed twice, folded twice, counts twice).
	older      LinkStats
	olderLinks int
}

// add records st, the totals of link name as it was removed: summed with
// those of its earlier removals that are still kept by name.
func (r *removedTotals) add(name string, st LinkStats) {
	st.RXLend = 0 // what its rings lent, not a total: gone with them
	if r.byName == nil {
		r.byName = map[string]LinkStats{}
	}
	if prev, ok := r.byName[name]; ok {
		prev.add(st)
		st = prev
		r.order = slices.DeleteFunc(r.order, func(n string) bool { return n == name })
	}
	r.byName[name] = st
	r.order = append(r.order, name)
	for len(r.order) > keepRemovedNamed {
		oldest := r.order[0]
		r.order = slices.Delete(r.order, 0, 1)
		if r.olderLinks == 0 {
			r.older = newLinkStats() // its maps
		}
		r.older.add(r.byName[oldest])
		r.olderLinks++
		delete(r.byName, oldest)
	}
}

// RemovedSummary is the sum of the links removed while running whose
// totals are no longer kept by name (Summary.Links keeps the last 64).
type RemovedSummary struct {
	Links  int       `json:"links"`
	Totals LinkStats `json:"totals"`
}
