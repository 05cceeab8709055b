package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// record is what the plugin keeps of one attachment, so that GC knows
// which host veth belongs to which container ID and interface name.
type record struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
	Host        string `json:"host"`
	Netns       string `json:"netns,omitempty"`
	Control     string `json:"control"`
}

// netDir is the directory of a network's records.
func (c *NetConf) netDir() string { return filepath.Join(c.StateDir, c.Name) }

func (c *NetConf) recordPath(host string) string { return filepath.Join(c.netDir(), host+".json") }

// saveRecord writes r whole or not at all (a temporary file renamed).
func (c *NetConf) saveRecord(r record) error {
	if err := os.MkdirAll(c.netDir(), 0o700); err != nil {
		return fmt.Errorf("state of %s: %w", r.Host, err)
	}
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

// records lists the network's attachments; an unreadable record is
// skipped (GC must not stop at one).
func (c *NetConf) records() ([]record, error) {
	ents, err := os.ReadDir(c.netDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state of network %s: %w", c.Name, err)
	}
	var out []record
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(c.netDir(), e.Name()))
		var r record
		if err != nil || json.Unmarshal(b, &r) != nil || r.Host+".json" != e.Name() {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
