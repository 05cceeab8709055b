package fdb

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
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

// TestFloodKeepsOtherLinks: one link bringing eight times as many
// addresses as the table holds (a ToR's worth behind an uplink, or a MAC
// flood) churns its own entries: the hosts learned on the other links
// stay, so their traffic is still switched, not flooded to every link,
// though none of them has sent since; and a host that comes later, on
// another link, is still learned.
func TestFloodKeepsOtherLinks(t *testing.T) {
	tb := New(MinSize, time.Hour)
	const pods = 64
	podMAC := func(i int) []byte { return []byte{0x02, 0xaa, 0, 0, 0, byte(i)} }
	for i := 1; i < pods; i++ {
		tb.Learn(Key(podMAC(i), 0), i, 1)
	}
	flood := 8 * tb.Stats().Size
	for i := range flood {
		tb.Learn(Key(mac(i), 0), 0, int64(2+i))
	}
	now := int64(2 + flood)
	for i := 1; i < pods; i++ {
		if link, ok := tb.Lookup(Key(podMAC(i), 0), now); !ok || link != i {
			t.Errorf("pod %d after %d addresses learned on link 0: link %d, %v; want %d", i, flood, link, ok, i)
		}
	}
	if st := tb.Stats(); st.Evictions == 0 {
		t.Errorf("no eviction in %d addresses on a table of %d: %+v", flood, st.Size, st)
	}
	late := podMAC(200)
	if got := tb.Learn(Key(late, 0), 5, now); got != Learned {
		t.Errorf("a host on link 5 after the flood: %v, want Learned", got)
	}
	if link, ok := tb.Lookup(Key(late, 0), now); !ok || link != 5 {
		t.Errorf("a host on link 5 after the flood: link %d, %v", link, ok)
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

// TestShortAgeKeepsActiveHosts: an address seen every 10 ms stays known
// whatever the --fdb-age, as long as the age is longer than the gap between
// its frames: the refresh that keeps it live scales with the age.
func TestShortAgeKeepsActiveHosts(t *testing.T) {
	const ms = int64(time.Millisecond)
	for _, age := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second} {
		t.Run(age.String(), func(t *testing.T) {
			tb := New(64, age)
			key := Key(mac(1), 0)
			miss := 0
			for i := range int64(300) {
				now := 1000*ms + i*10*ms // not at 0: a stale stamp would be older
				tb.Learn(key, 1, now)
				if _, ok := tb.Lookup(key, now+9*ms); !ok {
					miss++
				}
			}
			if miss != 0 {
				t.Errorf("age %v, seen every 10ms: unknown in %d of 300 lookups, want 0", age, miss)
			}
		})
	}
}

// TestSequentialMACsSpread: addresses that differ only in their low bytes,
// as a hypervisor's (52:54:00:…) or a test generator's are, spread over the
// buckets: half-full, the table keeps nearly all of them.
func TestSequentialMACsSpread(t *testing.T) {
	for _, c := range []struct {
		name   string
		prefix []byte
		n      int
		size   int
		vlan   uint16
	}{
		{"qemu 64k in 128k", []byte{0x52, 0x54, 0x00}, 65536, 131072, 0},
		{"qemu 16k in 32k", []byte{0x52, 0x54, 0x00}, 16384, 32768, 0},
		{"locally administered 256k in 512k, vlan 7", []byte{0x02, 0x00, 0x5e}, 262144, 524288, 7},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := New(c.size, time.Hour)
			for i := range c.n {
				m := append(append([]byte(nil), c.prefix...), byte(i>>16), byte(i>>8), byte(i))
				tb.Learn(Key(m, c.vlan), 1, int64(i))
			}
			live := len(tb.Entries(int64(c.n)))
			ev := tb.Stats().Evictions
			// Uniform hashing at half load would lose about 4 %.
			t.Logf("%d addresses in a %d table: %d live, %d evicted", c.n, c.size, live, ev)
			if max := uint64(c.n / 50); ev > max || live < c.n-int(max) {
				t.Errorf("%d addresses in a %d table: %d live, %d evicted; want at most %d evicted", c.n, c.size, live, ev, max)
			}
		})
	}
}

