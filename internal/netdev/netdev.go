// Package netdev reads what sysfs says of a network device by its name:
// the name checked as the kernel checks one, then used as a name, never
// as a pattern, in a path.
//
// A Linux interface name may hold '*', '?' and '[' (ip link add 'n*'
// works): a path built from one and handed to filepath.Glob matches other
// devices (n* is n0 and n1 too) or none (a[b] is ab). And a name the
// kernel would refuse ("..", "n0/../n1") would reach another directory.
package netdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SysClassNet is where sysfs lists the devices of the namespace it was
// mounted in.
const SysClassNet = "/sys/class/net"

// MaxNameLen is the longest interface name: IFNAMSIZ less its NUL.
const MaxNameLen = 15

// ErrNoDevice: sysfs has no device of that name.
var ErrNoDevice = errors.New("no such network device")

// ValidName reports whether the kernel takes name for an interface
// (dev_valid_name): 1..15 bytes, not "." or "..", without '/', ':', NUL
// or white space (the kernel's isspace: \t \n \v \f \r, space and 0xA0).
func ValidName(name string) bool {
	if name == "" || len(name) > MaxNameLen || name == "." || name == ".." {
		return false
	}
	return !strings.ContainsAny(name, "/:\x00\t\n\v\f\r \xa0")
}

// CheckName says what is wrong with name as an interface name, if
// anything (ValidName).
func CheckName(name string) error {
	switch {
	case len(name) > MaxNameLen:
		return fmt.Errorf("interface name %q: longer than %d bytes (IFNAMSIZ)", name, MaxNameLen)
	case !ValidName(name):
		return fmt.Errorf("interface name %q: not an interface name (1..%d bytes, not . or .., no '/', ':' or white space)", name, MaxNameLen)
	}
	return nil
}

// Dir is the device's sysfs directory, after checking its name.
func Dir(name string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return filepath.Join(SysClassNet, name), nil
}

// Queues are the numbers of the device's queues of a kind ("rx" or "tx"),
// in order, as sysfs lists them (queues/rx-0, rx-1, ...): the queues the
// device uses now (real_num_rx_queues). A device sysfs does not have is
// ErrNoDevice.
func Queues(name, kind string) ([]int, error) {
	dir, err := Dir(name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%q: %w", name, ErrNoDevice)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "queues"))
	if err != nil {
		return nil, err
	}
	var qs []int
	for _, e := range ents {
		if n, ok := queueNumber(e.Name(), kind); ok {
			qs = append(qs, n)
		}
	}
	slices.Sort(qs) // rx-10 after rx-9
	return qs, nil
}

// queueNumber is N of a queue directory named kind-N, N decimal as the
// kernel writes it.
func queueNumber(dir, kind string) (int, bool) {
	s, ok := strings.CutPrefix(dir, kind+"-")
	if !ok || s == "" || strings.Trim(s, "0123456789") != "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, false
	}
	return n, true
}
