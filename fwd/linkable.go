package fwd

import "strings"

// LinksChangeable says why AddLink and RemoveLink would refuse any link
// now, if they would: no Handler (xconnect), a zero-copy UMEM, a
// forwarder stopping (a forwarder with no link left takes links). Nil: links may be
// added (MaxLinks permitting) and removed. The daemon's link list tells
// it, and the CNI plugin's STATUS says not available for it.
func (f *Forwarder) LinksChangeable() error {
	err := f.changeable("add", "")
	if err == nil {
		return nil
	}
	return &prefixless{err}
}

// prefixless is changeable's error without its "link add : " (no link).
type prefixless struct{ err error }

func (e *prefixless) Error() string { return strings.TrimPrefix(e.err.Error(), "link add : ") }
func (e *prefixless) Unwrap() error { return e.err }
