package logfmt

import (
	"bytes"
	"log/slog"
	"maps"
	"testing"
)

// TestParseSlog: every line slog's TextHandler writes, values with spaces,
// quotes, '=', backslashes and newlines included, parses back to the
// attributes it was given.
func TestParseSlog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // its value changes; the rest is what matters
			}
			return a
		},
	}))
	log.Info("serving metrics", "addr", "127.0.0.1:40123", "url", "http://127.0.0.1:40123/metrics")
	log.Warn("forwarder ready", "links", []string{"veth0", "veth1"}, "workers", 2, "odd", `a "b"=c\d`+"\n", "empty", "")
	log.Info("plain", "k v", "x")
	want := []map[string]string{
		{"level": "INFO", "msg": "serving metrics", "addr": "127.0.0.1:40123", "url": "http://127.0.0.1:40123/metrics"},
		{"level": "WARN", "msg": "forwarder ready", "links": "[veth0 veth1]", "workers": "2", "odd": `a "b"=c\d` + "\n", "empty": ""},
		{"level": "INFO", "msg": "plain", "k v": "x"},
	}
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, l := range lines {
		got, err := Parse(string(l))
		if err != nil {
			t.Errorf("Parse(%q): %v", l, err)
			continue
		}
		if !maps.Equal(got, want[i]) {
			t.Errorf("Parse(%q) = %q, want %q", l, got, want[i])
		}
	}
}

// TestParseMalformed: what is not key=value pairs is an error, not a
// partial map.
func TestParseMalformed(t *testing.T) {
	for _, l := range []string{
		`panic: runtime error`,
		`msg="unterminated`,
		`msg="a"b`,
		`=v`,
		`key`,
	} {
		if f, err := Parse(l); err == nil {
			t.Errorf("Parse(%q) = %q, want an error", l, f)
		}
	}
}

// TestFind: the first line with the message, past lines that do not
// parse and lines with another message.
func TestFind(t *testing.T) {
	text := "goroutine 1 [running]:\n" +
		`time=2026-12-03T10:00:00Z level=INFO msg="forwarder ready" workers=1` + "\n" +
		`time=2026-12-03T10:00:00Z level=INFO msg="serving metrics" addr=127.0.0.1:1 url=http://127.0.0.1:1/metrics` + "\n" +
		`time=2026-12-03T10:00:01Z level=INFO msg="serving metrics" addr=127.0.0.1:2` + "\n"
	f, ok := Find(text, "serving metrics")
	if !ok || f["addr"] != "127.0.0.1:1" {
		t.Errorf(`Find(…, "serving metrics") = %q, %v; want addr 127.0.0.1:1`, f, ok)
	}
	if f, ok := Find(text, "stopped"); ok {
		t.Errorf(`Find(…, "stopped") = %q, want none`, f)
	}
}
