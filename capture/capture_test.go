package capture

import (
	"bytes"
	"sync"
	"testing"

	"github.com/xdpfwd/xdpfwd/cbpf"
)

func readAll(s *Session) []Record {
	var out []Record
	s.Read(1<<30, func(rec []byte) bool {
		r, ok := Parse(rec)
		if !ok {
			panic("unparsable record")
		}
		r.Data = bytes.Clone(r.Data)
		out = append(out, r)
		return true
	})
	return out
}

// TestNobodyCaptures: with no session, Begin is nil; a closed session
// leaves the points as they were.
func TestNobodyCaptures(t *testing.T) {
	h := NewHub(2, []string{"a", "b"})
	if h.Point(0).Begin() != nil {
		t.Fatal("Begin without a session is not nil")
	}
	s, err := h.Open(Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if set := h.Point(1).Begin(); set == nil {
		t.Fatal("Begin with a session is nil")
	} else {
		set.End()
	}
	s.Close()
	if h.Point(0).Begin() != nil || h.Point(1).Begin() != nil {
		t.Fatal("Begin after the last session closed is not nil")
	}
}

// TestSelect: links, directions, snapshot length and filter select what a
// session keeps, from every worker; two sessions see the same packets.
func TestSelect(t *testing.T) {
	h := NewHub(2, []string{"a", "b"})
	prog, err := cbpf.New([]cbpf.Instruction{
		{Op: 0x30, K: 0},               // ldb [0]
		{Op: 0x15, Jt: 0, Jf: 1, K: 7}, // jeq #7
		{Op: 0x06, K: 3},               // ret #3
		{Op: 0x06, K: 0},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec Spec
		want []string // link/dir/len of the records, in order
	}{
		{"all", Spec{}, []string{"0/1/5", "1/2/5", "0/4/5", "1/1/5"}},
		{"link b", Spec{Links: []int{1}}, []string{"1/2/5", "1/1/5"}},
		{"drops", Spec{Dirs: Drop}, []string{"0/4/5"}},
		{"rx tx", Spec{Dirs: RX | TX}, []string{"0/1/5", "1/2/5", "1/1/5"}},
		{"snaplen", Spec{Snaplen: 2}, []string{"0/1/2", "1/2/2", "0/4/2", "1/1/2"}},
		{"filter", Spec{Filter: prog}, []string{"0/1/3", "0/4/3"}},
	}
	// MaxSessions per hub: the same packets to as many hubs as needed.
	hubs := []*Hub{h}
	var ss []*Session
	for i, tc := range tests {
		if i > 0 && i%MaxSessions == 0 {
			hubs = append(hubs, NewHub(2, []string{"a", "b"}))
		}
		s, err := hubs[len(hubs)-1].Open(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	pkt := func(first byte) [][]byte { return [][]byte{{first, 1, 2}, {3, 4}} }
	for _, h := range hubs {
		set := h.Point(0).Begin()
		set.Packet(0, 0, RX, 0, pkt(7), 5)
		set.Packet(1, 0, TX, 0, pkt(8), 5)
		set.End()
		set = h.Point(1).Begin()
		set.Packet(0, 1, Drop, 2, pkt(7), 9) // original 9, 5 kept at most
		set.Packet(1, 1, RX, 0, pkt(9), 5)
		set.End()
	}
	for i, tc := range tests {
		var got []string
		recs := readAll(ss[i])
		for _, r := range recs {
			got = append(got, string(rune('0'+r.Link))+"/"+string(rune('0'+r.Dir))+"/"+string(rune('0'+len(r.Data))))
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
			continue
		}
		for j := range got {
			if got[j] != tc.want[j] {
				t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
				break
			}
		}
		for _, r := range recs {
			if r.Dir == Drop && (r.Reason != 2 || r.OrigLen != 9 || r.Queue != 1) {
				t.Errorf("%s: drop record %+v", tc.name, r)
			}
			if !bytes.Equal(r.Data, []byte{r.Data[0], 1, 2, 3, 4}[:len(r.Data)]) {
				t.Errorf("%s: data % x", tc.name, r.Data)
			}
		}
	}
}

// TestLossCounted: a full ring counts what it cannot keep; what it kept
// and what it lost add up to what was offered, across wrap-arounds.
func TestLossCounted(t *testing.T) {
	h := NewHub(1, []string{"a"})
	s, err := h.Open(Spec{Snaplen: 100, Buffer: 1024})
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 100)
	read, offered := 0, 0
	for round := range 50 {
		set := h.Point(0).Begin()
		for k := range 7 {
			data[0] = byte(round*7 + k)
			set.Packet(0, 0, RX, 0, [][]byte{data}, 100)
			offered++
		}
		set.End()
		if round%3 == 0 {
			for _, r := range readAll(s) {
				if len(r.Data) != 100 {
					t.Fatalf("record of %d bytes", len(r.Data))
				}
				read++
			}
		}
	}
	read += len(readAll(s))
	t.Logf("offered %d, read %d, lost %d", offered, read, s.Lost())
	if s.Lost() == 0 || uint64(read)+s.Lost() != uint64(offered) || s.Kept() != uint64(read) {
		t.Errorf("offered %d: read %d, kept %d, lost %d", offered, read, s.Kept(), s.Lost())
	}
}

// TestCloseWhileWriting: sessions open and close while a worker writes;
// each session's records are whole and in order.
func TestCloseWhileWriting(t *testing.T) {
	h := NewHub(1, []string{"a"})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var seq byte
		data := make([]byte, 64)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if set := h.Point(0).Begin(); set != nil {
				for range 16 {
					data[0] = seq
					seq++
					set.Packet(0, 0, RX, 0, [][]byte{data}, 64)
				}
				set.End()
			}
		}
	})
	for range 50 {
		s, err := h.Open(Spec{Buffer: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		var recs []Record
		for len(recs) < 100 {
			recs = append(recs, readAll(s)...)
		}
		s.Close()
		recs = append(recs, readAll(s)...)
		for i := 1; i < len(recs) && s.Lost() == 0; i++ {
			if recs[i].Data[0] != recs[i-1].Data[0]+1 {
				t.Fatalf("record %d: sequence %d after %d", i, recs[i].Data[0], recs[i-1].Data[0])
			}
		}
	}
	close(stop)
	wg.Wait()
}

// TestPacketAllocs: the worker's side allocates nothing.
func TestPacketAllocs(t *testing.T) {
	h := NewHub(1, []string{"a"})
	s, _ := h.Open(Spec{})
	data := [][]byte{make([]byte, 1500)}
	n := testing.AllocsPerRun(100, func() {
		set := h.Point(0).Begin()
		set.Packet(0, 0, RX, 0, data, 1500)
		set.End()
		s.Read(10, func([]byte) bool { return true })
	})
	if n != 0 {
		t.Errorf("%v allocations per packet", n)
	}
}

// BenchmarkBeginIdle is the cost on a worker's batch while nobody
// captures.
func BenchmarkBeginIdle(b *testing.B) {
	p := NewHub(1, []string{"a"}).Point(0)
	for b.Loop() {
		if p.Begin() != nil {
			b.Fatal("capturing")
		}
	}
}

// BenchmarkPacket is the cost of one 1500-byte packet offered to one
// session.
func BenchmarkPacket(b *testing.B) {
	h := NewHub(1, []string{"a"})
	s, _ := h.Open(Spec{})
	data := [][]byte{make([]byte, 1500)}
	b.SetBytes(1500)
	for b.Loop() {
		set := h.Point(0).Begin()
		set.Packet(0, 0, RX, 0, data, 1500)
		set.End()
		s.Read(10, func([]byte) bool { return true })
	}
}
