package xps

import (
	"fmt"
	"strings"

	"github.com/xdpfwd/xdpfwd/internal/enum"
)

// Mode selects how Table.Pick chooses a TX queue.
type Mode uint8

const (
	// ModeSticky (the zero value, the default): a flow keeps the queue it
	// was given, and moves only with nothing in flight.
	ModeSticky Mode = iota
	// ModeHash: Key.Hash() % nqueues, stateless.
	ModeHash
	// ModeCPU: rxq % nqueues, the queue of the receiving worker — the
	// kernel's XPS-after-scrub behaviour, a baseline that reorders flows
	// arriving on several RX queues.
	ModeCPU
)

var modeNames = enum.New[Mode]("Mode", "sticky", "hash", "cpu")

// ParseMode parses "sticky", "hash" or "cpu" (case-insensitive; "" is
// ModeSticky).
func ParseMode(s string) (Mode, error) {
	v := strings.ToLower(strings.TrimSpace(s))
	if v == "" {
		return ModeSticky, nil
	}
	if m, ok := modeNames.Parse(v); ok {
		return m, nil
	}
	return ModeSticky, fmt.Errorf("xps: unknown TX queue mode %q (want %s)", s, modeNames.Want())
}

func (m Mode) String() string { return modeNames.String(m) }
