package main

// Tests that README.md and docs/ say what the code has: each command's
// flags in docs/reference.md's flag reference, the packages in
// docs/design.md's Layout table, README's Go example, test command and
// performance figures, and every relative link of the repository's
// Markdown.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/xdpfwd/xdpfwd/fwd"
	"github.com/xdpfwd/xdpfwd/modes"
)

// repoRoot is the repository's root.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// readDoc is the file at path rel under the repository's root.
func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docSection is text from the heading head to the next heading of its
// level or above; file names the document in the failure.
func docSection(t *testing.T, file, text, head string) string {
	t.Helper()
	i := strings.Index(text, "\n"+head+"\n")
	if i < 0 {
		t.Fatalf("%s has no heading %q", file, head)
	}
	level := strings.Index(head, " ") // "##" or "###"
	rest := text[i+len(head)+2:]
	if j := regexp.MustCompile(`(?m)^#{1,` + string(rune('0'+level)) + `} `).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	return rest
}

// tableRows is the cells of each row of the tables in s, the header and
// separator rows left out; a pipe escaped as \| stays in its cell.
func tableRows(s string) [][]string {
	var rows [][]string
	cell := regexp.MustCompile(`(?:\\\||[^|])*`)
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		var cells []string
		for _, c := range cell.FindAllString(strings.Trim(line, "|"), -1) {
			cells = append(cells, strings.TrimSpace(c))
		}
		if len(cells) > 0 && strings.HasPrefix(cells[0], "---") {
			if len(rows) > 0 {
				rows = rows[:len(rows)-1] // the header, above its separator
			}
			continue
		}
		if len(cells) > 0 {
			rows = append(rows, cells)
		}
	}
	return rows
}

// firstCells is the first cell of each row of the tables in s.
func firstCells(s string) []string {
	var cells []string
	for _, r := range tableRows(s) {
		cells = append(cells, r[0])
	}
	return cells
}

var flagName = regexp.MustCompile("`-{1,2}([a-z][a-z0-9-]*)")

// docFlags is, by flag name, the group of a flag table (the bold row above
// it; "" before any) that names it in a first cell.
func docFlags(section string) map[string]string {
	flags := map[string]string{}
	group := ""
	for _, c := range firstCells(section) {
		if m := regexp.MustCompile(`^\*\*(.+)\*\*$`).FindStringSubmatch(c); m != nil {
			group = m[1]
			continue
		}
		for _, m := range flagName.FindAllStringSubmatch(c, -1) {
			flags[m[1]] = group
		}
	}
	return flags
}

// helpFlags runs `xdpfwd cmd --help` and returns, by flag name, the group
// heading it is listed under ("" for a command whose --help has none).
func helpFlags(t *testing.T, cmd string) map[string]string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run([]string{cmd, "--help"}, &out, &errb); code != 0 {
		t.Fatalf("xdpfwd %s --help: exit %d\n%s%s", cmd, code, out.String(), errb.String())
	}
	flags := map[string]string{}
	group := ""
	for _, line := range strings.Split(out.String()+errb.String(), "\n") {
		if m := regexp.MustCompile(`^(\S[^:]*):$`).FindStringSubmatch(line); m != nil {
			group = m[1]
		}
		if m := regexp.MustCompile(`^  --?([a-z][a-z0-9-]*)( |$)`).FindStringSubmatch(line); m != nil {
			flags[m[1]] = group
		}
	}
	if len(flags) == 0 {
		t.Fatalf("xdpfwd %s --help lists no flags:\n%s%s", cmd, out.String(), errb.String())
	}
	return flags
}

// compareFlags reports the flags of help missing from doc and the reverse.
func compareFlags(t *testing.T, what string, help, doc map[string]string) {
	t.Helper()
	for name := range help {
		if _, ok := doc[name]; !ok {
			t.Errorf("--%s: a flag of %s, not in docs/reference.md's table", name, what)
		}
	}
	for name := range doc {
		if _, ok := help[name]; !ok {
			t.Errorf("--%s: in docs/reference.md's table of %s, not a flag of it", name, what)
		}
	}
}

// TestDocsRunFlags: every flag `xdpfwd run --help` lists is in the flag
// reference's table of run, under the group heading --help puts it
// under, and every flag the table names is run's.
func TestDocsRunFlags(t *testing.T) {
	help := helpFlags(t, "run")
	doc := docFlags(docSection(t, "docs/reference.md", readDoc(t, "docs/reference.md"), "### `xdpfwd run`"))
	compareFlags(t, "xdpfwd run", help, doc)
	for name, g := range help {
		if d, ok := doc[name]; ok && d != g {
			t.Errorf("--%s: under %q in --help, under %q in docs/reference.md", name, g, d)
		}
	}
}

