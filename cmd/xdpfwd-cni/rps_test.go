package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// podRPS reads the RPS masks of p's ifname as `ip netns exec` shows them
// (sysfs mounted in the pod's namespace), apart from package rps: the CPU
// set of each rx queue's mask, by queue.
func podRPS(t *testing.T, p *topo.NS, ifname string) map[string]*big.Int {
	t.Helper()
	// ifname quoted: a name, not a pattern.
	out, err := exec.Command("ip", "netns", "exec", p.Name, "sh", "-c",
		`for f in /sys/class/net/"$1"/queues/rx-*/rps_cpus; do echo "$f $(cat "$f")"; done`, "sh", ifname).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: read rps_cpus: %v: %s", p.Name, err, out)
	}
	masks := map[string]*big.Int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f, mask, _ := strings.Cut(line, " ")
		m, ok := new(big.Int).SetString(strings.ReplaceAll(mask, ",", ""), 16)
		if !ok {
			t.Fatalf("%s: %s: mask %q", p.Name, f, mask)
		}
		masks[filepath.Base(filepath.Dir(f))] = m
	}
	return masks
}

// cpuBits is cpus as a mask's bits.
func cpuBits(cpus []int) *big.Int {
	m := new(big.Int)
	for _, c := range cpus {
		m.SetBit(m, c, 1)
	}
	return m
}

