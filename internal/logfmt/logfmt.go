// Package logfmt reads the key=value lines log/slog's TextHandler writes,
// the xdpfwd daemon's default log format, so that what starts a daemon
// (perf, the tests) takes a field of a line it logged, such as the address
// `--metrics HOST:0` bound, by its key rather than by a pattern per field.
// It only reads lines; it never writes logs or decides what the daemon
// logs.
package logfmt

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse splits one line into its fields. A key or value slog quoted
// (one with a space, '=', '"' or an unprintable rune) is unquoted. A key
// given twice keeps its last value. It fails on a line that is not
// key=value pairs.
func Parse(line string) (map[string]string, error) {
	fields := map[string]string{}
	s := strings.TrimSpace(line)
	for s != "" {
		key, rest, err := token(s, true)
		if err != nil {
			return nil, fmt.Errorf("key at %q: %w", s, err)
		}
		if !strings.HasPrefix(rest, "=") {
			return nil, fmt.Errorf("key %q: no '='", key)
		}
		val, rest, err := token(rest[1:], false)
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		if rest != "" && rest[0] != ' ' {
			return nil, fmt.Errorf("value of %q: %q follows its closing quote", key, rest)
		}
		fields[key] = val
		s = strings.TrimLeft(rest, " ")
	}
	return fields, nil
}

// token reads a quoted string, or else up to the next space (and, for a
// key, the next '='), and returns it unquoted with what follows it.
func token(s string, key bool) (tok, rest string, err error) {
	if strings.HasPrefix(s, `"`) {
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++ // the escaped byte cannot close the string
			case '"':
				tok, err := strconv.Unquote(s[:i+1])
				return tok, s[i+1:], err
			}
		}
		return "", "", fmt.Errorf("no closing quote in %q", s)
	}
	end := " "
	if key {
		end = " ="
	}
	i := strings.IndexAny(s, end)
	if i < 0 {
		i = len(s)
	}
	if key && i == 0 {
		return "", "", fmt.Errorf("empty key")
	}
	return s[:i], s[i:], nil
}

// Find returns the fields of the first line of text whose msg is msg,
// skipping lines that do not parse (a panic's trace, a tool's own output).
func Find(text, msg string) (map[string]string, bool) {
	for line := range strings.Lines(text) {
		if !strings.Contains(line, "msg=") {
			continue
		}
		if f, err := Parse(line); err == nil && f["msg"] == msg {
			return f, true
		}
	}
	return nil, false
}
