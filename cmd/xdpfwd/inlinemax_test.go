package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/inline"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// inlineCases are the spellings of --inline-max and of inline-max in the
// config file, and the bytes each stands for; -1: refused.
var inlineCases = []struct {
	value string
	want  int
}{
	{"off", 0},
	{"0", 256}, // the default, as a zero fwd.Config.InlineMax
	{"1", 1},
	{"128", 128},
	{"256", 256},
	{"257", -1},
	{"-1", -1}, // off is spelled off
	{"none", -1},
}

// runFlags are the flags of `xdpfwd run` that carry forwarder settings.
func runFlags() (*flag.FlagSet, *fwdFlags) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ff := &fwdFlags{}
	ff.register(fs, true)
	return fs, ff
}

// inlineBytes is the limit cfg's InlineMax stands for.
func inlineBytes(t *testing.T, setting int) int {
	t.Helper()
	n, err := inline.ResolveMax(setting)
	if err != nil {
		t.Fatalf("config holds inline limit %d: %v", setting, err)
	}
	return n
}

// TestInlineMaxFlagAndFile: --inline-max and inline-max in a config file
// give fwd.Config.InlineMax the same values for the same spellings (off is
// off, 0 the default), refuse the same ones, and without either the limit
// is 256.
func TestInlineMaxFlagAndFile(t *testing.T) {
	// Each spelling, given as a flag and as a config file key.
	sources := []struct {
		name  string
		apply func(t *testing.T, fs *flag.FlagSet, value string) error
	}{
		{"flag", func(t *testing.T, fs *flag.FlagSet, value string) error {
			return fs.Parse([]string{"--inline-max", value})
		}},
		{"file", func(t *testing.T, fs *flag.FlagSet, value string) error {
			path := filepath.Join(t.TempDir(), "xdpfwd.yaml")
			if err := os.WriteFile(path, []byte("inline-max: "+value+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := applyConfigFile(fs, path)
			return err
		}},
	}
	for _, tc := range inlineCases {
		for _, src := range sources {
			t.Run(src.name+"="+tc.value, func(t *testing.T) {
				fs, ff := runFlags()
				err := src.apply(t, fs, tc.value)
				if tc.want < 0 {
					if err == nil {
						t.Fatalf("%s inline-max %s accepted", src.name, tc.value)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				cfg, _, err := ff.config(io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				if got := inlineBytes(t, cfg.InlineMax); got != tc.want {
					t.Errorf("%s inline-max %s: %d bytes, want %d", src.name, tc.value, got, tc.want)
				}
			})
		}
	}
	_, ff := runFlags()
	cfg, _, err := ff.config(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := inlineBytes(t, cfg.InlineMax); got != 256 {
		t.Errorf("no --inline-max: %d bytes, want 256", got)
	}
}

// TestInlineMaxReload: a SIGHUP's reload of inline-max reads each spelling
// as the flag does and puts it in force on the running forwarder; a
// refused value leaves the limit as it was, and a key removed from the
// file goes back to the default.
func TestInlineMaxReload(t *testing.T) {
	p := newPair(t, topo.Options{})
	path := filepath.Join(t.TempDir(), "xdpfwd.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := fmt.Sprintf("link: [%s, %s]\n", p.LinkA, p.LinkB)
	write(links + "inline-max: 128\n")
	args := []string{"--config", path}
	st, err := parseRun(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fwd.New(st.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := &reloader{args: args, start: st, f: f, logger: slog.New(slog.DiscardHandler)}
	if f.InlineBytes() != 128 {
		t.Fatalf("started with %d bytes, want 128", f.InlineBytes())
	}
	for _, tc := range inlineCases {
		before := f.InlineBytes()
		write(links + "inline-max: " + tc.value + "\n")
		_, err := r.reload(time.Second)
		want := tc.want
		if want < 0 {
			want = before
			if err == nil {
				t.Errorf("reload of inline-max: %s accepted", tc.value)
			}
		} else if err != nil {
			t.Errorf("reload of inline-max: %s: %v", tc.value, err)
		}
		if f.InlineBytes() != want {
			t.Errorf("after reloading inline-max: %s: %d bytes in force, want %d", tc.value, f.InlineBytes(), want)
		}
	}
	write(links + "inline-max: off\n")
	if _, err := r.reload(time.Second); err != nil || f.InlineBytes() != 0 {
		t.Fatalf("reload of off: %v, %d bytes", err, f.InlineBytes())
	}
	write(links)
	if _, err := r.reload(time.Second); err != nil || f.InlineBytes() != 256 {
		t.Errorf("inline-max removed from the file: %v, %d bytes in force, want the default 256", err, f.InlineBytes())
	}
}
