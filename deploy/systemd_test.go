package deploy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// systemdBinary is the service manager TestSystemdHandover runs.
const systemdBinary = "/lib/systemd/systemd"

// sandboxSystemd is a systemd of the test's own: the first process of a
// PID, mount and cgroup namespace, in a cgroup made for it, with /run a
// tmpfs of its own, starting only the unit under test. Its files are
// read and written through /proc/PID/root (its mount namespace's view).
type sandboxSystemd struct {
	t      *testing.T
	cmd    *exec.Cmd
	pid    int    // systemd's, as this namespace sees it
	cgroup string // the cgroup made for it, removed at the end
}

// cgroup2Mount is where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup
// on a unified host, /sys/fs/cgroup/unified on a hybrid one).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				return fields[4]
			}
		}
	}
	t.Fatal("no cgroup2 hierarchy mounted")
	return ""
}

// startSystemd boots a sandboxed systemd with unit (the real one) and a
// drop-in for its instance inst, and files copied into its /run/xdpfwd-test.
func startSystemd(t *testing.T, unit []byte, inst, dropIn string, files map[string]string) *sandboxSystemd {
	t.Helper()
	dir := t.TempDir()
	cg := filepath.Join(cgroup2Mount(t), fmt.Sprintf("xdpfwd-systemd-test-%08x", rand.Uint32()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	var copies strings.Builder
	for name, from := range files {
		fmt.Fprintf(&copies, "cp -p %q /run/xdpfwd-test/%s\n", from, name)
	}
	os.WriteFile(filepath.Join(dir, "xdpfwd@.service"), unit, 0o644)
	os.WriteFile(filepath.Join(dir, "test.conf"), []byte(dropIn), 0o644)
	os.WriteFile(filepath.Join(dir, "test.target"), []byte("[Unit]\nDefaultDependencies=no\nWants=xdpfwd@"+inst+".service\n"), 0o644)
	// Runs in the new namespaces, then becomes systemd: mounts of its
	// own (nothing of the host's changes), the units under /run (a
	// runtime unit directory), a cgroup2 mount of the namespace's root.
	script := fmt.Sprintf(`set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /run
umount -l /sys/fs/cgroup
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /run/systemd/system/xdpfwd@%[2]s.service.d /run/xdpfwd-test
cp %[1]s/xdpfwd@.service %[1]s/test.target /run/systemd/system/
cp %[1]s/test.conf /run/systemd/system/xdpfwd@%[2]s.service.d/
%[3]s
exec env container=xdpfwd-test %[4]s --unit=test.target --log-target=console
`, dir, inst, copies.String(), systemdBinary)
	os.WriteFile(filepath.Join(dir, "boot.sh"), []byte(script), 0o755)
	cmd := exec.Command("bash", "-c", fmt.Sprintf(`echo $$ > %q/cgroup.procs && exec unshare --pid --fork --mount --cgroup --mount-proc bash %q`, cg, filepath.Join(dir, "boot.sh")))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sandboxSystemd{t: t, cmd: cmd, cgroup: cg}
	t.Cleanup(s.stop)
	// systemd is unshare's child.
	for deadline := time.Now().Add(10 * time.Second); s.pid == 0; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/systemd") {
				s.pid = pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no systemd came up:\n%s", out.String())
		}
	}
	for deadline := time.Now().Add(20 * time.Second); exec.Command("nsenter", "-t", strconv.Itoa(s.pid), "-m", "-p", "systemctl", "show", "-p", "Version").Run() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("systemd does not answer systemctl:\n%s", out.String())
		}
	}
	return s
}

