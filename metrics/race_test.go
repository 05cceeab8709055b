//go:build race

package metrics

// raceEnabled: the race detector slows every atomic load down a hundredfold.
const raceEnabled = true