// TestNewBounded: New returns for any size: up to MaxSize a table, beyond
// it a panic naming the size (the daemon checks --fdb-size first), never an
// endless loop.
func TestNewBounded(t *testing.T) {
	for _, size := range []int{1 << 40, 1<<62 + 1, int(^uint(0) >> 1)} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				New(size, time.Minute)
			}()
			select {
			case r := <-done:
				if r == nil || !strings.Contains(fmt.Sprint(r), fmt.Sprint(size)) {
					t.Errorf("New(%d): recovered %v, want a panic naming the size", size, r)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("New(%d) did not return in 5s", size)
			}
		})
	}
}

// TestEntryJSON: an entry's MAC address is printed as aa:bb:cc:dd:ee:ff in
// JSON, not as base64, and reads back.
func TestEntryJSON(t *testing.T) {
	e := Entry{MAC: net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0xab}, VLAN: 7, Link: 2, Age: time.Second}
	raw, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"mac":"52:54:00:12:34:ab"`) {
		t.Errorf("JSON %s, want \"mac\":\"52:54:00:12:34:ab\"", raw)
	}
	var back Entry
	if err := json.Unmarshal(raw, &back); err != nil || back.MAC.String() != e.MAC.String() || back.VLAN != 7 || back.Link != 2 || back.Age != time.Second {
		t.Errorf("read back %+v, %v; want %+v", back, err, e)
	}
}

// TestWordRoundTrip: an entry's word and its bucket give back its address
// and VLAN (Entries decodes them), at every table size's split between
// bucket bits and tag bits.
func TestWordRoundTrip(t *testing.T) {
	if f, inv := uint64(fib), uint64(fibInv); f*inv != 1 {
		t.Fatalf("fibInv is not fib's inverse mod 2^64: product %#x", f*inv)
	}
	r := rand.New(rand.NewPCG(3, 4))
	for _, size := range []int{MinSize, 1 << 14, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			tb := New(size, time.Hour)
			want := map[string]int{}
			for i := range size / 8 {
				m := r.Uint64()
				mac := net.HardwareAddr{byte(m>>40) &^ 1, byte(m >> 32), byte(m >> 24), byte(m >> 16), byte(m >> 8), byte(m)}
				vlan := uint16(m>>48) & 0xfff
				tb.Learn(Key(mac, vlan), i%MaxLinks, 0)
				want[fmt.Sprintf("%s/%d", mac, vlan)] = i % MaxLinks
			}
			got := tb.Entries(1)
			// Random addresses overflow a bucket now and then.
			if ev := tb.Stats().Evictions; len(got) != len(want)-int(ev) || ev > uint64(size/1000) {
				t.Errorf("%d entries, %d evicted; want %d in all", len(got), ev, len(want))
			}
			for _, e := range got {
				if l, ok := want[fmt.Sprintf("%s/%d", e.MAC, e.VLAN)]; !ok || l != e.Link {
					t.Errorf("entry %s vlan %d on link %d: learned %v on link %d", e.MAC, e.VLAN, e.Link, ok, l)
				}
			}
		})
	}
}

// TestDedup: of two copies of one address in a bucket (two workers learned
// it at once), the one in the lower slot stays, whichever worker looks.
func TestDedup(t *testing.T) {
	for _, c := range []struct{ lo, hi, mine int }{{0, 3, 3}, {0, 3, 0}, {1, 2, 2}, {1, 2, 1}} {
		tb := New(MinSize, time.Hour)
		key := Key(mac(1), 0)
		b, want := tb.find(key)
		b[c.lo].w.Store(want | 1)
		b[c.hi].w.Store(want | 2)
		tb.learned.Store(2)
		tb.dedup(b, c.mine, want)
		if b[c.lo].w.Load() != want|1 || b[c.hi].w.Load() != 0 || tb.learned.Load() != 1 {
			t.Errorf("copies in %d and %d, dedup by %d: slots %#x, %#x, learned %d; want the first kept, 1 learned",
				c.lo, c.hi, c.mine, b[c.lo].w.Load(), b[c.hi].w.Load(), tb.learned.Load())
		}
		if l, ok := tb.Lookup(key, 0); !ok || l != 1 {
			t.Errorf("after dedup: lookup %d, %v; want 1", l, ok)
		}
	}
}
