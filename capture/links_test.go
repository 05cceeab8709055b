package capture

import (
	"errors"
	"slices"
	"testing"
)

// TestSetLinks: as the forwarder's links come and go, a session of every
// link numbers each added one anew (an index reused included) and keeps
// its packets; a session of chosen links ends when one of them goes and
// keeps nothing after, of the link that takes its index least of all.
func TestSetLinks(t *testing.T) {
	h := NewHub(1, []string{"a", "b", ""})
	all, err := h.Open(Spec{})
	if err != nil {
		t.Fatal(err)
	}
	onB, err := h.Open(Spec{Links: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	onA, err := h.Open(Spec{Links: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		link string // as the session names it
		data byte
	}
	offer := func(link int, data byte) {
		set := h.Point(0).Begin()
		set.Packet(link, 0, RX, 0, [][]byte{{data}}, 1)
		set.End()
	}
	read := func(s *Session) []rec {
		var out []rec
		names := s.Links()
		for _, r := range readAll(s) {
			if r.Link >= len(names) {
				t.Fatalf("a record of link %d, the session names %q", r.Link, names)
			}
			out = append(out, rec{names[r.Link], r.Data[0]})
		}
		return out
	}
	steps := []struct {
		links  []string // SetLinks, unless nil
		offer  []int    // a packet on each index, its data the step's number
		all    []rec
		onB    []rec
		onA    []rec
		bEnded bool
	}{
		{offer: []int{0, 1}, all: []rec{{"a", 0}, {"b", 0}}, onB: []rec{{"b", 0}}, onA: []rec{{"a", 0}}},
		// b goes: onB ends; nothing more of index 1 anywhere.
		{links: []string{"a", "", ""}, offer: []int{1}, bEnded: true},
		// c takes b's index, d the empty one: every link's session names
		// them; onB keeps nothing of c.
		{links: []string{"a", "c", "d"}, offer: []int{1, 2, 0}, all: []rec{{"c", 2}, {"d", 2}, {"a", 2}}, onA: []rec{{"a", 2}}, bEnded: true},
		// c goes and comes back: a number of its own again.
		{links: []string{"a", "", "d"}, bEnded: true},
		{links: []string{"a", "c", "d"}, offer: []int{1}, all: []rec{{"c", 4}}, bEnded: true},
	}
	for i, st := range steps {
		if st.links != nil {
			h.SetLinks(st.links)
		}
		for _, l := range st.offer {
			offer(l, byte(i))
		}
		for _, s := range []struct {
			name string
			s    *Session
			want []rec
		}{{"every link", all, st.all}, {"b", onB, st.onB}, {"a", onA, st.onA}} {
			if got := read(s.s); !slices.Equal(got, s.want) {
				t.Errorf("step %d: the session of %s read %v, want %v", i, s.name, got, s.want)
			}
		}
		var gone *LinkGoneError
		select {
		case <-onB.Done():
			if !st.bEnded || !errors.As(onB.Err(), &gone) || gone.Link != "b" {
				t.Errorf("step %d: the session of b ended (%v); want it to end when b goes, with a LinkGoneError", i, onB.Err())
			}
		default:
			if st.bEnded {
				t.Errorf("step %d: the session of b still runs after b went", i)
			}
		}
		select {
		case <-onA.Done():
			t.Errorf("step %d: the session of a ended (%v) while a stays", i, onA.Err())
		case <-all.Done():
			t.Errorf("step %d: the session of every link ended (%v)", i, all.Err())
		default:
		}
	}
	if got, want := all.Links(), []string{"a", "b", "", "c", "d", "c"}; !slices.Equal(got, want) {
		t.Errorf("the session of every link numbers %q, want %q", got, want)
	}
	onB.Close() // as its reader does once it ended
	// Opened now: the links as they are, by index.
	s, err := h.Open(Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Links(), []string{"a", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("a session opened after the changes numbers %q, want %q", got, want)
	}
	s.Close()
	if _, err := h.Open(Spec{Links: []int{3}}); err == nil || err.Error() != "capture: link 3 of 3" {
		t.Errorf("a session of index 3 of 3: %v, want refused", err)
	}
	h.Close()
	if !errors.Is(all.Err(), ErrClosed) {
		t.Errorf("at Close, the session of every link ended with %v, want ErrClosed", all.Err())
	}
}

// TestRenameLink: a link renamed is the same link: sessions of every link
// and of that link go on keeping its packets under the name they started
// with, and Links names it anew for sessions to come.
func TestRenameLink(t *testing.T) {
	h := NewHub(1, []string{"a", "b"})
	all, err := h.Open(Spec{})
	if err != nil {
		t.Fatal(err)
	}
	onB, err := h.Open(Spec{Links: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	h.RenameLink(1, "b2")
	h.RenameLink(5, "nope") // no such index: nothing
	if got := h.Links(); !slices.Equal(got, []string{"a", "b2"}) {
		t.Fatalf("Links() = %q after the rename", got)
	}
	set := h.Point(0).Begin()
	set.Packet(1, 0, RX, 0, [][]byte{{7}}, 1)
	set.End()
	all.Close()
	onB.Close()
	for name, s := range map[string]*Session{"all": all, "onB": onB} {
		recs := readAll(s)
		if len(recs) != 1 || s.Links()[recs[0].Link] != "b" {
			t.Errorf("%s: %d records, links %q; want the packet, under b", name, len(recs), s.Links())
		}
		if err := s.Err(); err != nil {
			t.Errorf("%s ended with %v after a rename", name, err)
		}
	}
}
