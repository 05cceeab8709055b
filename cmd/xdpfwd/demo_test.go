package main

// `xdpfwd demo`'s verdict.

import (
	"errors"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TestDemoVerdict: the demo, in both of its modes, ends with one PASS line
// and exit 0, prints every link's drops by reason and says once what each
// reason means. --max-loss 100 leaves the UDP loss, which depends on the
// machine's load, out of the verdict; TestDemoVerdictLine judges it.
func TestDemoVerdict(t *testing.T) {
	topo.RequireRoot(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"xconnect", []string{"demo", "--duration", "1s", "--tcp-mib", "8", "--udp-count", "20000", "--max-loss", "100"}},
		{"switch", []string{"demo", "--mode", "switch", "--tcp-mib", "4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runBin(t, 2*time.Minute, nil, c.args...)
			t.Logf("xdpfwd %s: exit %d in %v\nstdout:\n%s\nstderr:\n%s", strings.Join(c.args, " "), r.code, r.elapsed.Round(time.Millisecond), r.stdout, r.stderr)
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "PASS: ") || r.code != 0 {
				t.Errorf("last line %q, exit %d; want a PASS line and exit 0", last, r.code)
			}
			if n := strings.Count(r.stdout, "PASS") + strings.Count(r.stdout, "FAIL"); n != 1 {
				t.Errorf("%d verdicts, want one", n)
			}
			links := regexp.MustCompile(`(?m)^  (xf\S+): rx .* drops (\d+): (.*)$`).FindAllStringSubmatch(r.stdout, -1)
			if len(links) < 2 {
				t.Fatalf("%d link lines with drops by reason, want one per link", len(links))
			}
			for _, l := range links {
				if l[2] == "0" && l[3] != "none" || l[2] != "0" && l[3] == "none" {
					t.Errorf("%s: drops %s but reasons %q", l[1], l[2], l[3])
				}
				for _, kv := range regexp.MustCompile(`([a-z_]+)=\d+`).FindAllStringSubmatch(l[3], -1) {
					if n := strings.Count(r.stdout, "\n    "+kv[1]+": "); n != 1 {
						t.Errorf("drop reason %s explained %d times, want once", kv[1], n)
					}
				}
			}
		})
	}
}

// TestDemoVerdictLine: the verdict fails on a failed check, a direction
// that delivered nothing, loss above the bound and a leaked address, names
// each, and passes otherwise.
func TestDemoVerdictLine(t *testing.T) {
	ok := demoResult{burst: topo.UDPResult{Sent: 1000, Received: 990}, dirSent: [2]int{100, 100}, dirGot: [2]int{90, 100}, bothWays: true, maxLoss: 50}
	for _, c := range []struct {
		name string
		edit func(r *demoResult)
		want string // "" for PASS
	}{
		{"all good", func(*demoResult) {}, ""},
		{"no both-ways phase", func(r *demoResult) { r.bothWays, r.dirSent, r.dirGot = false, [2]int{}, [2]int{} }, ""},
		{"check failed", func(r *demoResult) { r.checkErr = errors.New("ping6 A→B: 0/3 replies") }, "ping6 A→B: 0/3 replies"},
		{"B→A delivered nothing", func(r *demoResult) { r.dirGot[1] = 0 }, "udp B→A: nothing delivered of 100 sent"},
		{"loss above bound", func(r *demoResult) { r.dirGot[0] = 40 }, "udp loss 60.0% > 50%"},
		{"burst loss above bound", func(r *demoResult) { r.burst.Received = 100 }, "udp loss 90.0% > 50%"},
		{"leak", func(r *demoResult) { r.leaked = 3 }, "3 UMEM addresses leaked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ok
			c.edit(&r)
			line, err := r.verdict()
			switch {
			case c.want == "" && (err != nil || !strings.HasPrefix(line, "PASS: ")):
				t.Errorf("verdict %q, %v; want PASS and no error", line, err)
			case c.want != "" && (err == nil || !strings.HasPrefix(line, "FAIL: ") || !strings.Contains(line, c.want)):
				t.Errorf("verdict %q, %v; want FAIL naming %q and an error", line, err, c.want)
			case c.want != "" && exitCode(err, io.Discard) != exitFailure:
				t.Errorf("exit code %d on FAIL, want %d", exitCode(err, io.Discard), exitFailure)
			}
			if !strings.Contains(line, "at most 50% lost") {
				t.Errorf("verdict %q does not state the loss bound", line)
			}
		})
	}
}
