package csum

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// checkAgainstReference runs Complete on a copy of frame and checks that:
// it matches the slow reference (result and bytes); it wrote nothing but
// the two checksum bytes, and those only when it returned Completed; and a
// second call finds the frame complete and leaves it alone.
func checkAgainstReference(t *testing.T, frame []byte) {
	t.Helper()
	in := bytes.Clone(frame)
	f := bytes.Clone(frame)
	got := Complete(f)
	want, wantOut := refComplete(in)
	if got != want {
		t.Fatalf("Complete = %v, reference %v", got, want)
	}
	if !bytes.Equal(f, wantOut) {
		t.Fatalf("Complete output differs from the reference")
	}
	lo, hi := len(f), -1
	for i := range f {
		if f[i] != in[i] {
			lo, hi = min(lo, i), max(hi, i)
		}
	}
	if got != Completed {
		if hi >= 0 {
			t.Fatalf("%v, but bytes %d..%d changed", got, lo, hi)
		}
	} else {
		loc, ok := refLocate(in)
		if !ok {
			t.Fatal("Completed a frame the reference cannot parse")
		}
		if hi < 0 {
			t.Fatal("Completed, but nothing changed")
		}
		if lo < loc.field || hi > loc.field+1 {
			t.Fatalf("wrote bytes %d..%d outside the checksum field at %d", lo, hi, loc.field)
		}
	}
	again := bytes.Clone(f)
	second := Complete(again)
	if !bytes.Equal(again, f) {
		t.Fatal("second Complete modified the frame")
	}
	if got == Completed && second != AlreadyComplete || got != Completed && second != got {
		t.Fatalf("second Complete = %v after %v", second, got)
	}
}

// maxSeedLen bounds the frames used as fuzz seeds: the fuzzer minimizes
// every new input it finds, and minimizing a 1.5 or 9 KB frame takes long
// enough to stall a 60 s run. Headers are where the interest is.
const maxSeedLen = 600

func FuzzComplete(f *testing.F) {
	for _, c := range goodCases() {
		p := build(c.spec)
		if c.edit != nil {
			c.edit(p)
		}
		if len(p.frame) > maxSeedLen {
			continue // big frames make minimization slow; the table tests cover them
		}
		f.Add(p.partialFrame())
		f.Add(p.frame)
	}
	for _, c := range badCases() {
		f.Add(c.edit(build(c.spec)))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkAgainstReference(t, frame)
	})
}

// cutLens turns fuzz bytes into segment lengths: one byte each, 0 to 255,
// so a short input still cuts a frame into many pieces, at odd and even
// points, empty ones included.
func cutLens(cuts []byte) []int {
	lens := make([]int, 0, len(cuts))
	for _, c := range cuts {
		lens = append(lens, int(c))
	}
	return lens
}

// chainSeedCuts are the cut patterns of the FuzzCompleteChain seeds: none,
// inside the Ethernet header, at an odd point, one byte at a time through
// the IP header, and 64-byte pieces.
var chainSeedCuts = [][]byte{
	{},
	{13},
	{61, 0, 3},
	{14, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
	{64, 64, 64, 64, 64},
}

// FuzzCompleteChain checks CompleteChain on a frame cut into pieces
// against the reference on the frame in one piece (see refChain.wantFor).
func FuzzCompleteChain(f *testing.F) {
	for _, c := range goodCases() {
		p := build(c.spec)
		if c.edit != nil {
			c.edit(p)
		}
		if len(p.frame) > maxSeedLen {
			continue
		}
		for _, cuts := range chainSeedCuts {
			f.Add(p.partialFrame(), cuts)
		}
		f.Add(p.frame, chainSeedCuts[2])
	}
	for _, c := range badCases() {
		f.Add(c.edit(build(c.spec)), chainSeedCuts[2])
	}
	f.Fuzz(func(t *testing.T, frame, cuts []byte) {
		if len(cuts) > 64 {
			cuts = cuts[:64]
		}
		newRefChain(frame).check(t, cutLens(cuts)...)
	})
}

// TestWriteSeedCorpus regenerates the committed seed corpora of
// FuzzComplete and FuzzCompleteChain from the test shapes when
// CSUM_WRITE_CORPUS=1:
//
//	CSUM_WRITE_CORPUS=1 go test -run TestWriteSeedCorpus ./csum/
//
// Crashers found by fuzzing are kept there too, under their own names.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("CSUM_WRITE_CORPUS") != "1" {
		t.Skip("set CSUM_WRITE_CORPUS=1 to rewrite testdata/fuzz/FuzzComplete")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzComplete")
	chainDir := filepath.Join("testdata", "fuzz", "FuzzCompleteChain")
	for _, d := range []string{dir, chainDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name string, frame []byte) {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", frame)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeChain := func(name string, frame []byte, cutSets ...int) {
		for _, k := range cutSets {
			cuts := chainSeedCuts[k]
			data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n[]byte(%q)\n", frame, cuts)
			if err := os.WriteFile(filepath.Join(chainDir, fmt.Sprintf("%s-cut%d", name, k)), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range goodCases() {
		p := buildCase(t, c)
		if len(p.frame) > maxSeedLen {
			continue // big frames make minimization slow; the table tests cover them
		}
		write("good-"+c.name+"-partial", p.partialFrame())
		write("good-"+c.name+"-correct", p.frame)
		writeChain("good-"+c.name+"-partial", p.partialFrame(), 0, 1, 2, 3, 4)
		writeChain("good-"+c.name+"-correct", p.frame, 2)
		if p.field >= 0 {
			q := p.clone()
			q.setField(p.full ^ 0x0101)
			write("good-"+c.name+"-corrupted", q.frame)
			if p.udp && p.ip4 {
				q.setField(0)
				write("good-"+c.name+"-zero", q.frame)
			}
		}
	}
	for _, c := range badCases() {
		write("bad-"+c.name, c.edit(build(c.spec)))
		writeChain("bad-"+c.name, c.edit(build(c.spec)), 2)
	}
}
