package main

// Tests that README.md says what the code has: run's flags in the flag
// table, and the packages in the Layout table.

import (
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// readme is the repository's README.md, and the repository's root.
func readme(t *testing.T) (text, root string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b), root
}

// readmeSection is README's text from the heading head to the next
// heading of its level or above.
func readmeSection(t *testing.T, text, head string) string {
	t.Helper()
	i := strings.Index(text, "\n"+head+"\n")
	if i < 0 {
		t.Fatalf("README.md has no heading %q", head)
	}
	level := strings.Index(head, " ") // "##" or "###"
	rest := text[i+len(head)+2:]
	if j := regexp.MustCompile(`(?m)^#{1,` + string(rune('0'+level)) + `} `).FindStringIndex(rest); j != nil {
		rest = rest[:j[0]]
	}
	return rest
}

// firstCells is the first cell of each row of the tables in s.
func firstCells(s string) []string {
	var cells []string
	for _, line := range strings.Split(s, "\n") {
		if f := strings.Split(line, "|"); len(f) > 2 && strings.HasPrefix(line, "|") && !strings.HasPrefix(strings.TrimSpace(f[1]), "---") {
			cells = append(cells, strings.TrimSpace(f[1]))
		}
	}
	return cells
}

// TestReadmeRunFlags: every flag of `xdpfwd run` is in README's flag
// table (a row's first cell), and every flag the table names is run's.
func TestReadmeRunFlags(t *testing.T) {
	text, _ := readme(t)
	named := map[string]bool{}
	for _, c := range firstCells(readmeSection(t, text, "### Flags of `xdpfwd run`")) {
		for _, m := range regexp.MustCompile(`--([a-z][a-z0-9-]*)`).FindAllStringSubmatch(c, -1) {
			named[m[1]] = true
		}
	}
	fset := flag.NewFlagSet("run", flag.ContinueOnError)
	var ff fwdFlags
	ff.register(fset, true)
	var gf genFlags
	gf.register(fset)
	for _, name := range []string{"stats-interval", "summary", "metrics", "wait-for-links", "config", "control"} {
		fset.String(name, "", "") // run's own, registered in cmdRun
	}
	fset.VisitAll(func(f *flag.Flag) {
		if !named[f.Name] {
			t.Errorf("--%s: a flag of run, not in README's flag table", f.Name)
		}
		delete(named, f.Name)
	})
	for name := range named {
		t.Errorf("--%s: in README's flag table, not a flag of run", name)
	}
}

// TestReadmeLayout: README's Layout table lists every package of the
// module (perf's profiling programs under perf), and nothing else.
func TestReadmeLayout(t *testing.T) {
	text, root := readme(t)
	var listed []string
	for _, c := range firstCells(readmeSection(t, text, "## Layout")) {
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
			t.Errorf("package %s: not in README's Layout table", p)
		}
	}
	for _, p := range listed {
		if !slices.Contains(pkgs, p) {
			t.Errorf("README's Layout table lists %s: no such package", p)
		}
	}
}
