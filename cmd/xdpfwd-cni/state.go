package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// record is what the plugin keeps of one attachment, so that GC knows
// which container IDs and interface names it has attached. ADD writes it
// before it makes anything (Stage "record") and again after each step
// (Stage the step done, "added" at the end): an ADD killed at any step
// leaves a record, and DEL and GC undo all an attachment may have, so
// nothing it made is left unknown.
type record struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
	// Host is HostName(ContainerID, IfName): GC acts on that, never on
	// what a record says (records() skips one whose Host is not it).
	Host    string `json:"host"`
	Netns   string `json:"netns,omitempty"`
	Control string `json:"control"`
	Stage   string `json:"stage,omitempty"`
	// RPSCPUs are the CPUs ADD steered the container end's receive
	// work to (rps.go), which CHECK expects its masks to be; none: ADD
	// left RPS as it was (and records older than RPS).
	RPSCPUs []int `json:"rpsCPUs,omitempty"`
}

// netDir is the directory of a network's records.
func (c *NetConf) netDir() string { return filepath.Join(c.StateDir, c.Name) }

func (c *NetConf) recordPath(host string) string { return filepath.Join(c.netDir(), host+".json") }

// saveRecord writes r whole or not at all (a temporary file renamed),
// in the network's directory trustStateDir made.
func (c *NetConf) saveRecord(r record) error {
	b, _ := json.Marshal(r)
	tmp := c.recordPath(r.Host) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("state of %s: %w", r.Host, err)
	}
	if err := os.Rename(tmp, c.recordPath(r.Host)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("state of %s: %w", r.Host, err)
	}
	return nil
}

func (c *NetConf) removeRecord(host string) error {
	if err := os.Remove(c.recordPath(host)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("state of %s: %w", host, err)
	}
	return nil
}

// loadRecord reads the record of the attachment whose host end is host:
// ok false if there is none. One that cannot be read is there all the
// same (ok, zero Stage: unfinished).
func (c *NetConf) loadRecord(host string) (r record, ok bool) {
	b, err := os.ReadFile(c.recordPath(host))
	if errors.Is(err, os.ErrNotExist) {
		return record{}, false
	}
	if err == nil {
		json.Unmarshal(b, &r)
	}
	return r, true
}

// records lists the network's attachments. A record that cannot be read,
// or whose host end is not the one its container ID and interface name
// give (planted: it could name any link, the uplink too), is left alone
// and said in bad (GC must not stop at one, nor act on one).
func (c *NetConf) records() (recs []record, bad []error, err error) {
	ents, err := os.ReadDir(c.netDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("state of network %s: %w", c.Name, err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(c.netDir(), e.Name())
		var r record
		switch b, err := os.ReadFile(path); {
		case err != nil:
			bad = append(bad, fmt.Errorf("record %s: %w", path, err))
		case json.Unmarshal(b, &r) != nil:
			bad = append(bad, fmt.Errorf("record %s: not a record", path))
		case r.ContainerID == "" || r.IfName == "":
			bad = append(bad, fmt.Errorf("record %s: no container ID or interface name: left alone", path))
		case r.Host != HostName(r.ContainerID, r.IfName) || e.Name() != r.Host+".json":
			bad = append(bad, fmt.Errorf("record %s: host %q is not the host end of %s/%s (%s): left alone", path, r.Host, r.ContainerID, r.IfName, HostName(r.ContainerID, r.IfName)))
		default:
			recs = append(recs, r)
		}
	}
	return recs, bad, nil
}

// trustStateDir checks that the records can be trusted: the state
// directory and the network's in it are the plugin's user's (root's)
// and writable by it alone, and so are the directories above them (or
// root's, or sticky): GC deletes what the records name, and ADD writes
// files there as root. With create, ADD's, it makes the directories
// first (0700); without, a state directory that does not exist is no
// error (exists false: no records).
func (c *NetConf) trustStateDir(create bool) (exists bool, err error) {
	if create {
		if err := os.MkdirAll(c.netDir(), 0o700); err != nil {
			return false, fmt.Errorf("state directory %s: %w", c.StateDir, err)
		}
	}
	uid := uint32(os.Geteuid())
	for _, d := range []string{c.netDir(), c.StateDir} {
		real, err := filepath.EvalSymlinks(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("state directory %s: %w", d, err)
		}
		exists = true
		for p, strict := real, true; ; p, strict = filepath.Dir(p), false {
			if err := trustDir(p, uid, strict); err != nil {
				return false, fmt.Errorf("state directory %s: %w: the plugin acts on the records in it, so none but uid %d may write them", c.StateDir, err, uid)
			}
			if p == filepath.Dir(p) {
				break
			}
		}
	}
	return exists, nil
}

// trustDir says what is wrong with directory p, if anything: owned by
// another user than uid (or, above the state directory, than root), or
// writable by group or others (above the state directory: unless sticky,
// as /tmp is).
func trustDir(p string, uid uint32, strict bool) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner to check", p)
	}
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", p)
	case st.Uid != uid && (strict || st.Uid != 0):
		return fmt.Errorf("%s is owned by uid %d, not %d", p, st.Uid, uid)
	case fi.Mode().Perm()&0o022 != 0 && (strict || fi.Mode()&os.ModeSticky == 0):
		return fmt.Errorf("%s is writable by group or others (mode %04o)", p, fi.Mode().Perm())
	}
	return nil
}
