package fwd

// LinksChangeable says why AddLink and RemoveLink would refuse any link
// now, if they would: no Handler (xconnect), a single zero-copy UMEM, a
// forwarder stopping (a forwarder with no link left takes links). Nil:
// links may be added (MaxLinks permitting) and removed, but those bound in
// zero-copy mode (RemoveLink says so). The daemon's link
// list tells it, and the CNI plugin's STATUS says not available for it.
func (f *Forwarder) LinksChangeable() error { return f.linksFixed() }
