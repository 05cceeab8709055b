package fwd_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/capture"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestFakeCaptureLinksChange: captures on a switch whose links come and
// go (AddLink, RemoveLink, a link the kernel deletes): the capture of
// every link names each added link's packets by that link, the one of a
// link that goes ends with a capture.LinkGoneError and records nothing of
// the link that takes its index.
func TestFakeCaptureLinksChange(t *testing.T) { forWorkers(t, testFakeCaptureLinksChange) }

func testFakeCaptureLinksChange(t *testing.T, workers int) {
	for _, tc := range []struct {
		name   string
		remove func(r *fakeRun, c *fwdtest.Link) error
	}{
		{"RemoveLink", func(r *fakeRun, c *fwdtest.Link) error { return r.f.RemoveLink("c") }},
		{"deleted", func(r *fakeRun, c *fwdtest.Link) error { c.Delete(); return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := startSwitchOn(t, 4, workers)
			hub := r.f.Capture()
			all, err := hub.Open(capture.Spec{Dirs: capture.RX})
			if err != nil {
				t.Fatal(err)
			}
			defer all.Close()
			c := r.env.AddLink("c", fwdtest.LinkOptions{Queues: workers})
			if err := r.f.AddLink("c"); err != nil {
				t.Fatalf("AddLink(c): %v", err)
			}
			onC, err := hub.Open(capture.Spec{Links: []int{2}, Dirs: capture.RX})
			if err != nil {
				t.Fatal(err)
			}
			defer onC.Close()
			fromC := seqFrame(bcast, macC, 7, 1, 100)
			injectOn(t, c, fromC)
			soon(t, "c's frame in both captures", func() bool { return all.Kept() >= 1 && onC.Kept() >= 1 })

			if err := tc.remove(r, c); err != nil {
				t.Fatal(err)
			}
			select {
			case <-onC.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the capture of c still runs 5 s after c went")
			}
			var gone *capture.LinkGoneError
			if !errors.As(onC.Err(), &gone) || gone.Link != "c" {
				t.Errorf("the capture of c ended with %v, want a LinkGoneError of c", onC.Err())
			}
			// d takes c's index.
			d := r.env.AddLink("d", fwdtest.LinkOptions{Queues: workers})
			if err := r.f.AddLink("d"); err != nil {
				t.Fatalf("AddLink(d): %v", err)
			}
			fromD := seqFrame(bcast, macC, 8, 2, 120)
			injectOn(t, d, fromD)
			soon(t, "d's frame in the capture of every link", func() bool { return all.Kept() >= 2 })

			for _, s := range []struct {
				name string
				s    *capture.Session
				want map[string][]byte // link: the frame it received
			}{
				{"every link", all, map[string][]byte{"c": fromC, "d": fromD}},
				{"c", onC, map[string][]byte{"c": fromC}},
			} {
				names := s.s.Links()
				got := map[string][]byte{}
				s.s.Read(100, func(b []byte) bool {
					rec, _ := capture.Parse(b)
					if rec.Link >= len(names) {
						t.Errorf("capture of %s: a record of link %d, of %d named", s.name, rec.Link, len(names))
						return true
					}
					if got[names[rec.Link]] != nil {
						t.Errorf("capture of %s: a second frame on %s", s.name, names[rec.Link])
					}
					got[names[rec.Link]] = bytes.Clone(rec.Data)
					return true
				})
				for l, f := range s.want {
					if !bytes.Equal(got[l], f) {
						t.Errorf("capture of %s: %s received % x, want % x", s.name, l, got[l], f)
					}
				}
				if len(got) != len(s.want) {
					t.Errorf("capture of %s: frames on %d links, want %d (%q)", s.name, len(got), len(s.want), names)
				}
			}
		})
	}
}
