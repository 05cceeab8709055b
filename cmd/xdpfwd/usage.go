// A command's --help: its flags in groups, wrapped.

package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// flagGroups are the headings of a command's --help, in the order of
// docs/reference.md's table of `xdpfwd run` flags: the settings table's
// groups. A flag in none of them (txonly's, the demo's own) is listed
// last, under its command's name.
var flagGroups = groupsOf(settings)

// printUsage writes fs's flags, each spelled with two dashes as the docs
// spell them, its help on the lines below: for the commands that take the
// forwarder's flags (run, demo) grouped by flagGroups, for the others in
// one list.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: xdpfwd %s [flags]\n", fs.Name())
	if fs.Lookup("queues") == nil {
		fmt.Fprintln(w)
		fs.VisitAll(func(f *flag.Flag) { printFlag(w, f) })
		return
	}
	listed := map[string]bool{}
	group := func(title string, names []string) {
		var fl []*flag.Flag
		for _, n := range names {
			if f := fs.Lookup(n); f != nil && !listed[n] {
				fl = append(fl, f)
				listed[n] = true
			}
		}
		if len(fl) == 0 {
			return
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, f := range fl {
			printFlag(w, f)
		}
	}
	for _, g := range flagGroups {
		group(g.title, g.flags)
	}
	var rest []string
	fs.VisitAll(func(f *flag.Flag) {
		if !listed[f.Name] {
			rest = append(rest, f.Name)
		}
	})
	slices.Sort(rest)
	group(fs.Name(), rest)
}

// printFlag writes one flag: "  --name TYPE" and its help, with the default
// unless it is a zero value.
func printFlag(w io.Writer, f *flag.Flag) {
	typ, help := flag.UnquoteUsage(f)
	if sf, ok := f.Value.(*settingFlag); ok && !sf.s.Bool {
		typ = sf.s.ValueName() // fwd's name for it: N, SIZE, D…
	}
	line := "  --" + f.Name
	if typ != "" {
		line += " " + typ
	}
	if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && !strings.Contains(help, "(default") {
		help += " (default " + d + ")"
	}
	fmt.Fprintln(w, line)
	for _, l := range wrap(help, 72) {
		fmt.Fprintln(w, "      "+l)
	}
}

// wrap breaks s into lines of at most width bytes, at spaces.
func wrap(s string, width int) []string {
	var out []string
	line := ""
	for _, word := range strings.Fields(s) {
		if line != "" && len(line)+1+len(word) > width {
			out = append(out, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	return append(out, line)
}
