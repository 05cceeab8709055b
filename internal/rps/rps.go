// Package rps sets Receive Packet Steering on a device in another network
// namespace: which CPUs run the receive processing (IP, TCP, the socket's
// wake-up) of what the device's receive queues are given.
//
// A veth delivers what is sent on one end to the other end's receive path
// on the sending CPU. xdpfwd's workers send, so without RPS a pod's TCP
// stack runs on the worker's CPU, inside its sendto, and takes that CPU
// from the datapath. RPS on the pod's end hands that work to other CPUs.
//
// The masks live in sysfs, and sysfs shows the devices of the namespace
// its mount was made in: Set and Get work on a thread of their own that
// enters the namespace, unshares its mount namespace and mounts a sysfs
// there, as `ip netns exec` does. That thread is discarded afterwards,
// never returned to the Go scheduler. The package changes nothing else.
package rps

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/cpulist"
	"github.com/xdpfwd/xdpfwd/internal/netdev"
)

// Set makes cpus the RPS mask of every receive queue of the device ifname
// in the network namespace at netnsPath (a /run/netns or /proc/PID/ns/net
// path). Empty cpus turns RPS off (the kernel's default).
func Set(netnsPath, ifname string, cpus []int) error {
	mask, err := Mask(cpus)
	if err != nil {
		return fmt.Errorf("rps on %s: %w", ifname, err)
	}
	return inNamespace(netnsPath, ifname, func(files []string) error {
		for _, f := range files {
			if err := os.WriteFile(f, []byte(mask), 0); err != nil {
				return fmt.Errorf("write %s: %w", f, err)
			}
		}
		return nil
	})
}

// Get reads the RPS masks of the receive queues of ifname in the network
// namespace at netnsPath, as CPU lists in queue order.
func Get(netnsPath, ifname string) ([][]int, error) {
	var queues [][]int
	err := inNamespace(netnsPath, ifname, func(files []string) error {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			cpus, err := ParseMask(string(b))
			if err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			queues = append(queues, cpus)
		}
		return nil
	})
	return queues, err
}

// Mask is cpus as sysfs writes a CPU mask: hexadecimal, 32 bits per
// comma-separated group, the highest group first.
func Mask(cpus []int) (string, error) {
	var words []uint32
	for _, c := range cpus {
		if c < 0 || c > cpulist.MaxCPU {
			return "", fmt.Errorf("CPU %d out of range", c)
		}
		for len(words) <= c/32 {
			words = append(words, 0)
		}
		words[c/32] |= 1 << (c % 32)
	}
	if len(words) == 0 {
		return "0", nil
	}
	groups := make([]string, 0, len(words))
	for i := len(words) - 1; i >= 0; i-- {
		groups = append(groups, fmt.Sprintf("%08x", words[i]))
	}
	return strings.Join(groups, ","), nil
}

// ParseMask reads a mask written as Mask writes it, or as sysfs shows it.
func ParseMask(s string) ([]int, error) {
	groups := strings.Split(strings.TrimSpace(s), ",")
	var cpus []int
	for i, g := range groups {
		w, err := strconv.ParseUint(g, 16, 32)
		if err != nil {
			return nil, fmt.Errorf("CPU mask %q: %w", s, err)
		}
		base := 32 * (len(groups) - 1 - i)
		for b := range 32 {
			if w&(1<<b) != 0 {
				cpus = append(cpus, base+b)
			}
		}
	}
	slices.Sort(cpus)
	return cpus, nil
}

// ErrNoRPS is returned when the device has no rps_cpus files: a kernel
// built without CONFIG_RPS.
var ErrNoRPS = errors.New("no RPS in this kernel (rps_cpus missing)")

// inNamespace runs fn with the paths of ifname's rps_cpus files on a
// thread in the network namespace at netnsPath with a sysfs of its own.
func inNamespace(netnsPath, ifname string, fn func(files []string) error) error {
	if err := netdev.CheckName(ifname); err != nil {
		return fmt.Errorf("rps: %w", err)
	}
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread leaves with its namespaces changed,
		// and a goroutine that exits locked takes its thread with it.
		runtime.LockOSThread()
		done <- onThisThread(netnsPath, ifname, fn)
	}()
	if err := <-done; err != nil {
		return fmt.Errorf("rps on %s in %s: %w", ifname, netnsPath, err)
	}
	return nil
}

func onThisThread(netnsPath, ifname string, fn func(files []string) error) error {
	fd, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter network namespace: %w", err)
	}
	// A mount namespace for this thread alone (CLONE_NEWNS unshares its
	// filesystem context too), private so nothing mounted here reaches
	// the host's.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("sysfs", "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount sysfs: %w", err)
	}
	// The name is a name: a glob of rx-* under it would take n* for n0
	// and n1 too, and a[b] for ab.
	queues, err := netdev.Queues(ifname, "rx")
	if err != nil {
		return err
	}
	dir, _ := netdev.Dir(ifname) // Queues checked the name
	var files []string
	for _, q := range queues {
		f := filepath.Join(dir, "queues", "rx-"+strconv.Itoa(q), "rps_cpus")
		if _, err := os.Stat(f); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return ErrNoRPS
			}
			return err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return ErrNoRPS
	}
	return fn(files)
}
