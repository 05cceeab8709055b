package main

// `xdpfwd run --help` and the flags a first run meets: --queues.

import (
	"bytes"
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestRunHelpGrouped: `run --help` lists every flag of run once, with two
// dashes, under the groups of docs/reference.md's table in its order, and
// --queues says what 0 picks.
func TestRunHelpGrouped(t *testing.T) {
	t.Parallel()
	r := runBin(t, 30*time.Second, nil, "run", "--help")
	if r.code != 0 {
		t.Fatalf("run --help: exit %d, want 0\nstderr:\n%s", r.code, r.stderr)
	}
	help := r.stderr
	t.Logf("run --help:\n%s", help)
	last := -1
	for _, g := range []string{"links and mode:", "queues and rings:", "TX paths:", "operations:"} {
		i := strings.Index(help, "\n"+g+"\n")
		if i < 0 {
			t.Errorf("no group heading %q", g)
			continue
		}
		if i < last {
			t.Errorf("group %q out of order", g)
		}
		last = i
	}
	if m := regexp.MustCompile(`(?m)^\s+-[a-z]`).FindAllString(help, -1); len(m) > 0 {
		t.Errorf("%d flags printed with a single dash: %q", len(m), m)
	}
	newRunFlags().fs.VisitAll(func(f *flag.Flag) {
		if n := len(regexp.MustCompile(`(?m)^  --`+regexp.QuoteMeta(f.Name)+`( |$)`).FindAllString(help, -1)); n != 1 {
			t.Errorf("--%s listed %d times, want once", f.Name, n)
		}
	})
	q := regexp.MustCompile(`(?m)^  --queues.*\n((?:      .*\n)*)`).FindStringSubmatch(help)
	if q == nil {
		t.Fatalf("no --queues entry")
	}
	for _, w := range []string{"0", "auto", "CPUs", "queue count"} {
		if !strings.Contains(q[0], w) {
			t.Errorf("--queues help does not mention %q:\n%s", w, q[0])
		}
	}
}

// TestQueuesFlag: --queues -1 is refused with exit 2 and a message naming
// what is accepted; --queues 0 is the automatic count, accepted.
func TestQueuesFlag(t *testing.T) {
	t.Parallel()
	p := newPair(t, topo.Options{})
	r := runBin(t, 30*time.Second, nil, "run", "--link", p.LinkA, "--link", p.LinkB, "--queues", "-1")
	t.Logf("--queues -1: exit %d\n%s", r.code, r.stderr)
	if r.code != 2 {
		t.Errorf("--queues -1: exit %d, want 2", r.code)
	}
	for _, w := range []string{"--queues -1", "0 (auto", "1.."} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("--queues -1: message does not say %q", w)
		}
	}
	checkNoPanic(t, "stderr", r.stderr)
	checkDetached(t, p.LinkA, p.LinkB)

	pr := startBin(t, "run", "--link", p.LinkA, "--link", p.LinkB, "--queues", "0", "--stats-interval", "0")
	waitAttached(t, pr, p, 10*time.Second)
	if !strings.Contains(pr.stderr.String(), "workers=1") {
		t.Errorf("--queues 0 on one-queue links: want workers=1 in\n%s", pr.stderr.String())
	}
	pingAcross(t, p, pr)
	pr.interrupt()
}

// TestHelpNamesValues: every command's --help names the value of each
// flag that takes one as the docs do (N, D, FILE, on|off), never by Go's
// type (string, int, duration, value); and where docs/reference.md's
// table of run gives a flag with its value, --help gives the same.
func TestHelpNamesValues(t *testing.T) {
	goTypes := []string{"string", "int", "int64", "uint", "uint64", "float64", "duration", "value"}
	line := regexp.MustCompile(`^  --?([a-z][a-z0-9-]*)(?: (\S+))?$`)
	values := map[string]string{} // run's, by flag
	for _, cmd := range []string{"run", "demo", "capture", "link", "stats", "fdb", "bench"} {
		var out, errb bytes.Buffer
		if code := run([]string{cmd, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("xdpfwd %s --help: exit %d\n%s%s", cmd, code, out.String(), errb.String())
		}
		n := 0
		for _, l := range strings.Split(out.String()+errb.String(), "\n") {
			m := line.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			n++
			if slices.Contains(goTypes, m[2]) {
				t.Errorf("xdpfwd %s --help: --%s %s: Go's type, not a name of its value", cmd, m[1], m[2])
			}
			if cmd == "run" {
				values[m[1]] = m[2]
			}
		}
		if n == 0 {
			t.Errorf("xdpfwd %s --help lists no flags", cmd)
		}
	}
	sec := docSection(t, "docs/reference.md", readDoc(t, "docs/reference.md"), "### `xdpfwd run`")
	docs := map[string][]string{} // a flag may be shown twice: --eth-peer MAC, --eth-peer LINK=MAC
	for _, m := range regexp.MustCompile("`--([a-z][a-z0-9-]*) ([^`]+)`").FindAllStringSubmatch(sec, -1) {
		docs[m[1]] = append(docs[m[1]], strings.ReplaceAll(m[2], `\|`, "|"))
	}
	for name, doc := range docs {
		if help, ok := values[name]; ok && !slices.Contains(doc, help) {
			t.Errorf("--%s: docs/reference.md names its value %q, --help %q", name, doc, help)
		}
	}
}
