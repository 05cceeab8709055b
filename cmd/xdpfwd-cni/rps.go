// The pod end's Receive Packet Steering: which CPUs run the receive
// processing (IP, TCP, the socket's wake-up) of what the pod gets.
//
// A veth runs what is sent on one end through the other end's receive
// path on the sending CPU. xdpfwd's workers send to the pods, so without
// RPS each pod's TCP stack, and the ACKs it sends, run on a worker's CPU
// inside its sendto, taking that CPU from the datapath. With "rpsCPUs":
// "auto" ADD sets the pod end's masks to the online CPUs the daemon's
// workers are not pinned to. Not by default: it moves that work onto the
// CPUs the pods run on, which pays where they have CPU to spare and not
// where they are the bottleneck (perf/README.md, --pod-rps: on two CPUs,
// 16 TCP streams gained and request/response halved).

package main

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xdpfwd/xdpfwd/internal/cpulist"
	"github.com/xdpfwd/xdpfwd/internal/rps"
)

// rpsPolicy is the configuration's "rpsCPUs", parsed. The zero value
// leaves RPS as the kernel has it ("" or "off").
type rpsPolicy struct {
	auto bool  // "auto": the online CPUs but the daemon's workers'
	cpus []int // a list given: exactly those
}

func (p rpsPolicy) off() bool { return !p.auto && p.cpus == nil }

// parseRPS reads "rpsCPUs": "" or "off", "auto", or a CPU list as the
// kernel writes one ("0-3,8"). Whether the CPUs are online is ADD's to
// check (targets): DEL and GC of a pod must not fail because a CPU
// went offline since its ADD.
func parseRPS(s string) (rpsPolicy, error) {
	switch s {
	case "", "off":
		return rpsPolicy{}, nil
	case "auto":
		return rpsPolicy{auto: true}, nil
	}
	cpus, err := cpuSet(s)
	if err != nil {
		return rpsPolicy{}, fmt.Errorf(`"rpsCPUs": %w; want "off", "auto" or a CPU list like "0-3,8"`, err)
	}
	return rpsPolicy{cpus: cpus}, nil
}

// cpuSet reads a CPU list ("0-3,8") as the set of CPUs it names,
// sorted, each once.
func cpuSet(s string) ([]int, error) {
	cpus, err := cpulist.Parse(s)
	if err != nil {
		return nil, err
	}
	slices.Sort(cpus)
	return slices.Compact(cpus), nil
}

// onlinePath is where the kernel lists the online CPUs.
const onlinePath = "/sys/devices/system/cpu/online"

// onlineCPUs are the CPUs the kernel has online.
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile(onlinePath)
	if err != nil {
		return nil, fmt.Errorf("online CPUs: %w", err)
	}
	cpus, err := cpuSet(string(b))
	if err != nil {
		return nil, fmt.Errorf("online CPUs %s: %w", onlinePath, err)
	}
	return cpus, nil
}

// rpsTargets is the policy's targets, with the online CPUs read when it
// needs them, and its error the CNI one: a CPU the configuration names
// that is not online is the configuration's fault (7).
func (c *NetConf) rpsTargets(pinned []int) ([]int, error) {
	if c.rps.off() || c.rps.auto && len(pinned) == 0 {
		return nil, nil
	}
	online, err := onlineCPUs()
	if err != nil {
		return nil, types.NewError(types.ErrIOFailure, `"rpsCPUs"`, err.Error())
	}
	cpus, err := c.rps.targets(online, pinned)
	if err != nil {
		return nil, types.NewError(types.ErrInvalidNetworkConfig, err.Error(), "")
	}
	return cpus, nil
}

// targets are the CPUs ADD steers the pod end's receive work to, or
// nil to leave RPS as the kernel has it. online are the online CPUs
// (onlineCPUs), pinned the daemon's workers' (linkop.List.CPUs). Auto is
// the online CPUs but the workers', when the workers are pinned and that
// leaves any: an unpinned worker goes where the scheduler puts it, and
// there is nothing to steer away from.
func (p rpsPolicy) targets(online, pinned []int) ([]int, error) {
	switch {
	case p.off():
		return nil, nil
	case p.cpus != nil:
		for _, c := range p.cpus {
			if !slices.Contains(online, c) {
				return nil, fmt.Errorf(`"rpsCPUs": CPU %d is not online (online: %s)`, c, cpulist.Format(online))
			}
		}
		return p.cpus, nil
	case len(pinned) == 0:
		return nil, nil
	}
	var rest []int
	for _, c := range online {
		if !slices.Contains(pinned, c) {
			rest = append(rest, c)
		}
	}
	return rest, nil
}

// set steers the receive work of ifname, in the namespace at netns, to
// cpus, and returns the CPUs set: nil when cpus is, or when the policy is
// auto and the kernel has no RPS (nothing to steer with; an explicit list
// fails there).
func (p rpsPolicy) set(netns, ifname string, cpus []int) ([]int, error) {
	if len(cpus) == 0 {
		return nil, nil
	}
	err := rps.Set(netns, ifname, cpus)
	switch {
	case errors.Is(err, rps.ErrNoRPS) && p.auto:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf(`"rpsCPUs" %s: %w`, cpulist.Format(cpus), err)
	}
	return cpus, nil
}

// checkRPS says how the RPS masks of ifname, in the namespace at netns,
// differ from the CPUs ADD set (none: ADD left them as they were, and so
// does CHECK).
func checkRPS(netns, ifname string, want []int) error {
	if len(want) == 0 {
		return nil
	}
	queues, err := rps.Get(netns, ifname)
	if err != nil {
		return err
	}
	for q, got := range queues {
		if !slices.Equal(got, want) {
			return fmt.Errorf(`RPS of rx-%d steers to CPUs %s, ADD set %s ("rpsCPUs")`, q, cpulist.Format(got), cpulist.Format(want))
		}
	}
	return nil
}
