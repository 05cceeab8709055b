package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/internal/topo"
	"github.com/xdpfwd/xdpfwd/xps"
)

// comparable is cfg without what each parse builds anew (the logger, the
// switch): the settings alone.
func comparable(cfg fwd.Config) fwd.Config {
	cfg.Logger, cfg.Handler = nil, nil
	return cfg
}

// TestOneParser: a setting given as a flag, in the --config file at start
// and in the file a SIGHUP re-reads gives the same fwd.Config, and a zero
// means what fwd.Config's zero means (no setting at all is the zero
// Config): --spin 0 adapts, --frag-order 0 is the default order, --queues
// 0 and --inline-max 0 the automatic count and the default limit.
func TestOneParser(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		key, value string
		want       func(*fwd.Config)
	}{
		{"", "", func(*fwd.Config) {}},
		{"queues", "0", func(*fwd.Config) {}},
		{"queues", "3", func(c *fwd.Config) { c.Queues = 3 }},
		{"spin", "0", func(*fwd.Config) {}},
		{"spin", "auto", func(*fwd.Config) {}},
		{"spin", "off", func(c *fwd.Config) { c.Spin = -1 }},
		{"spin", "8", func(c *fwd.Config) { c.Spin = 8 }},
		{"spin", "busy", func(c *fwd.Config) { c.Spin = fwd.SpinBusy }},
		{"frag-order", "0", func(*fwd.Config) {}},
		{"frag-order", "3", func(c *fwd.Config) { c.FragOrder = 3 }},
		{"frag-order", "off", func(c *fwd.Config) { c.FragOrder = fwd.FragOff }},
		{"inline-max", "0", func(*fwd.Config) {}},
		{"inline-max", "off", func(c *fwd.Config) { c.InlineMax = fwd.InlineOff }},
		{"inline-max", "128", func(c *fwd.Config) { c.InlineMax = 128 }},
		{"ring-size", "0", func(*fwd.Config) {}},
		{"ring-size", "256", func(c *fwd.Config) { c.RingSize = 256 }},
		{"max-umem", "0", func(*fwd.Config) {}},
		{"max-umem", "256MiB", func(c *fwd.Config) { c.MaxUMEM = 256 << 20 }},
		{"max-umem", "2G", func(c *fwd.Config) { c.MaxUMEM = 2 << 30 }},
		{"max-umem", "1048576", func(c *fwd.Config) { c.MaxUMEM = 1 << 20 }},
		{"frame-size", "4096", func(c *fwd.Config) { c.FrameSize = 4096 }},
		{"multi-buffer", "on", func(c *fwd.Config) { c.MultiBufferMode = fwd.MultiBufferOn }},
		{"complete-checksums", "off", func(c *fwd.Config) { c.Checksums = fwd.ChecksumsOff }},
		{"promisc", "off", func(c *fwd.Config) { c.Promisc = fwd.PromiscOff }},
		{"xps", "hash", func(c *fwd.Config) { c.XPS = xps.ModeHash }},
		{"cpus", "0-1", func(c *fwd.Config) { c.CPUs = []int{0, 1} }},
		{"coalesce", "10us", func(c *fwd.Config) { c.Coalesce = 10 * time.Microsecond }},
		{"max-tx-frags", "0", func(*fwd.Config) {}},
		{"flow-table-size", "0", func(*fwd.Config) {}},
		{"max-links", "0", func(*fwd.Config) {}},
		{"max-links", "auto", func(*fwd.Config) {}}, // xconnect: the --link links
	} {
		name := tc.key + "=" + tc.value
		t.Run(name, func(t *testing.T) {
			want := fwd.Config{Links: []string{"a", "b"}}
			tc.want(&want)
			path := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+".yaml")
			write := func(body string) {
				if err := os.WriteFile(path, []byte("link: [a, b]\n"+body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			setting := ""
			flagArgs := []string{"--link", "a", "--link", "b"}
			if tc.key != "" {
				setting = tc.key + ": " + tc.value + "\n"
				flagArgs = append(flagArgs, "--"+tc.key, tc.value)
			}
			fileArgs := []string{"--config", path}
			sources := map[string]func() (*runSettings, error){
				"flag": func() (*runSettings, error) { return parseRun(flagArgs, io.Discard) },
				"file": func() (*runSettings, error) { write(setting); return parseRun(fileArgs, io.Discard) },
				// A SIGHUP parses the same command line with the file as
				// it is now.
				"reload": func() (*runSettings, error) {
					write("")
					if _, err := parseRun(fileArgs, io.Discard); err != nil {
						return nil, err
					}
					write(setting)
					return parseRun(fileArgs, io.Discard)
				},
			}
			for _, src := range []string{"flag", "file", "reload"} {
				s, err := sources[src]()
				if err != nil {
					t.Fatalf("%s: %v", src, err)
				}
				if got := comparable(s.cfg); !reflect.DeepEqual(got, want) {
					t.Errorf("%s %s: Config\n%+v, want\n%+v", src, name, got, want)
				}
			}
		})
	}
}

// TestOneParserRefuses: a value the flag refuses is refused in the file
// too, with the same message.
func TestOneParserRefuses(t *testing.T) {
	dir := t.TempDir()
	for _, kv := range [][2]string{{"spin", "-3"}, {"frag-order", "many"}, {"inline-max", "300"}, {"queues", "some"}, {"coalesce", "2ms"}, {"max-umem", "lots"}, {"max-umem", "-1"}, {"max-umem", "3TB"}, {"added-ring-size", "100"}, {"max-links", "-1"}} {
		var flagErr, fileErr bytes.Buffer
		run([]string{"run", "--link", "a", "--link", "b", "--" + kv[0], kv[1]}, io.Discard, &flagErr)
		path := filepath.Join(dir, kv[0]+".yaml")
		os.WriteFile(path, []byte("link: [a, b]\n"+kv[0]+": "+kv[1]+"\n"), 0o644)
		code := run([]string{"run", "--config", path}, io.Discard, &fileErr)
		if code != exitUsage || flagErr.Len() == 0 || !strings.Contains(fileErr.String(), kv[0]) {
			t.Errorf("%s %s: file exit %d, %q; flag %q", kv[0], kv[1], code, fileErr.String(), flagErr.String())
		}
	}
}

// TestReloadDiff: a SIGHUP applies what the forwarder changes live and
// refuses, by name, what needs a restart; a setting changed to a value
// that resolves to what runs (frag-order: 3 in xconnect mode without
// multi-buffer, which has no frag zone either way) is no change at all.
func TestReloadDiff(t *testing.T) {
	p := newPair(t, topo.Options{})
	path := filepath.Join(t.TempDir(), "xdpfwd.yaml")
	links := fmt.Sprintf("link: [%s, %s]\n", p.LinkA, p.LinkB)
	if err := os.WriteFile(path, []byte(links+"stats-interval: 1s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", path, "--log-level", "warn"}
	st, err := parseRun(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	f, err := fwd.New(st.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var log syncBuffer
	r := &reloader{args: args, start: st, f: f, logger: slog.New(slog.NewTextHandler(&log, nil))}
	body := links + "inline-max: 100\nxps: hash\nstats-interval: 5s\nspin: 8\nfrag-order: 3\nlog-format: json\nlog-level: debug\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	iv, err := r.reload(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(log.String())
	for _, want := range []string{`applied="xps=hash inline-max=100 stats-interval=5s"`, `needs_restart="log-format spin"`,
		`overridden_by_flags=log-level`, "Spin auto → 8"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("reload log lacks %q", want)
		}
	}
	if f.InlineBytes() != 100 || iv != 5*time.Second {
		t.Errorf("after reload: inline limit %d, stats interval %v; want 100, 5s", f.InlineBytes(), iv)
	}
	if pl := f.Plan(); pl.Spin != 0 || pl.FragOrder != fwd.FragOff {
		t.Errorf("after reload the plan has spin %d, frag order %d; want 0, FragOff (unchanged)", pl.Spin, pl.FragOrder)
	}
}