// TestDocsCommandFlags: the flag reference's table of each other command
// names exactly the flags its --help lists; the demo's table names its
// own, and its "Not taken" list the flags of run it does not take.
func TestDocsCommandFlags(t *testing.T) {
	text := readDoc(t, "docs/reference.md")
	for _, c := range []struct {
		head string
		cmds []string
	}{
		{"### `xdpfwd link`", []string{"link"}},
		{"### `xdpfwd capture`", []string{"capture"}},
		{"### `xdpfwd stats` and `xdpfwd fdb`", []string{"stats", "fdb"}},
		{"### `xdpfwd bench`", []string{"bench"}},
	} {
		help := map[string]string{}
		for _, cmd := range c.cmds {
			for name := range helpFlags(t, cmd) {
				help[name] = ""
			}
		}
		compareFlags(t, strings.Join(c.cmds, " and "), help, docFlags(docSection(t, "docs/reference.md", text, c.head)))
	}

	runDoc := docFlags(docSection(t, "docs/reference.md", text, "### `xdpfwd run`"))
	demo := docSection(t, "docs/reference.md", text, "### `xdpfwd demo`")
	m := regexp.MustCompile(`(?s)Not taken: (.*?)\.`).FindStringSubmatch(demo)
	if m == nil {
		t.Fatal("docs/reference.md's demo section has no \"Not taken: ...\" list")
	}
	notTaken := map[string]bool{}
	for _, f := range flagName.FindAllStringSubmatch(m[1], -1) {
		notTaken[f[1]] = true
		if _, ok := runDoc[f[1]]; !ok {
			t.Errorf("--%s: in the demo's Not taken list, not a flag of run", f[1])
		}
	}
	doc := docFlags(demo)
	for name := range runDoc {
		if _, own := doc[name]; !notTaken[name] && !own {
			doc[name] = ""
		}
	}
	help := helpFlags(t, "demo")
	for name := range notTaken {
		if _, ok := help[name]; ok {
			t.Errorf("--%s: in the demo's Not taken list, yet a flag of demo", name)
		}
	}
	compareFlags(t, "xdpfwd demo", help, doc)
}

// TestDocsLayout: docs/design.md's Layout table lists every package of
// the module (perf's profiling programs under perf), and nothing else.
func TestDocsLayout(t *testing.T) {
	root := repoRoot(t)
	var listed []string
	for _, c := range firstCells(docSection(t, "docs/design.md", readDoc(t, "docs/design.md"), "## Layout")) {
		if m := regexp.MustCompile("^`([a-z0-9/_-]+)`").FindStringSubmatch(c); m != nil {
			listed = append(listed, m[1])
		}
	}
	var pkgs []string
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || strings.HasPrefix(rel, "perf/")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			if dir := filepath.Dir(rel); dir != "." && !slices.Contains(pkgs, dir) {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	for _, p := range pkgs {
		if !slices.Contains(listed, p) {
			t.Errorf("package %s: not in docs/design.md's Layout table", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(pkgs, p) {
			t.Errorf("docs/design.md's Layout table lists %s: no such package", p)
		}
	}
}

// markdown is a Markdown file's lines outside fenced code blocks.
func markdown(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors is the set of fragment names GitHub gives the headings of a
// Markdown file: lower case, spaces as hyphens, punctuation dropped, a
// repeated heading suffixed -1, -2, ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range markdown(text) {
		m := regexp.MustCompile(`^#{1,6} (.+)$`).FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}

// TestDocsLinks: every relative link in the repository's Markdown files
// (README.md, docs/, deploy/, metrics/, perf/) names a file that exists,
// and a #fragment names a heading of that file.
func TestDocsLinks(t *testing.T) {
	root := repoRoot(t)
	var files []string
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if !slices.Contains(files, filepath.Join(root, "README.md")) || !slices.Contains(files, filepath.Join(root, "docs", "operating.md")) {
		t.Fatalf("README.md or docs/operating.md not among the Markdown files found: %v", files)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	links := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, file)
		for _, line := range markdown(string(b)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
					continue // http:, https:, mailto:
				}
				links++
				path, frag, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
				}
				db, err := os.ReadFile(dest)
				if err != nil {
					if fi, serr := os.Stat(dest); serr == nil && fi.IsDir() && frag == "" {
						continue // a directory
					}
					t.Errorf("%s: link %s: %v", rel, target, err)
					continue
				}
				if frag != "" && !anchors(string(db))[frag] {
					t.Errorf("%s: link %s: no heading gives #%s in %s", rel, target, frag, filepath.Base(dest))
				}
			}
		}
	}
	t.Logf("%d relative links in %d Markdown files", links, len(files))
}

