package metrics

import (
	"encoding/json"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xdpfwd/xdpfwd/fdb"
)

// tableFDB serves a fdb.Table at a fixed time.
type tableFDB struct {
	t   *fdb.Table
	now int64
}

func (f tableFDB) Len() int                 { return f.t.Len(f.now) }
func (f tableFDB) All() iter.Seq[fdb.Entry] { return f.t.All(f.now) }
func (f tableFDB) Stats() fdb.Stats         { return f.t.Stats() }

// bigTable is a table of 1 M entries, about 900 k of them live.
func bigTable(tb testing.TB) tableFDB {
	tb.Helper()
	t := fdb.New(1<<20, time.Hour)
	for i := range 900_000 {
		t.Learn(fdb.Key([]byte{0x52, 0x54, 0, byte(i >> 16), byte(i >> 8), byte(i)}, 0), i&3, int64(i))
	}
	return tableFDB{t: t, now: 1 << 20}
}

// allocated is the heap bytes f allocates.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestFDBScrapeCheap: a scrape of a switch with a 1 M-entry table neither
// lists nor sorts it: it allocates no more than one with an empty table,
// give or take a few KiB, and takes milliseconds, not seconds.
func TestFDBScrapeCheap(t *testing.T) {
	f := bigTable(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newFDBCollector(f))
	var took time.Duration
	n := allocated(func() {
		start := time.Now()
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
		took = time.Since(start)
	})
	t.Logf("scrape of %d live entries: %v, %d bytes allocated", len(f.t.Entries(f.now)), took, n)
	if n > 64<<10 || took > 500*time.Millisecond && !raceEnabled {
		t.Errorf("a scrape of a 1 M-entry table allocated %d bytes in %v; want at most 64 KiB in 500ms", n, took)
	}
}

// discard is a ResponseWriter that keeps nothing but the byte count.
type discard struct {
	h http.Header
	n int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { d.n += len(p); return len(p), nil }

// TestFDBServedStreaming: /fdb of a 1 M-entry table is written as it is
// read: what the daemon allocates for it does not grow with the table (a
// few hundred KiB at most, for a response of tens of MB).
func TestFDBServedStreaming(t *testing.T) {
	f := bigTable(t)
	h := serveFDB(f)
	w := &discard{h: http.Header{}}
	n := allocated(func() { h(w, httptest.NewRequest("GET", "/fdb", nil)) })
	t.Logf("/fdb: %d bytes written, %d allocated", w.n, n)
	if w.n < 900_000*40 || n > 1<<20 {
		t.Errorf("/fdb of 900k entries: %d bytes written, %d allocated; want over 36 MB written and at most 1 MiB allocated", w.n, n)
	}
}

// TestFDBJSON: /fdb is JSON a client reads back, MAC addresses as text.
func TestFDBJSON(t *testing.T) {
	tb := fdb.New(64, time.Hour)
	tb.Learn(fdb.Key([]byte{0x52, 0x54, 0, 0xab, 0xcd, 0xef}, 7), 3, 0)
	rec := httptest.NewRecorder()
	serveFDB(tableFDB{t: tb, now: int64(time.Second)})(rec, httptest.NewRequest("GET", "/fdb", nil))
	body, _ := io.ReadAll(rec.Body)
	if !strings.Contains(string(body), `"mac":"52:54:00:ab:cd:ef"`) {
		t.Errorf("/fdb %s: want \"mac\":\"52:54:00:ab:cd:ef\"", body)
	}
	var d FDBDump
	if err := json.Unmarshal(body, &d); err != nil || len(d.Entries) != 1 || d.Entries[0].MAC.String() != "52:54:00:ab:cd:ef" ||
		d.Entries[0].VLAN != 7 || d.Entries[0].Link != 3 || d.Entries[0].Age != time.Second || d.Stats.Learned != 1 {
		t.Errorf("/fdb read back %+v, %v", d, err)
	}
}
