package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/fwd/fwdtest"
	"github.com/xdpfwd/xdpfwd/metrics"
)

// TestPodsNamedAndForgotten: a switch daemon's control socket (forwarders
// of fwdtest's in-memory links: no root) takes 500 pods, one after the
// other, each added naming its pod and removed. While a pod is there,
// link list (table and JSON), the link state file and every per-link
// metric series name it; once it is removed, no series does: after the
// 500 the metrics have the series they had before the first, the pods
// kept are bounded (the last 64 removed, for the summary), and the
// summary names the removed links it keeps by their pods.
func TestPodsNamedAndForgotten(t *testing.T) {
	env := fwdtest.New()
	for _, n := range []string{"up0", "pod0", "pod1"} {
		env.AddLink(n, fwdtest.LinkOptions{})
	}
	_, f, cs, state, path := fakeSwitchDaemon(t, env, 3)
	srv, err := metrics.NewServer(f, metrics.Options{Pods: cs.pods.metric})
	if err != nil {
		t.Fatal(err)
	}
	// series is every sample of a link, as "family{labels}".
	series := func() []string {
		t.Helper()
		mfs, err := srv.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				var l []string
				for _, lp := range m.GetLabel() {
					l = append(l, lp.GetName()+"="+lp.GetValue())
				}
				if s := strings.Join(l, ","); strings.Contains(s, "link=") {
					out = append(out, mf.GetName()+"{"+s+"}")
				}
			}
		}
		return out
	}
	before := series()
	c, err := linkop.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const pods = 500
	for i := range pods {
		link := fmt.Sprintf("pod%d", i%2)
		pod := &linkop.Pod{Namespace: fmt.Sprintf("ns%d", i%7), Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("uid-%d", i)}
		mac := fmt.Sprintf("02:41:00:00:%02x:%02x", i>>8, i&0xff)
		if err := c.AddLinkWith(link, linkop.AddOptions{MAC: mac, Pod: pod}); err != nil {
			t.Fatalf("add %s for %s: %v", link, pod, err)
		}
		if i%50 == 0 {
			checkPodShown(t, cs, c, state, link, *pod, series())
		}
		if err := c.DelLink(link); err != nil {
			t.Fatalf("del %s of %s: %v", link, pod, err)
		}
	}
	after := series()
	if strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Errorf("after %d pods added and removed, %d series (want the %d before):\n%s", pods, len(after), len(before), strings.Join(after, "\n"))
	}
	if all := cs.pods.all(true); len(all) > maxRemovedPods {
		t.Errorf("%d pods kept after %d came and went, want at most %d", len(all), pods, maxRemovedPods)
	}
	if live := cs.pods.all(false); len(live) != 0 {
		t.Errorf("pods of no link kept as live: %v", live)
	}
	// The summary names the removed links it keeps by their last pods.
	sum := summaryOf(f.Summary(), nil, cs.pods.all(true))
	for _, link := range []string{"pod0", "pod1"} {
		want := fmt.Sprintf("web-%d", pods-2+map[string]int{"pod0": 0, "pod1": 1}[link])
		if p, ok := sum.Pods[link]; !ok || p.Name != want {
			t.Errorf("summary's pod of removed %s: %+v %v, want %s", link, p, ok, want)
		}
	}
	if _, ok := sum.Pods["up0"]; ok {
		t.Errorf("summary names a pod for the uplink: %+v", sum.Pods)
	}
}

// checkPodShown: link serves pod in link list's table and JSON, the state
// file, and every metric series of link (series).
func checkPodShown(t *testing.T, cs *controlSocket, c *linkop.Client, state, link string, pod linkop.Pod, series []string) {
	t.Helper()
	l, err := c.ListLinks()
	if err != nil {
		t.Fatal(err)
	}
	k, ok := l.Link(link)
	if !ok || k.Pod == nil || *k.Pod != pod {
		t.Errorf("link list's %s: %+v, want pod %+v", link, k, pod)
	}
	var table, js bytes.Buffer
	printLinks(&table, l, false)
	printLinks(&js, l, true)
	if !strings.Contains(table.String(), " "+pod.String()+" ") || !strings.Contains(table.String(), "POD") {
		t.Errorf("link list's table does not show %s:\n%s", pod, table.String())
	}
	if !strings.Contains(js.String(), fmt.Sprintf(`"uid": %q`, pod.UID)) {
		t.Errorf("link list --json does not show %s's uid:\n%s", pod, js.String())
	}
	var doc linkStateDoc
	if b, err := os.ReadFile(state); err != nil || json.Unmarshal(b, &doc) != nil || doc.Pods[link] != pod {
		t.Errorf("link state file: %+v (%v), want %s's pod %+v", doc.Pods, err, link, pod)
	}
	n := 0
	for _, s := range series {
		if !strings.Contains(s, "link="+link+",") {
			continue
		}
		n++
		if !strings.Contains(s, "namespace="+pod.Namespace+",") || !strings.Contains(s, "pod="+pod.Name) {
			t.Errorf("series of %s without its pod %s: %s", link, pod, s)
		}
	}
	if n == 0 {
		t.Errorf("no series of %s", link)
	}
}

