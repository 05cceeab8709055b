package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestRuntimeLinksRSS: a switch daemon given 2 links that then takes 62
// more with `link add` (the UMEM reserved for --max-links 64 at start)
// resides in at most 10 % more memory (VmRSS) than one given all 64 at
// start.
func TestRuntimeLinksRSS(t *testing.T) {
	topo.RequireRoot(t)
	const n = 64
	h, err := topo.NewHosts(n, topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("close hosts: %v", err)
		}
	})
	dir := t.TempDir()
	// run starts a switch on the first given links of h, adds the rest
	// over the control socket and returns the daemon's VmRSS, its UMEM
	// bytes and the time the whole took.
	run := func(name string, given int) (rss, umem int64, took time.Duration) {
		t.Helper()
		start := time.Now()
		ctl := filepath.Join(dir, name+".sock")
		args := []string{"run", "--mode", "switch", "--queues", "1", "--stats-interval", "0", "--control", ctl}
		for _, l := range h.Links[:given] {
			args = append(args, "--link", l)
		}
		d := startBin(t, args...)
		waitLog(t, d, readyMsg, 60*time.Second)
		waitSocket(t, d, ctl)
		c, err := linkop.Dial(ctl)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range h.Links[given:] {
			if err := c.AddLink(l); err != nil {
				t.Fatalf("%s: link add %s: %v\n%s", name, l, err, d.stderr.String())
			}
		}
		if l, err := c.ListLinks(); err != nil || len(l.Links) != n {
			t.Fatalf("%s: link list: %d links, %v; want %d", name, len(l.Links), err, n)
		}
		c.Close()
		rss = procRSS(t, d.cmd.Process.Pid)
		m := regexp.MustCompile(`umem_bytes=(\d+)`).FindStringSubmatch(d.stderr.String())
		if m == nil {
			t.Fatalf("%s: no umem_bytes in the ready line:\n%s", name, d.stderr.String())
		}
		umem, _ = strconv.ParseInt(m[1], 10, 64)
		took = time.Since(start)
		d.interrupt()
		return rss, umem, took
	}
	rssStart, umemStart, tookStart := run("start", n)
	rssAdded, umemAdded, tookAdded := run("added", 2)
	t.Logf("VmRSS: %d links at start %d MiB (UMEM %d MiB, %v); 2 at start + %d added %d MiB (UMEM %d MiB, %v): %+.1f %%",
		n, rssStart>>20, umemStart>>20, tookStart.Round(time.Millisecond), n-2, rssAdded>>20, umemAdded>>20, tookAdded.Round(time.Millisecond),
		100*float64(rssAdded-rssStart)/float64(rssStart))
	if rssAdded*10 > rssStart*11 {
		t.Errorf("VmRSS with 2 links given and %d added: %d MiB, more than 10 %% above %d MiB with %d given at start", n-2, rssAdded>>20, rssStart>>20, n)
	}
}

// procRSS reads VmRSS of process pid, in bytes.
func procRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestMemoryPlan: what the daemon pins is proportional to what it serves.
// For sink (1 link), switch (2 links) and xconnect (2 links) at ring
// sizes 256, 1024 and 4096, the ready line states the plan (max_links,
// added_ring_size, umem_bytes, umem_reserved_bytes) and the process's
// VmRSS holds to it: the UMEM and some 32 MiB (the runtime, the rings),
// no more. The links given take UMEM by their ring size; the links to
// come (64 in switch and sink, none in xconnect) a reserve that is the
// same at --ring-size 1024 and 4096 (their own, smaller rings: not the
// 1.7 GB of 64 links at 4096 entries). A plan above --max-umem is
// refused at start, exit 2, naming it.
func TestMemoryPlan(t *testing.T) {
	h := newHosts(t, 2)
	field := func(d *proc, k string) int64 {
		t.Helper()
		m := regexp.MustCompile(k + `=(\d+)`).FindStringSubmatch(d.stderr.String())
		if m == nil {
			t.Fatalf("no %s in the ready line:\n%s", k, d.stderr.String())
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		return v
	}
	var table []string
	for _, mode := range []string{"sink", "switch", "xconnect"} {
		served := map[string]int64{}   // the links given's UMEM, by ring size
		reserved := map[string]int64{} // the links to come's
		for _, ring := range []string{"256", "1024", "4096"} {
			args := []string{"run", "--mode", mode, "--queues", "1", "--ring-size", ring, "--stats-interval", "0", "--control", "off", "--link", h.Links[0]}
			if mode != "sink" {
				args = append(args, "--link", h.Links[1])
			}
			d := startBin(t, args...)
			waitLog(t, d, readyMsg, 30*time.Second)
			rss, umem := procRSS(t, d.cmd.Process.Pid), field(d, "umem_bytes")
			res, maxLinks, added := field(d, "umem_reserved_bytes"), field(d, "max_links"), field(d, "added_ring_size")
			d.interrupt()
			served[ring], reserved[ring] = umem-res, res
			table = append(table, fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d |", mode, ring, maxLinks, added, umem>>20, res>>20, rss>>20))
			wantLinks := int64(defaultMaxLinks)
			if mode == "xconnect" {
				wantLinks = 2
			}
			switch {
			case maxLinks != wantLinks:
				t.Errorf("%s: max_links %d, want %d", mode, maxLinks, wantLinks)
			case mode == "xconnect" && res != 0:
				t.Errorf("xconnect: %d bytes reserved for links to come, want none", res)
			case mode != "xconnect" && (res <= 0 || res >= umem || added >= 4096 && ring == "4096"):
				t.Errorf("%s at --ring-size %s: reserve %d of UMEM %d, added links' ring %d; want a reserve within the UMEM, on rings smaller than 4096", mode, ring, res, umem, added)
			}
			if rss > umem+32<<20 {
				t.Errorf("%s at --ring-size %s: VmRSS %d MiB, UMEM %d MiB; want at most the UMEM and 32 MiB", mode, ring, rss>>20, umem>>20)
			}
		}
		if !(served["256"] < served["1024"] && served["1024"] < served["4096"]) || reserved["1024"] != reserved["4096"] {
			t.Errorf("%s: the links given's UMEM by ring size %v (want growing), the reserve %v (want the same at 1024 and 4096)", mode, served, reserved)
		}
	}
	t.Logf("memory plan, --queues 1, veths:\n| mode | --ring-size | max_links | added_ring_size | UMEM MiB | of it for links to come | VmRSS MiB |\n|---|---|---|---|---|---|---|\n%s", strings.Join(table, "\n"))
	r := runBin(t, 30*time.Second, nil, "run", "--mode", "switch", "--queues", "1", "--ring-size", "4096", "--max-umem", "32MiB", "--control", "off", "--link", h.Links[0], "--link", h.Links[1])
	if r.code != exitUsage || !strings.Contains(r.stderr, "--max-umem 32 MiB") {
		t.Errorf("--max-umem 32MiB at --ring-size 4096: exit %d, stderr %q; want 2 naming --max-umem", r.code, r.stderr)
	}
	if id, _ := xdpProg(t, h.Links[0]); id != 0 {
		t.Errorf("a refused start left XDP program %d on %s", id, h.Links[0])
	}
}