// systemctl runs systemctl in the sandbox's mount and PID namespaces (it
// asks systemd for the credentials of whoever connects); its output,
// or "" if it could not talk to systemd.
func (s *sandboxSystemd) systemctl(args ...string) string {
	out, err := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(s.pid), "-m", "-p", "systemctl"}, args...)...).CombinedOutput()
	if err != nil && len(out) == 0 {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// show is one property of unit.
func (s *sandboxSystemd) show(unit, prop string) string {
	return s.systemctl("show", unit, "-p", prop, "--value")
}

// path is name in the sandbox's /run/xdpfwd-test, as this namespace
// reaches it.
func (s *sandboxSystemd) path(name string) string {
	return fmt.Sprintf("/proc/%d/root/run/xdpfwd-test/%s", s.pid, name)
}

// stop ends the sandbox (its PID namespace, and every process in it,
// with systemd) and removes its cgroup.
func (s *sandboxSystemd) stop() {
	s.cmd.Process.Kill()
	if s.pid != 0 {
		syscall.Kill(s.pid, syscall.SIGKILL)
	}
	s.cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// Children first: systemd made its slices below.
		var dirs []string
		filepath.WalkDir(s.cgroup, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
		if _, err := os.Stat(s.cgroup); os.IsNotExist(err) || time.Now().After(deadline) {
			return
		}
	}
}

// TestSystemdHandover runs the unit as shipped (xdpfwd@.service: Type=notify,
// PIDFile=, ExecReload) under a real systemd (a sandboxed one, the
// machine's /lib/systemd/systemd), with a drop-in that only points it at
// the test's binary, config and links, runs it as root (no xdpfwd user
// here) and sends its output to a file (no journal here). A stream of
// 20,000 datagrams/s crosses it while: it starts (active once READY=1,
// its status says what it forwards, the PID file names it); `systemctl
// kill -s SIGUSR2 --kill-whom=main` hands over (systemd's main PID becomes
// the successor's, the unit stays active); `systemctl reload` after the
// binary was replaced hands over to the new binary; a reload with a
// config change a handover cannot carry (ring-size) leaves the main PID
// and the unit as they were; `systemctl stop` ends the last one cleanly
// (Result=success, exit 0: a main process systemd did not fork is
// SIGKILLed at a stop, which the PID file avoids), the PID file removed,
// no program left on the links. The stream loses nothing.
func TestSystemdHandover(t *testing.T) {
	topo.RequireRoot(t)
	for _, tool := range []string{systemdBinary, "unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
				t.Fatalf("%s: %v", tool, err)
			}
			t.Skipf("%s: %v", tool, err)
		}
	}
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	dir := t.TempDir()
	cfg := filepath.Join(dir, "test.yaml")
	writeCfg := func(path, extra string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(fmt.Sprintf("link: [%s, %s]\nstats-interval: 0s\n%s", p.LinkA, p.LinkB, extra)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg(cfg, "")
	const inst = "test"
	unit := "xdpfwd@" + inst + ".service"
	dropIn := `[Unit]
DefaultDependencies=no
[Service]
User=root
Group=root
StateDirectory=
ExecStart=
ExecStart=/run/xdpfwd-test/xdpfwd run --config /run/xdpfwd-test/test.yaml --control /run/xdpfwd/%i.sock --pid-file /run/xdpfwd/%i.pid
StandardOutput=append:/run/xdpfwd-test/daemon.log
StandardError=append:/run/xdpfwd-test/daemon.log
`
	// The drop-in changes ExecStart's paths only: the unit's own must be
	// this one, with the same flags after them.
	u := loadUnit(t)
	if got := strings.Fields(u.get("Service", "ExecStart")); len(got) < 2 || strings.Join(got[1:], " ") != "run --config /etc/xdpfwd/%i.yaml --control /run/xdpfwd/%i.sock --pid-file /run/xdpfwd/%i.pid" {
		t.Fatalf("the unit's ExecStart=%s: the drop-in's is its, paths moved", u.get("Service", "ExecStart"))
	}
	sd := startSystemd(t, readFile(t, unitFile), inst, dropIn, map[string]string{"xdpfwd": xdpfwd(t), "test.yaml": cfg})
	log := func() string { b, _ := os.ReadFile(sd.path("daemon.log")); return string(b) }
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the daemons' log:\n%s\nsystemctl status:\n%s", log(), sd.systemctl("status", unit, "--no-pager"))
		}
	})
	pidFile := fmt.Sprintf("/proc/%d/root/run/xdpfwd/%s.pid", sd.pid, inst)
	mainPID := func() int { n, _ := strconv.Atoi(sd.show(unit, "MainPID")); return n }
	waitActive := func(why string, not int) int {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			pid := mainPID()
			b, _ := os.ReadFile(pidFile)
			if sd.show(unit, "ActiveState") == "active" && pid != 0 && pid != not && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
				return pid
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: unit %s, main PID %d (want other than %d), PID file %q", why, sd.show(unit, "ActiveState"), pid, not, b)
			}
		}
	}
	first := waitActive("start", 0)
	if st := sd.show(unit, "StatusText"); st != "forwarding xconnect on "+p.LinkA+" "+p.LinkB {
		t.Errorf("status %q at start", st)
	}
	s, err := topo.StartSeqStream(p.A, p.B, p.V4A, p.V4B, 20_000, 64, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(0)
	time.Sleep(200 * time.Millisecond)

	sd.systemctl("kill", "-s", "SIGUSR2", "--kill-whom=main", unit)
	second := waitActive("SIGUSR2", first)
	if st := sd.show(unit, "StatusText"); st != fmt.Sprintf("handed over to pid %d", second) {
		t.Errorf("status %q after the handover", st)
	}

	// An upgrade: the binary replaced, then a reload.
	data, err := os.ReadFile(xdpfwd(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sd.path("xdpfwd.new"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(sd.path("xdpfwd.new"), sd.path("xdpfwd")); err != nil {
		t.Fatal(err)
	}
	sd.systemctl("reload", unit)
	third := waitActive("reload after an upgrade", second)
	if !strings.Contains(log(), "was replaced") {
		t.Errorf("the log does not say the binary was replaced")
	}

	// A change no handover carries: the reload leaves it as it was.
	writeCfg(sd.path("test.yaml"), "ring-size: 1024\n")
	mark := len(log())
	sd.systemctl("reload", unit)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log()[mark:], "the successor exited without taking over; going on"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a reload with ring-size changed: no word of the refused successor")
		}
	}
	if pid, st := mainPID(), sd.show(unit, "ActiveState"); pid != third || st != "active" {
		t.Errorf("after a refused handover: main PID %d (was %d), %s", pid, third, st)
	}
	writeCfg(sd.path("test.yaml"), "")

	res, err := s.Stop(50 * time.Millisecond)
	if err != nil {
		t.Error(err)
	}
	t.Logf("across 2 handovers and a refusal under systemd: %d sent, %d received, %d lost, %d reordered, longest silence %v",
		res.Sent, res.Received, res.Lost, res.Reordered, res.MaxGap)
	if res.Received == 0 || res.Lost != 0 || res.Reordered != 0 || res.Duplicates != 0 {
		t.Errorf("the stream lost %d, reordered %d, duplicated %d of %d", res.Lost, res.Reordered, res.Duplicates, res.Sent)
	}

	sd.systemctl("stop", unit)
	if r, code, st := sd.show(unit, "Result"), sd.show(unit, "ExecMainStatus"), sd.show(unit, "ActiveState"); r != "success" || code != "0" || st != "inactive" {
		t.Errorf("systemctl stop: Result=%s ExecMainStatus=%s ActiveState=%s; want success, 0, inactive", r, code, st)
	}
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Errorf("the PID file after the stop: %v; want it removed", err)
	}
	for _, name := range []string{p.LinkA, p.LinkB} {
		if l, err := netlink.LinkByName(name); err != nil || l.Attrs().Xdp != nil && l.Attrs().Xdp.ProgId != 0 {
			t.Errorf("%s after the stop: %v, an XDP program left attached", name, err)
		}
	}
}