// TestDaemonPods: a switch daemon whose pods were added naming their pods
// (link add --pod, as xdpfwd-cni adds them) shows each by namespace and
// name: in link list; in the metrics; capture --pod records that pod's
// link only, its interface described "pod NAMESPACE/NAME", and --pod of
// a pod it does not serve is refused (exit 2); after a kill -9 and a
// restart the pods are added back with their names; the summary names
// them. A link added without --pod shows none.
func TestDaemonPods(t *testing.T) {
	h := newHosts(t, 4)
	dir := t.TempDir()
	ctl, summary := filepath.Join(dir, "ctl.sock"), filepath.Join(dir, "summary.json")
	args := []string{"run", "--mode", "switch", "--queues", "1", "--link", h.Links[0], "--max-links", "4",
		"--stats-interval", "0", "--control", ctl, "--metrics", "127.0.0.1:0", "--summary", summary}
	d := startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	pods := map[string]string{h.Links[1]: "default/web-0", h.Links[2]: "shop/db-0", h.Links[3]: "-"}
	for i := 1; i <= 3; i++ {
		a := []string{"link", "add", h.Links[i], "--control", ctl}
		if p := pods[h.Links[i]]; p != "-" {
			a = append(a, "--pod", p, "--pod-uid", fmt.Sprintf("uid-%d", i))
		}
		if r := runBin(t, 10*time.Second, nil, a...); r.code != 0 {
			t.Fatalf("link add %s: exit %d, %s", h.Links[i], r.code, r.stderr)
		}
	}
	listed := func(when string) {
		t.Helper()
		out := runBin(t, 10*time.Second, nil, "link", "list", "--control", ctl).stdout
		for link, pod := range pods {
			if !regexp.MustCompile(`(?m)^\s*` + link + `\s.*\s` + regexp.QuoteMeta(pod) + `\s`).MatchString(out) {
				t.Errorf("link list %s: %s does not show pod %s:\n%s", when, link, pod, out)
			}
		}
	}
	listed("after the adds")
	if r := runBin(t, 10*time.Second, nil, "link", "list", "--json", "--control", ctl); !strings.Contains(r.stdout, `"uid": "uid-2"`) {
		t.Errorf("link list --json lacks shop/db-0's uid:\n%s", r.stdout)
	}
	code, body := httpGet(t, "http://"+waitMetricsAddr(t, d, 5*time.Second)+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		fmt.Sprintf(`xdpfwd_rx_packets_total{link=%q,namespace="default",pod="web-0",queue="0"}`, h.Links[1]),
		fmt.Sprintf(`xdpfwd_link_info{bind_mode="copy",link=%q,namespace="shop",pod="db-0",pod_uid="uid-2"`, h.Links[2]),
		fmt.Sprintf(`xdpfwd_rx_packets_total{link=%q,namespace="",pod="",queue="0"}`, h.Links[3]),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	// capture --pod: web-0's link only, described as the pod's.
	if r := runBin(t, 10*time.Second, nil, "capture", "--control", ctl, "--pod", "default/nosuch", "-w", filepath.Join(dir, "x.pcapng")); r.code != 2 || !strings.Contains(r.stderr, "serves no link of that pod") {
		t.Errorf("capture --pod of a pod not served: exit %d, %s; want 2 saying so", r.code, r.stderr)
	}
	file := filepath.Join(dir, "web0.pcapng")
	c := startCapture(t, "--control", ctl, "--pod", "default/web-0", "-w", file, "icmp")
	for _, i := range []int{1, 2} {
		if res, err := topo.Ping(h.NS[i], h.V4[0], 3, 3*time.Second); err != nil || res.Received != 3 {
			t.Fatalf("ping host %d → uplink: %+v %v", i, res, err)
		}
	}
	if captured, _ := endCapture(t, c); captured < 6 {
		t.Errorf("capture --pod default/web-0: %d packets, want its 3 pings both ways", captured)
	}
	requireTool(t, "tshark")
	out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-E", "separator=|", "-e", "frame.interface_name", "-e", "frame.interface_description").Output()
	if err != nil {
		t.Fatalf("tshark: %v", errText(err))
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if want := h.Links[1] + "|pod default/web-0"; l != want {
			t.Errorf("capture --pod default/web-0 has a packet on %q, want %q", l, want)
		}
	}

	// kill -9, then the same command: the pods come back named.
	d.cmd.Process.Kill()
	<-d.done
	d = startBin(t, args...)
	waitLog(t, d, readyMsg, 30*time.Second)
	waitSocket(t, d, ctl)
	listed("after a kill -9 and a restart")
	d.interrupt()
	var sum daemonSummary
	if b, err := os.ReadFile(summary); err != nil || json.Unmarshal(b, &sum) != nil {
		t.Fatalf("summary: %v", err)
	}
	if p := sum.Pods[h.Links[1]]; p.String() != "default/web-0" || p.UID != "uid-1" {
		t.Errorf("summary's pod of %s: %+v, want default/web-0 uid-1", h.Links[1], p)
	}
	if _, ok := sum.Pods[h.Links[3]]; ok {
		t.Errorf("summary names a pod for %s, added without: %+v", h.Links[3], sum.Pods)
	}
}
