package xps

import (
	"fmt"
	"strconv"
	"strings"
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

// ParseMode parses "sticky", "hash" or "cpu" (case-insensitive; "" is
// ModeSticky).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "sticky":
		return ModeSticky, nil
	case "hash":
		return ModeHash, nil
	case "cpu":
		return ModeCPU, nil
	}
	return ModeSticky, fmt.Errorf("xps: unknown TX queue mode %q (want sticky, hash or cpu)", s)
}

func (m Mode) String() string {
	switch m {
	case ModeSticky:
		return "sticky"
	case ModeHash:
		return "hash"
	case ModeCPU:
		return "cpu"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}
