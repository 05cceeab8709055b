package promisc

// FD is the membership's packet socket, for the test that it receives
// nothing.
func (m *Membership) FD() int { return m.fd }
