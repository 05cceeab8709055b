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

// printUsage writes a command's usage line and its flags (printFlags).
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: xdpfwd %s [flags]\n", fs.Name())
	printFlags(w, fs)
}

// printFlags writes fs's flags, each spelled with two dashes as the docs
// spell them, its help on the lines below: for the commands that take the
// forwarder's flags (run, demo) grouped by flagGroups, for the others in
// one list.
func printFlags(w io.Writer, fs *flag.FlagSet) {
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

// printFlag writes one flag: "  --name VALUE" and its help, with the
// default unless it is a zero value. VALUE is the name its row of the
// settings table gives its value (N, D, FILE), else the `word` its help
// gives; none for a switch.
func printFlag(w io.Writer, f *flag.Flag) {
	value, help := flag.UnquoteUsage(f)
	if s := settingNamed(f.Name); s != nil && s.help == f.Usage && s.value != "" {
		value = s.value
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		value = "" // --multi-buffer alone is on
	}
	line := "  --" + f.Name
	if len(f.Name) == 1 {
		line = "  -" + f.Name // capture's -w, as tcpdump's
	}
	if value != "" {
		line += " " + value
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
