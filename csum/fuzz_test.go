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

// TestWriteSeedCorpus regenerates the committed seed corpus of
// FuzzComplete from the test shapes when CSUM_WRITE_CORPUS=1:
//
//	CSUM_WRITE_CORPUS=1 go test -run TestWriteSeedCorpus ./csum/
//
// Crashers found by fuzzing are kept there too, under their own names.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("CSUM_WRITE_CORPUS") != "1" {
		t.Skip("set CSUM_WRITE_CORPUS=1 to rewrite testdata/fuzz/FuzzComplete")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzComplete")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, frame []byte) {
		data := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", frame)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range goodCases() {
		p := buildCase(t, c)
		if len(p.frame) > maxSeedLen {
			continue // big frames make minimization slow; the table tests cover them
		}
		write("good-"+c.name+"-partial", p.partialFrame())
		write("good-"+c.name+"-correct", p.frame)
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
	}
}
