package fwd_test

import (
	"testing"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

// TestParseInlineMax: the command line's and the config file's spellings
// of an inline limit are Config.InlineMax's values: off is InlineOff, 0 is
// the default.
func TestParseInlineMax(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"off", fwd.InlineOff, false},
		{"0", 0, false},
		{"1", 1, false},
		{"128", 128, false},
		{"256", 256, false},
		{"257", 0, true},
		{"-1", 0, true}, // off is spelled off
		{"", 0, true},
		{"on", 0, true},
		{"12x", 0, true},
	} {
		got, err := fwd.ParseInlineMax(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseInlineMax(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestInlineMaxSettings: Config.InlineMax and SetInlineMax read each value
// the same way — 0 is the default, 256; InlineOff is off; 1..256 are
// bytes — and the limit in force (InlineBytes) and the inline zone follow.
//
// On the fake environment (fwdtest): no root.
func TestInlineMaxSettings(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("a", fwdtest.LinkOptions{})
	env.AddLink("b", fwdtest.LinkOptions{})
	for _, tc := range []struct {
		name    string
		setting int
		want    int // bytes in force; -1: New refuses the setting
	}{
		{"zero-is-default", 0, 256},
		{"128", 128, 128},
		{"256", 256, 256},
		{"off", fwd.InlineOff, 0},
		{"too-large", 257, -1},
		{"negative", -2, -1},
	} {
		t.Run("Config/"+tc.name, func(t *testing.T) {
			f, err := fwd.New(fwd.Config{Links: []string{"a", "b"}, Env: env, InlineMax: tc.setting})
			if tc.want < 0 {
				if err == nil {
					f.Close()
					t.Fatalf("InlineMax %d accepted", tc.setting)
				}
				if !fwd.IsInputError(err) {
					t.Errorf("InlineMax %d: %v is not an input error", tc.setting, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			zone := f.Region().Inline.Len() > 0
			if f.InlineBytes() != tc.want || zone != (tc.setting != fwd.InlineOff) {
				t.Errorf("InlineMax %d: %d bytes in force, inline zone %v; want %d, zone %v", tc.setting, f.InlineBytes(), zone, tc.want, tc.setting != fwd.InlineOff)
			}
		})
	}

	t.Run("SetInlineMax", func(t *testing.T) {
		f, err := fwd.New(fwd.Config{Links: []string{"a", "b"}, Env: env, InlineMax: 128})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, tc := range []struct {
			setting, want int // want -1: refused, the limit unchanged
		}{
			{fwd.InlineOff, 0},
			{0, 256},
			{100, 100},
			{257, -1},
			{-2, -1},
			{256, 256},
		} {
			before := f.InlineBytes()
			err := f.SetInlineMax(tc.setting)
			switch {
			case tc.want < 0 && (err == nil || !fwd.IsInputError(err) || f.InlineBytes() != before):
				t.Errorf("SetInlineMax(%d): %v, %d bytes in force; want an input error and %d unchanged", tc.setting, err, f.InlineBytes(), before)
			case tc.want >= 0 && (err != nil || f.InlineBytes() != tc.want):
				t.Errorf("SetInlineMax(%d): %v, %d bytes in force; want %d", tc.setting, err, f.InlineBytes(), tc.want)
			}
		}
	})

	// Started off, there is no inline zone to turn on: the default is
	// refused like any other limit, and off is still accepted.
	t.Run("SetInlineMax-started-off", func(t *testing.T) {
		f, err := fwd.New(fwd.Config{Links: []string{"a", "b"}, Env: env, InlineMax: fwd.InlineOff})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, n := range []int{0, 64} {
			if err := f.SetInlineMax(n); err == nil || f.InlineBytes() != 0 {
				t.Errorf("SetInlineMax(%d) with no inline zone: %v, %d bytes in force", n, err, f.InlineBytes())
			}
		}
		if err := f.SetInlineMax(fwd.InlineOff); err != nil || f.InlineBytes() != 0 {
			t.Errorf("SetInlineMax(InlineOff): %v, %d bytes in force", err, f.InlineBytes())
		}
	})
}

// TestInlineMaxRoundTrips: InlineMax spells the limit in force as
// SetInlineMax takes it, so that setting what it returns changes nothing:
// an inline path turned off stays off (InlineMax returned 0 for off, and
// 0 set is the default, 256), and a limit stays the limit.
func TestInlineMaxRoundTrips(t *testing.T) {
	env := fwdtest.New()
	env.AddLink("a", fwdtest.LinkOptions{})
	env.AddLink("b", fwdtest.LinkOptions{})
	f, err := fwd.New(fwd.Config{Links: []string{"a", "b"}, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		setting, max, bytes int // max: InlineMax after; bytes: InlineBytes
	}{
		{fwd.InlineOff, fwd.InlineOff, 0},
		{0, 256, 256},
		{100, 100, 100},
		{1, 1, 1},
		{256, 256, 256},
	} {
		if err := f.SetInlineMax(tc.setting); err != nil {
			t.Fatalf("SetInlineMax(%d): %v", tc.setting, err)
		}
		if got := f.InlineMax(); got != tc.max {
			t.Errorf("SetInlineMax(%d): InlineMax %d, want %d", tc.setting, got, tc.max)
		}
		if err := f.SetInlineMax(f.InlineMax()); err != nil {
			t.Fatalf("SetInlineMax(InlineMax()) after %d: %v", tc.setting, err)
		}
		if got, gotBytes := f.InlineMax(), f.InlineBytes(); got != tc.max || gotBytes != tc.bytes {
			t.Errorf("SetInlineMax(InlineMax()) after SetInlineMax(%d): InlineMax %d, %d bytes; want %d, %d",
				tc.setting, got, gotBytes, tc.max, tc.bytes)
		}
	}
}
