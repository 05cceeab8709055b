package control

import "time"

// SetRequestGrace sets s's RequestGrace, before its Serve.
func SetRequestGrace(s *Server, d time.Duration) { s.grace = d }
