// Package enum spells the values of a small enumeration, 0, 1, 2 …, from
// one table of names indexed by value, so that a value and its name are
// written once and Parse and String cannot disagree.
//
// It owns only the spelling: a package's Parse function still words its
// own error (which setting, what it wants) and takes any alias of its own.
package enum

import (
	"fmt"
	"strings"
)

// Names are the names of T's values, by value.
type Names[T ~int | ~uint8] struct {
	typ   string // T's Go name, for a value without a name
	names []string
}

// New names T's values 0, 1, 2 … in order; typ is T's Go name.
func New[T ~int | ~uint8](typ string, names ...string) Names[T] {
	return Names[T]{typ: typ, names: names}
}

// Parse returns the value named s.
func (n Names[T]) Parse(s string) (T, bool) {
	for i, name := range n.names {
		if s == name {
			return T(i), true
		}
	}
	return 0, false
}

// String names v; a value without a name is written typ(v).
func (n Names[T]) String(v T) string {
	if int(v) >= 0 && int(v) < len(n.names) {
		return n.names[v]
	}
	return fmt.Sprintf("%s(%d)", n.typ, int(v))
}

// Want lists the names as an error wants them: "auto, on or off".
func (n Names[T]) Want() string {
	if len(n.names) < 2 {
		return strings.Join(n.names, "")
	}
	return strings.Join(n.names[:len(n.names)-1], ", ") + " or " + n.names[len(n.names)-1]
}
