package fdb

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

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
