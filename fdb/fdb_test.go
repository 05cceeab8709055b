package fdb

import (
	"net"
	"sync"
	"testing"
	"time"
)

func mac(i int) []byte { return []byte{0x02, 0, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)} }

func TestTable(t *testing.T) {
	const sec = int64(time.Second)
	type step struct {
		op        string // learn, lookup, static
		mac, vlan int
		link      int
		at        int64
		wantLink  int
		wantOK    bool // lookup: found; learn: moved
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"unknown", []step{{op: "lookup", mac: 1, at: 0}}},
		{"learned", []step{{op: "learn", mac: 1, link: 3, at: 0}, {op: "lookup", mac: 1, at: sec, wantLink: 3, wantOK: true}}},
		{"per vlan", []step{{op: "learn", mac: 1, vlan: 10, link: 3}, {op: "lookup", mac: 1, vlan: 20}, {op: "lookup", mac: 1, vlan: 10, wantLink: 3, wantOK: true}}},
		{"aged out", []step{{op: "learn", mac: 1, link: 3}, {op: "lookup", mac: 1, at: 301 * sec}}},
		{"refreshed", []step{{op: "learn", mac: 1, link: 3}, {op: "learn", mac: 1, link: 3, at: 200 * sec},
			{op: "lookup", mac: 1, at: 400 * sec, wantLink: 3, wantOK: true}}},
		{"moved", []step{{op: "learn", mac: 1, link: 3}, {op: "learn", mac: 1, link: 4, at: sec, wantOK: true},
			{op: "lookup", mac: 1, at: sec, wantLink: 4, wantOK: true}}},
		{"back after aging is no move", []step{{op: "learn", mac: 1, link: 3}, {op: "learn", mac: 1, link: 4, at: 400 * sec},
			{op: "lookup", mac: 1, at: 400 * sec, wantLink: 4, wantOK: true}}},
		{"static never moves or ages", []step{{op: "static", mac: 1, link: 2}, {op: "learn", mac: 1, link: 5, at: sec},
			{op: "lookup", mac: 1, at: 10000 * sec, wantLink: 2, wantOK: true}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := New(64, 300*time.Second)
			for i, s := range c.steps {
				key := Key(mac(s.mac), uint16(s.vlan))
				switch s.op {
				case "learn":
					if o := tb.Learn(key, s.link, s.at); (o == Moved) != s.wantOK {
						t.Errorf("step %d: Learn: %v, want moved %v", i, o, s.wantOK)
					}
				case "static":
					if err := tb.AddStatic(net.HardwareAddr(mac(s.mac)), uint16(s.vlan), s.link); err != nil {
						t.Fatal(err)
					}
				case "lookup":
					link, ok := tb.Lookup(key, s.at)
					if ok != s.wantOK || ok && link != s.wantLink {
						t.Errorf("step %d: Lookup = %d, %v; want %d, %v", i, link, ok, s.wantLink, s.wantOK)
					}
				}
			}
		})
	}
}

// TestBounded: far more addresses than slots leave the table at its size,
// count evictions, and keep the most recent addresses.
func TestBounded(t *testing.T) {
	tb := New(256, time.Hour)
	for i := range 10000 {
		tb.Learn(Key(mac(i), 0), i%8, int64(i))
	}
	st := tb.Stats()
	n := len(tb.Entries(10000))
	if n > st.Size || st.Evictions == 0 || st.Learned != 10000 {
		t.Errorf("%d entries in %d slots, %+v", n, st.Size, st)
	}
	if _, ok := tb.Lookup(Key(mac(9999), 0), 10000); !ok {
		t.Error("the last address learned is not there")
	}
}

// TestStaticFull: a bucket of static entries refuses more and says so.
func TestStaticFull(t *testing.T) {
	tb := New(64, time.Hour)
	key := Key(mac(1), 0)
	// Fill mac 1's bucket with static entries of colliding addresses.
	b := tb.bucket(key)
	added := 0
	for i := 2; added < len(b); i++ {
		if &tb.bucket(Key(mac(i), 0))[0] == &b[0] {
			if err := tb.AddStatic(net.HardwareAddr(mac(i)), 0, 1); err != nil {
				t.Fatal(err)
			}
			added++
		}
	}
	if err := tb.AddStatic(net.HardwareAddr(mac(1)), 0, 1); err == nil {
		t.Error("AddStatic into a bucket of static entries succeeded")
	}
	tb.Learn(key, 2, 0)
	if _, ok := tb.Lookup(key, 0); ok || tb.Stats().Full != 1 {
		t.Errorf("learned into a static bucket: %+v", tb.Stats())
	}
}

// TestConcurrent: workers learning and looking up at once (run with -race)
// never see an address on a link it was never learned on.
func TestConcurrent(t *testing.T) {
	tb := New(1024, time.Hour)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 20000 {
				k := Key(mac(i%500), 0)
				tb.Learn(k, (i%500)%4, int64(i))
				if l, ok := tb.Lookup(Key(mac((i+w)%500), 0), int64(i)); ok && l != ((i+w)%500)%4 {
					t.Errorf("address %d on link %d", (i+w)%500, l)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestEntries(t *testing.T) {
	tb := New(64, time.Minute)
	tb.Learn(Key(mac(2), 7), 1, 0)
	if err := tb.AddStatic(net.HardwareAddr(mac(1)), 0, 3); err != nil {
		t.Fatal(err)
	}
	es := tb.Entries(int64(time.Second))
	if len(es) != 2 || !es[0].Static || es[0].Link != 3 || es[1].VLAN != 7 || es[1].Age != time.Second {
		t.Errorf("entries %+v", es)
	}
}

func BenchmarkLearnLookup(b *testing.B) {
	tb := New(DefaultSize, time.Hour)
	keys := make([]uint64, 1024)
	for i := range keys {
		keys[i] = Key(mac(i), 0)
	}
	b.ReportAllocs()
	for i := range b.N {
		k := keys[i&1023]
		tb.Learn(k, i&3, int64(i))
		tb.Lookup(keys[(i+7)&1023], int64(i))
	}
}

// TestForget: Forget removes every entry on one link, learned and static,
// and no other.
func TestForget(t *testing.T) {
	tb := New(1024, time.Minute)
	mac := func(i int) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, byte(i >> 8), byte(i)} }
	for i := range 300 {
		tb.Learn(Key(mac(i), 0), i%3, 1)
	}
	if err := tb.AddStatic(mac(1000), 0, 1); err != nil {
		t.Fatal(err)
	}
	if n := tb.Forget(1); n != 101 {
		t.Errorf("Forget(1) removed %d entries, want 101 (100 learned, 1 static)", n)
	}
	for i := range 300 {
		link, ok := tb.Lookup(Key(mac(i), 0), 2)
		if want := i%3 != 1; ok != want || ok && link != i%3 {
			t.Errorf("%s after Forget(1): link %d found %v, want found %v", mac(i), link, ok, want)
		}
	}
	if _, ok := tb.Lookup(Key(mac(1000), 0), 2); ok {
		t.Errorf("static entry on link 1 survived Forget(1)")
	}
}