// TestReadmeHandlerExample: README's Go example is the body of fwd's
// ExampleHandlerFunc, which go vet and go test compile.
func TestReadmeHandlerExample(t *testing.T) {
	src := readDoc(t, "fwd/example_test.go")
	m := regexp.MustCompile(`(?s)\nfunc ExampleHandlerFunc\(\) \{\n(.*?)\n\}\n`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("fwd/example_test.go has no ExampleHandlerFunc")
	}
	var body []string
	for _, l := range strings.Split(m[1], "\n") {
		body = append(body, strings.TrimPrefix(l, "\t"))
	}
	sec := docSection(t, "README.md", readDoc(t, "README.md"), "## A network function in Go")
	g := regexp.MustCompile("(?s)```go\n(.*?)\n```").FindStringSubmatch(sec)
	if g == nil {
		t.Fatal("README's \"A network function in Go\" has no ```go block")
	}
	if want := strings.Join(body, "\n"); g[1] != want {
		t.Errorf("README's Go example is not ExampleHandlerFunc's body:\nREADME:\n%s\n\nfwd/example_test.go:\n%s", g[1], want)
	}
}

// TestReadmeTestCommand: the test command README gives is the one CI's
// .ci/run runs and docs/testing.md gives, word for word, and it installs
// what the tests need before it runs them, so that it works on a fresh
// machine as it does in CI.
func TestReadmeTestCommand(t *testing.T) {
	re := regexp.MustCompile(`(?m)^(bash \.ci/install && XDPFWD_REQUIRE_INTEGRATION=1 [^#\n]*go test [^#\n]*?)\s*(#.*)?$`)
	m := re.FindStringSubmatch(readDoc(t, "README.md"))
	if m == nil {
		t.Fatal("README.md gives no test command that installs, then tests (bash .ci/install && XDPFWD_REQUIRE_INTEGRATION=1 ... go test ...)")
	}
	cmd := m[1]
	for _, file := range []string{".ci/run", "docs/testing.md"} {
		found := false
		for _, line := range strings.Split(readDoc(t, file), "\n") {
			found = found || strings.TrimSpace(line) == cmd
		}
		if !found {
			t.Errorf("%s does not run README's test command, %q", file, cmd)
		}
	}
}

// TestReadmePerformance: README's Performance section carries no figures
// of its own (they would go stale), and links perf/README.md's results,
// which a perf run generates.
func TestReadmePerformance(t *testing.T) {
	perf := readDoc(t, "perf/README.md")
	i, j := strings.Index(perf, "<!-- BEGIN RESULTS"), strings.Index(perf, "<!-- END RESULTS")
	if i < 0 || j < i || !strings.Contains(perf[:i], "\n## Results\n") {
		t.Fatal("perf/README.md has no ## Results section with generated results")
	}
	sec := docSection(t, "README.md", readDoc(t, "README.md"), "## Performance")
	if !strings.Contains(sec, "(perf/README.md#results)") {
		t.Error("README's Performance does not link perf/README.md#results")
	}
	if rows := tableRows(sec); len(rows) > 0 {
		t.Errorf("README's Performance has a table of %d rows: its figures belong in perf/README.md", len(rows))
	}
}

// jsonKeys collects the object keys of v, a decoded JSON document, each
// as its path's last element; the keys of the objects under skip (maps
// keyed by link name) are not collected, only what is under them.
func jsonKeys(v any, skip bool, keys map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if !skip {
				keys[k] = true
			}
			jsonKeys(e, k == "links" && !skip, keys)
		}
	case []any:
		for _, e := range v {
			jsonKeys(e, false, keys)
		}
	}
}

// TestDocsSummaryFields: every key of the --summary JSON (a summary with
// a link in a UMEM domain, a domain, a worker, links removed and a sink's
// report) and every drop reason is named in docs/reference.md's section on
// the summary.
func TestDocsSummaryFields(t *testing.T) {
	sum := fwd.Summary{
		Links:        map[string]fwd.LinkStats{"eth1": {Domain: "zerocopy"}},
		RemovedOlder: &fwd.RemovedSummary{},
		Domains:      []fwd.DomainSummary{{}},
		Workers:      []fwd.WorkerStats{{}},
	}
	b, err := json.Marshal(daemonSummary{Summary: sum, Sink: &modes.SinkReport{}})
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	top := doc.(map[string]any)
	keys := map[string]bool{}
	for k, v := range top {
		keys[k] = true
		if k != "sink" { // the sink's report: docs/modes.md and metrics/README.md
			jsonKeys(v, k == "links", keys)
		}
	}
	for _, r := range fwd.DropReasons() {
		keys[r] = true
	}
	sec := docSection(t, "docs/reference.md", readDoc(t, "docs/reference.md"), "## The summary JSON")
	for k := range keys {
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(k) + `\b`).MatchString(sec) {
			t.Errorf("summary key %q: not in docs/reference.md's summary section", k)
		}
	}
	t.Logf("%d keys and drop reasons", len(keys))
}