// TestCNIRPS: ADD steers the pod end's receive work (RPS) as "rpsCPUs"
// says, against xdpfwd itself. With the daemon's two workers pinned to
// CPU 1 (--cpus 1): the default, like "off", leaves the masks of the
// pod's eth0 at 0; "auto" sets every rx queue's mask (two queues, as the
// workers) to the other online CPUs, and the record keeps them; CHECK
// passes, and fails once a mask is changed by hand; "0" sets CPU 0; a
// CPU that is not online is error 7 and builds nothing. With a daemon
// whose worker is not pinned, auto leaves them at 0.
func TestCNIRPS(t *testing.T) {
	online, err := onlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	rest := slices.DeleteFunc(slices.Clone(online), func(c int) bool { return c == 1 })
	if !slices.Contains(online, 1) || len(rest) == 0 {
		t.Fatalf("online CPUs %v: the test pins xdpfwd's workers to CPU 1 and wants another online to steer to", online)
	}

	r := newRig(t, 0)
	r.daemon.srv.Close(time.Second) // the stand-in makes way for xdpfwd
	for _, up := range []string{"up0", "up1"} {
		ipIn(t, r.node, []string{"link", "add", up, "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
			"peer", "name", up + "p", "numtxqueues", "2", "numrxqueues", "2"},
			[]string{"link", "set", up, "up"}, []string{"link", "set", up + "p", "up"})
	}
	bin := buildXdpfwd(t, r.dir)
	d := startXdpfwd(t, bin, r.node, r.ctl, "--mode", "switch", "--link", "up0", "--link", "up1", "--queues", "2", "--cpus", "1")
	r.forwards = d.forwards
	if l := d.list(); !slices.Equal(l.CPUs, []int{1}) || l.Queues != 2 {
		t.Fatalf("xdpfwd --queues 2 --cpus 1: link list says workers %d on CPUs %v; want 2 on [1]", l.Queues, l.CPUs)
	}

	// add ADDs a pod with "rpsCPUs" rps (nil: the key left out) and
	// checks that every rx queue of its eth0 steers to want (none: 0)
	// and that the record keeps want.
	add := func(name string, rps *string, want []int) *topo.NS {
		t.Helper()
		conf := r.pluginConf(r.hostLocalIPAM())
		if rps != nil {
			conf["rpsCPUs"] = *rps
		}
		r.writeConflist("1.1.0", conf)
		p := r.podNS("cnirps-" + name)
		if out, err := r.cnitoolRun("add", p); err != nil {
			t.Fatalf("%s: cnitool add: %v\n%s", name, err, out)
		}
		t.Cleanup(func() { r.cnitoolRun("del", p) })
		masks := podRPS(t, p, "eth0")
		if len(masks) != 2 {
			t.Errorf("%s: eth0's rx queues %v; want 2, as xdpfwd's workers", name, masks)
		}
		for q, m := range masks {
			if m.Cmp(cpuBits(want)) != 0 {
				t.Errorf("%s: eth0 %s rps_cpus %x; want %x (CPUs %v)", name, q, m, cpuBits(want), want)
			}
		}
		var rec record
		b, err := os.ReadFile(filepath.Join(r.stateDir, r.netName, r.hostName(p)+".json"))
		if err != nil || json.Unmarshal(b, &rec) != nil || !slices.Equal(rec.RPSCPUs, want) {
			t.Errorf("%s: record %s, %v; want rpsCPUs %v", name, b, err, want)
		}
		return p
	}
	str := func(s string) *string { return &s }

	add("default", nil, nil)
	add("off", str("off"), nil)
	p := add("auto", str("auto"), rest)
	if out, err := r.cnitoolRun("check", p); err != nil {
		t.Errorf("cnitool check after ADD: %v\n%s", err, out)
	}
	if out, err := exec.Command("ip", "netns", "exec", p.Name, "sh", "-c", "echo 0 > /sys/class/net/eth0/queues/rx-1/rps_cpus").CombinedOutput(); err != nil {
		t.Fatalf("change rx-1's mask by hand: %v: %s", err, out)
	}
	if out, err := r.cnitoolRun("check", p); err == nil || !strings.Contains(out, "RPS of rx-1") {
		t.Errorf("cnitool check after rx-1's mask set to 0 by hand: %v\n%s; want an error naming RPS of rx-1", err, out)
	}
	r.del(p)

	p = add("cpu0", str("0"), []int{0})
	if out, err := r.cnitoolRun("check", p); err != nil {
		t.Errorf("cnitool check after ADD with \"rpsCPUs\": \"0\": %v\n%s", err, out)
	}

	// CNI_IFNAME is a name, not a pattern: a pod with n0 and n1 (a veth
	// pair of its own) attached as n* with "rpsCPUs": "0" has the masks
	// of n* set to CPU 0, theirs left at 0; CHECK passes.
	glob := r.pluginConf(r.hostLocalIPAM())
	glob["rpsCPUs"] = "0"
	r.writeConflist("1.1.0", glob)
	p = r.podNS("cnirps-glob")
	ipIn(t, p, []string{"link", "add", "n0", "numrxqueues", "2", "type", "veth", "peer", "name", "n1", "numrxqueues", "2"})
	if out, err := r.cnitoolRunAs("add", p, "n*"); err != nil {
		t.Fatalf("CNI_IFNAME=n*: cnitool add: %v\n%s", err, out)
	}
	t.Cleanup(func() { r.cnitoolRunAs("del", p, "n*") })
	for _, dev := range []struct {
		name string
		want []int
	}{{"n*", []int{0}}, {"n0", nil}, {"n1", nil}} {
		masks := podRPS(t, p, dev.name)
		if len(masks) != 2 {
			t.Errorf("CNI_IFNAME=n*: %s's rx queues %v; want 2", dev.name, masks)
		}
		for q, m := range masks {
			if m.Cmp(cpuBits(dev.want)) != 0 {
				t.Errorf("CNI_IFNAME=n*: %s %s rps_cpus %x; want %x (CPUs %v)", dev.name, q, m, cpuBits(dev.want), dev.want)
			}
		}
	}
	if out, err := r.cnitoolRunAs("check", p, "n*"); err != nil {
		t.Errorf("CNI_IFNAME=n*: cnitool check: %v\n%s", err, out)
	}
	if out, err := r.cnitoolRunAs("del", p, "n*"); err != nil {
		t.Errorf("CNI_IFNAME=n*: cnitool del: %v\n%s", err, out)
	}

	// A CPU that is not online: error 7 naming the key, nothing built.
	conf := r.pluginConf(r.hostLocalIPAM())
	conf["rpsCPUs"] = strconv.Itoa(slices.Max(online) + 1)
	r.writeConflist("1.1.0", conf)
	p = r.podNS("cnirps-offline")
	var te *types.Error
	if err := r.addCode(p); !errors.As(err, &te) || te.Code != types.ErrInvalidNetworkConfig || !strings.Contains(te.Msg, `"rpsCPUs"`) {
		t.Errorf("ADD with \"rpsCPUs\" %s, not online: %v; want CNI error 7 naming \"rpsCPUs\"", conf["rpsCPUs"], err)
	}
	if left := r.leftovers(p); len(left) > 0 {
		t.Errorf("after the refused ADD: %q left", left)
	}
	d.running()
	for _, q := range r.pods {
		r.cnitoolRun("del", q)
	}
	d.stop()

	// Not pinned: one worker, no --cpus.
	d = startXdpfwd(t, bin, r.node, r.ctl, "--mode", "switch", "--link", "up0", "--link", "up1", "--queues", "1")
	r.forwards = d.forwards
	if l := d.list(); len(l.CPUs) != 0 {
		t.Fatalf("xdpfwd --queues 1 without --cpus: link list says workers on CPUs %v; want none (not pinned)", l.CPUs)
	}
	// The veth gets the one queue the daemon asks for; add wants two.
	conf = r.pluginConf(r.hostLocalIPAM())
	conf["rpsCPUs"] = "auto"
	r.writeConflist("1.1.0", conf)
	p = r.podNS("cnirps-unpinned")
	if out, err := r.cnitoolRun("add", p); err != nil {
		t.Fatalf("unpinned: cnitool add: %v\n%s", err, out)
	}
	t.Cleanup(func() { r.cnitoolRun("del", p) })
	masks := podRPS(t, p, "eth0")
	if len(masks) != 1 || masks["rx-0"] == nil || masks["rx-0"].Sign() != 0 {
		t.Errorf("unpinned: eth0's rps_cpus %v; want rx-0 alone, 0", fmt.Sprint(masks))
	}
	if out, err := r.cnitoolRun("check", p); err != nil {
		t.Errorf("unpinned: cnitool check: %v\n%s", err, out)
	}
	d.running()
}
