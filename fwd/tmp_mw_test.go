package fwd_test

import (
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
)

func TestTmpMW(t *testing.T) {
	r, _ := startSwitchOn(t, 8, 2)
	for q := range 2 {
		r.inject(0, q, seqFrame(macB, macA, 2, uint32(q), 64), fwdtest.RX{})
		got := r.links[1].CollectN(1, 2*time.Second)
		t.Logf("queue %d: %d out; l0 %+v l1 %+v", q, len(got), r.f.LinkStats(0), r.f.LinkStats(1))
	}
}
