// Package deploy_test checks the deployment files in deploy/ against the
// binary they run: the capabilities are exactly those xdpfwd checks for,
// every config key is a flag of `xdpfwd run`, and the metrics port, the
// Prometheus annotations and the probes agree.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xdpfwd/xdpfwd/fwd"
)

const (
	unitFile      = "systemd/xdpfwd@.service"
	exampleConfig = "systemd/example.yaml"
	sysusersFile  = "systemd/xdpfwd.sysusers"
	manifestFile  = "kubernetes/daemonset.yaml"

	unitBinary = "/usr/local/bin/xdpfwd"
)

// Names no interface can have (longer than IFNAMSIZ-1): a config check
// run with them can never touch a real link, even as root.
var noLinks = []string{"--link=no-such-link-deploy-test-a", "--link=no-such-link-deploy-test-b", "--link=no-such-link-deploy-test-c"}

// ---- the binary ----

var (
	buildOnce sync.Once
	buildDir  string
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// xdpfwd builds cmd/xdpfwd once per test binary and returns its path.
func xdpfwd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "xdpfwd-deploy-test-"); buildErr != nil {
			return
		}
		binPath = filepath.Join(buildDir, "xdpfwd")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/xdpfwd")
		cmd.Dir = ".."                                  // the module root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as deploy/image builds it
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/xdpfwd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

var (
	flagsOnce sync.Once
	runFlags  map[string]bool
	flagsErr  error
)

// xdpfwdRunFlags returns the flag names `xdpfwd run --help` lists.
func xdpfwdRunFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin := xdpfwd(t)
	flagsOnce.Do(func() {
		var out bytes.Buffer
		cmd := exec.Command(bin, "run", "--help")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			flagsErr = fmt.Errorf("xdpfwd run --help: %v\n%s", err, out.Bytes())
			return
		}
		runFlags = map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^  --?([a-z][a-z0-9-]*)`).FindAllStringSubmatch(out.String(), -1) {
			runFlags[m[1]] = true
		}
		// Sanity: the parse found the flags these files rely on.
		for _, f := range []string{"link", "config", "metrics", "queues"} {
			if !runFlags[f] {
				flagsErr = fmt.Errorf("flag --%s not found in `xdpfwd run --help`:\n%s", f, out.Bytes())
			}
		}
	})
	if flagsErr != nil {
		t.Fatal(flagsErr)
	}
	return runFlags
}

// checkConfig checks an xdpfwd YAML config: it parses, every key is a flag
// of `xdpfwd run` (not "config"), and xdpfwd itself accepts every value.
// For the last, it runs `xdpfwd run args... --config FILE` with three
// impossible links on the command line (which override the file's): a
// config xdpfwd accepts gets as far as counting the links, and fails there
// with exit code 2, before anything touches the system. args may contain
// CONFIG, replaced by the config's path; without it --config FILE is added.
func checkConfig(t *testing.T, name string, data []byte, args ...string) {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: not YAML: %v", name, err)
	}
	if len(cfg) == 0 {
		t.Fatalf("%s: no settings", name)
	}
	flags := xdpfwdRunFlags(t)
	for k := range cfg {
		if !flags[k] || k == "config" {
			t.Errorf("%s: key %q is not a flag of `xdpfwd run`", name, k)
		}
	}
	if links, ok := cfg["link"].([]any); !ok || len(links) != 2 {
		t.Errorf("%s: link: %v, want a list of two links", name, cfg["link"])
	}

	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	var argv []string
	replaced := false
	for _, a := range args {
		if strings.Contains(a, "CONFIG") {
			a, replaced = strings.ReplaceAll(a, "CONFIG", path), true
		}
		argv = append(argv, a)
	}
	if !replaced {
		argv = append(argv, "--config", path)
	}
	argv = append(argv, noLinks...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, xdpfwd(t), argv...)
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	msg := stderr.String()
	switch {
	case !errors.As(err, &ee) || ee.ExitCode() != 2:
		t.Errorf("%s: xdpfwd %s: %v, want exit code 2 (too many links)\n%s", name, strings.Join(argv, " "), err, msg)
	case !strings.Contains(msg, "--link") || strings.Contains(msg, "--config"):
		t.Errorf("%s: xdpfwd rejects the config or the flags, not (only) the three links:\n%s", name, msg)
	}
}

func requiredCaps(t *testing.T, prefix bool) []string {
	t.Helper()
	var caps []string
	for _, c := range fwd.RequiredCapabilities() {
		if !strings.HasPrefix(c, "CAP_") {
			t.Fatalf("fwd.RequiredCapabilities: %q has no CAP_ prefix", c)
		}
		if !prefix {
			c = strings.TrimPrefix(c, "CAP_")
		}
		caps = append(caps, c)
	}
	if len(caps) == 0 {
		t.Fatal("fwd.RequiredCapabilities is empty")
	}
	slices.Sort(caps)
	return caps
}

// sameSet reports whether a and b hold the same elements, each once.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b) && len(slices.Compact(a)) == len(b)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ---- systemd ----

// unit is a parsed systemd unit file: section → key → values in order.
type unit map[string]map[string][]string

// get returns the last value of a key ("" if unset), as systemd does for
// single-valued settings.
func (u unit) get(section, key string) string {
	vs := u[section][key]
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// parseUnit parses systemd's INI dialect: [Section], Key=Value, comments
// starting with # or ;, and lines continued with a trailing backslash.
func parseUnit(data []byte) (unit, error) {
	u := unit{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	lineNo, cont := 0, ""
	for sc.Scan() {
		lineNo++
		line := strings.TrimSpace(sc.Text())
		if cont == "" && (line == "" || line[0] == '#' || line[0] == ';') {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cont += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		line, cont = cont+line, ""
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") {
				return nil, fmt.Errorf("line %d: bad section header %q", lineNo, line)
			}
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			return nil, fmt.Errorf("line %d: %q is not Key=Value in a section", lineNo, line)
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		u[section][k] = append(u[section][k], v)
	}
	if cont != "" {
		return nil, errors.New("file ends in a continued line")
	}
	return u, sc.Err()
}

func loadUnit(t *testing.T) unit {
	t.Helper()
	u, err := parseUnit(readFile(t, unitFile))
	if err != nil {
		t.Fatalf("%s: %v", unitFile, err)
	}
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			t.Fatalf("%s: no [%s] section", unitFile, s)
		}
	}
	return u
}

func TestSystemdUnit(t *testing.T) {
	u := loadUnit(t)
	want := requiredCaps(t, true)
	for _, key := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		if n := len(u["Service"][key]); n != 1 {
			t.Errorf("%s= appears %d times, want once (several lines add up)", key, n)
		}
		got := strings.Fields(u.get("Service", key))
		if !sameSet(got, want) {
			t.Errorf("%s=%s, want exactly %s (fwd.RequiredCapabilities)", key, strings.Join(got, " "), strings.Join(want, " "))
		}
	}

	execStart := strings.Fields(u.get("Service", "ExecStart"))
	if len(execStart) < 2 || execStart[0] != unitBinary || execStart[1] != "run" {
		t.Errorf("ExecStart=%s, want %s run ...", u.get("Service", "ExecStart"), unitBinary)
	}
	if cfg := flagValue(execStart, "config"); cfg != "/etc/xdpfwd/%i.yaml" {
		t.Errorf("ExecStart --config %q, want /etc/xdpfwd/%%i.yaml (the instance names the config)", cfg)
	}
	if flagValue(execStart, "metrics") != "" {
		t.Errorf("ExecStart sets --metrics: every instance would bind the same port; it belongs in the config")
	}

	reload := strings.Fields(u.get("Service", "ExecReload"))
	if len(reload) < 3 || filepath.Base(reload[0]) != "kill" || !slices.ContainsFunc(reload[1:], func(a string) bool {
		return strings.TrimPrefix(a, "-") == "HUP" || strings.TrimPrefix(a, "-") == "SIGHUP"
	}) || reload[len(reload)-1] != "$MAINPID" {
		t.Errorf("ExecReload=%s, want /bin/kill -HUP $MAINPID", u.get("Service", "ExecReload"))
	}

	for _, kv := range [][3]string{
		{"Service", "Type", "notify"},
		{"Service", "NotifyAccess", "main"},
		{"Service", "LimitMEMLOCK", "infinity"},
		{"Service", "Restart", "on-failure"},
		{"Service", "KillSignal", "SIGTERM"},
		{"Service", "NoNewPrivileges", "yes"},
		{"Service", "ProtectSystem", "strict"},
		{"Service", "ProtectHome", "yes"},
		{"Service", "PrivateTmp", "yes"},
		{"Service", "StandardOutput", "journal"},
	} {
		if got := u.get(kv[0], kv[1]); got != kv[2] {
			t.Errorf("[%s] %s=%q, want %q", kv[0], kv[1], got, kv[2])
		}
	}
	for _, kv := range [][2]string{{"Service", "RestartSec"}, {"Unit", "StartLimitIntervalSec"}, {"Unit", "StartLimitBurst"}} {
		if u.get(kv[0], kv[1]) == "" {
			t.Errorf("[%s] %s= is not set", kv[0], kv[1])
		}
	}
	if d, err := time.ParseDuration(u.get("Service", "TimeoutStopSec")); err != nil || d < 10*time.Second {
		t.Errorf("TimeoutStopSec=%q: want a duration of at least 10s to cover the drain", u.get("Service", "TimeoutStopSec"))
	}
	if usr := u.get("Service", "User"); usr == "" || usr == "root" || usr == "0" {
		t.Errorf("User=%q: want a dedicated non-root user (the capabilities are ambient)", usr)
	}
	// Settings that would cut xdpfwd off from the links or the kernel.
	for _, k := range []string{"PrivateNetwork", "PrivateUsers", "DynamicUser", "SystemCallFilter", "IPAddressDeny", "NetworkNamespacePath"} {
		if v := u.get("Service", k); v != "" && v != "no" {
			t.Errorf("%s=%s: must not be set for xdpfwd", k, v)
		}
	}
	fams := strings.Fields(u.get("Service", "RestrictAddressFamilies"))
	// AF_PACKET: the promiscuous membership (internal/promisc).
	for _, f := range []string{"AF_XDP", "AF_NETLINK", "AF_INET", "AF_UNIX", "AF_PACKET"} {
		if !slices.Contains(fams, f) {
			t.Errorf("RestrictAddressFamilies=%s lacks %s", strings.Join(fams, " "), f)
		}
	}
	if slices.ContainsFunc(fams, func(f string) bool { return strings.HasPrefix(f, "~") }) {
		t.Errorf("RestrictAddressFamilies=%s: want an allow-list", strings.Join(fams, " "))
	}
}

// flagValue returns the value of --name (as --name=V or --name V) in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		for _, p := range []string{"--" + name, "-" + name} {
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v
			}
			if a == p && i+1 < len(args) {
				return args[i+1]
			}
		}
	}
	return ""
}

func TestSystemdSysusers(t *testing.T) {
	usr := loadUnit(t).get("Service", "User")
	var users []string
	for _, line := range strings.Split(string(readFile(t, sysusersFile)), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "u" {
			users = append(users, f[1])
		}
	}
	if !slices.Contains(users, usr) {
		t.Errorf("%s creates users %v; the unit runs as User=%s", sysusersFile, users, usr)
	}
}

// TestSystemdExampleConfig runs the example config through xdpfwd as the
// unit would start it.
func TestSystemdExampleConfig(t *testing.T) {
	execStart := strings.Fields(loadUnit(t).get("Service", "ExecStart"))
	var args []string
	for _, a := range execStart[1:] {
		args = append(args, strings.ReplaceAll(a, "/etc/xdpfwd/%i.yaml", "CONFIG"))
	}
	data := readFile(t, exampleConfig)
	checkConfig(t, exampleConfig, data, args...)

	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if addr, _ := cfg["metrics"].(string); !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("%s: metrics %q, want a loopback address", exampleConfig, addr)
	}
}

// TestSystemdAnalyzeVerify runs `systemd-analyze verify` on an instance of
// the unit whose ExecStart points at the freshly built binary (verify
// insists that the binary exists). Skipped without systemd-analyze.
func TestSystemdAnalyzeVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	data := bytes.ReplaceAll(readFile(t, unitFile), []byte(unitBinary+" "), []byte(xdpfwd(t)+" "))
	dir := t.TempDir()
	path := filepath.Join(dir, "xdpfwd@example.service")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// verify exits 0 on unknown keys or values it ignores; it prints them.
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, dir) || strings.Contains(line, "xdpfwd@") {
			t.Errorf("systemd-analyze verify: %s", line)
		} else if line != "" {
			t.Logf("systemd-analyze verify (not about this unit): %s", line)
		}
	}
}

// ---- Kubernetes ----

type objectMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"` // a number or a port name
	} `yaml:"httpGet"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []envVar `yaml:"env"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
		Protocol      string `yaml:"protocol"`
	} `yaml:"ports"`
	StartupProbe   *probe `yaml:"startupProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *struct {
		Privileged               *bool  `yaml:"privileged"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		Capabilities             *struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type daemonSet struct {
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		UpdateStrategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxSurge       any `yaml:"maxSurge"`
				MaxUnavailable any `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"updateStrategy"`
		MinReadySeconds int `yaml:"minReadySeconds"`
		Template        struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     struct {
				HostNetwork                   bool        `yaml:"hostNetwork"`
				HostPID                       bool        `yaml:"hostPID"`
				TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
				Containers                    []container `yaml:"containers"`
				InitContainers                []container `yaml:"initContainers"`
				Volumes                       []struct {
					Name     string `yaml:"name"`
					HostPath *struct {
						Path string `yaml:"path"`
						Type string `yaml:"type"`
					} `yaml:"hostPath"`
					ConfigMap *struct {
						Name  string `yaml:"name"`
						Items []struct {
							Key  string `yaml:"key"`
							Path string `yaml:"path"`
						} `yaml:"items"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type configMap struct {
	Metadata objectMeta        `yaml:"metadata"`
	Data     map[string]string `yaml:"data"`
}

type manifest struct {
	kinds []string
	ns    map[string]objectMeta // Namespace objects by name
	ds    daemonSet
	cm    configMap
}

func loadManifest(t *testing.T) manifest {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, manifestFile)))
	m := manifest{ns: map[string]objectMeta{}}
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: document %d: %v", manifestFile, i, err)
		}
		if len(doc.Content) == 0 { // an empty document (a leading ---)
			continue
		}
		var head struct {
			APIVersion string     `yaml:"apiVersion"`
			Kind       string     `yaml:"kind"`
			Metadata   objectMeta `yaml:"metadata"`
		}
		if err := doc.Decode(&head); err != nil {
			t.Fatalf("%s: document %d: %v", manifestFile, i, err)
		}
		if head.APIVersion == "" || head.Kind == "" || head.Metadata.Name == "" {
			t.Fatalf("%s: document %d lacks apiVersion, kind or metadata.name", manifestFile, i)
		}
		m.kinds = append(m.kinds, head.Kind)
		var err error
		switch head.Kind {
		case "Namespace":
			m.ns[head.Metadata.Name] = head.Metadata
		case "DaemonSet":
			if head.APIVersion != "apps/v1" {
				t.Errorf("DaemonSet apiVersion %q, want apps/v1", head.APIVersion)
			}
			err = doc.Decode(&m.ds)
		case "ConfigMap":
			err = doc.Decode(&m.cm)
		default:
			t.Errorf("%s: unexpected kind %s", manifestFile, head.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", manifestFile, head.Kind, err)
		}
	}
	for _, k := range []string{"DaemonSet", "ConfigMap"} {
		if n := countOf(m.kinds, k); n != 1 {
			t.Fatalf("%s: %d %s objects, want 1 (kinds: %v)", manifestFile, n, k, m.kinds)
		}
	}
	if len(m.ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("DaemonSet: %d containers, want 1", len(m.ds.Spec.Template.Spec.Containers))
	}
	return m
}

// checkHandoverUpdate holds a DaemonSet to updates that lose nothing:
// the new pod starts beside the old one (maxSurge 1, maxUnavailable 0)
// and takes its datapath over (--takeover=auto), the old one waits to be
// deleted (--after-handover=wait: exiting, it would be restarted and
// take the datapath back), and is deleted only once the new one has been
// Ready a while (minReadySeconds: Ready alone may be the old one's
// answer on the node's port).
func checkHandoverUpdate(t *testing.T, ds daemonSet, c container) {
	t.Helper()
	u := ds.Spec.UpdateStrategy
	if u.Type != "RollingUpdate" || fmt.Sprint(u.RollingUpdate.MaxSurge) != "1" || fmt.Sprint(u.RollingUpdate.MaxUnavailable) != "0" {
		t.Errorf("%s: updateStrategy %+v: want RollingUpdate with maxSurge 1, maxUnavailable 0 (the new pod takes over from the old)", ds.Metadata.Name, u)
	}
	if ds.Spec.MinReadySeconds < 5 {
		t.Errorf("%s: minReadySeconds %d: want at least 5 (the handover ends within a second of the new container's start)", ds.Metadata.Name, ds.Spec.MinReadySeconds)
	}
	if flagValue(c.Args, "takeover") != "auto" || flagValue(c.Args, "after-handover") != "wait" {
		t.Errorf("%s: args %v: want --takeover=auto and --after-handover=wait", ds.Metadata.Name, c.Args)
	}
}

func countOf(s []string, v string) int {
	n := 0
	for _, e := range s {
		if e == v {
			n++
		}
	}
	return n
}

func (m manifest) container() container { return m.ds.Spec.Template.Spec.Containers[0] }

func TestKubernetesObjects(t *testing.T) {
	m := loadManifest(t)
	ns := m.ds.Metadata.Namespace
	if m.cm.Metadata.Namespace != ns {
		t.Errorf("ConfigMap in namespace %q, DaemonSet in %q", m.cm.Metadata.Namespace, ns)
	}
	if meta, ok := m.ns[ns]; ok {
		// hostNetwork and added capabilities are beyond "baseline".
		if lvl := meta.Labels["pod-security.kubernetes.io/enforce"]; lvl != "privileged" {
			t.Errorf("Namespace %s: pod-security.kubernetes.io/enforce=%q, want privileged", ns, lvl)
		}
	}
	sel := m.ds.Spec.Selector.MatchLabels
	if len(sel) == 0 {
		t.Error("DaemonSet has no selector")
	}
	for k, v := range sel {
		if m.ds.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod template's labels", k, v)
		}
	}
	pod := m.ds.Spec.Template.Spec
	if !pod.HostNetwork {
		t.Error("hostNetwork is not true: xdpfwd would see the pod's links, not the node's")
	}
	if pod.HostPID {
		t.Error("hostPID is set; xdpfwd does not need it")
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 10 {
		t.Error("terminationGracePeriodSeconds: want at least 10 s for the drain")
	}
	c := m.container()
	if !strings.HasPrefix(c.Image, "ghcr.io/xdpfwd/xdpfwd:") {
		t.Errorf("image %q, want ghcr.io/xdpfwd/xdpfwd:VERSION", c.Image)
	}
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("args %v, want run ...", c.Args)
	}
	checkHandoverUpdate(t, m.ds, c)
	if c.Resources.Requests["memory"] == "" || c.Resources.Limits["memory"] == "" {
		t.Error("memory requests and limits must be set: the UMEM is pinned")
	}
}

func TestKubernetesSecurityContext(t *testing.T) {
	c := loadManifest(t).container()
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged: true; the four capabilities are enough")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation: want false")
	}
	if sc.RunAsUser == nil || *sc.RunAsUser != 0 {
		t.Error("runAsUser: want an explicit 0 (added capabilities are effective only for UID 0)")
	}
	if want := requiredCaps(t, false); !sameSet(sc.Capabilities.Add, want) {
		t.Errorf("capabilities.add %v, want exactly %v (fwd.RequiredCapabilities)", sc.Capabilities.Add, want)
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) {
		t.Errorf("capabilities.drop %v, want [ALL]", sc.Capabilities.Drop)
	}
}

// metricsPort returns the port of the container's --metrics address.
func metricsPort(t *testing.T, c container) int {
	t.Helper()
	addr := flagValue(c.Args, "metrics")
	if addr == "" {
		t.Fatalf("args %v: no --metrics", c.Args)
	}
	i := strings.LastIndex(addr, ":")
	port, err := strconv.Atoi(addr[i+1:])
	if i < 0 || err != nil || port <= 0 {
		t.Fatalf("--metrics %q: no port", addr)
	}
	return port
}

// resolvePort turns a probe's port (number or name) into a number.
func resolvePort(c container, p any) (int, bool) {
	switch p := p.(type) {
	case int:
		return p, true
	case string:
		for _, cp := range c.Ports {
			if cp.Name == p {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func TestKubernetesMetricsAndProbes(t *testing.T) {
	m := loadManifest(t)
	c := m.container()
	port := metricsPort(t, c)

	found := false
	for _, cp := range c.Ports {
		if cp.ContainerPort == port {
			found = true
		}
	}
	if !found {
		t.Errorf("no containerPort %d (the --metrics port) in %+v", port, c.Ports)
	}
	ann := m.ds.Spec.Template.Metadata.Annotations
	for k, want := range map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   strconv.Itoa(port),
		"prometheus.io/path":   "/metrics",
	} {
		if ann[k] != want {
			t.Errorf("pod template annotation %s=%q, want %q", k, ann[k], want)
		}
	}
	if m.ds.Metadata.Annotations["prometheus.io/scrape"] != "" {
		t.Error("prometheus.io annotations belong on the pod template, not the DaemonSet")
	}

	probes := map[string]*probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe}
	for name, p := range probes {
		if p == nil {
			if name != "startupProbe" {
				t.Errorf("no %s", name)
			}
			continue
		}
		if p.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe", name)
			continue
		}
		if p.HTTPGet.Path != "/healthz" {
			t.Errorf("%s: path %q, want /healthz", name, p.HTTPGet.Path)
		}
		if got, ok := resolvePort(c, p.HTTPGet.Port); !ok || got != port {
			t.Errorf("%s: port %v, want the metrics port %d", name, p.HTTPGet.Port, port)
		}
	}

	// Every $(VAR) in the args must be defined, or Kubernetes passes it
	// through literally.
	for _, mm := range regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).FindAllStringSubmatch(strings.Join(c.Args, " "), -1) {
		if !slices.ContainsFunc(c.Env, func(e envVar) bool { return e.Name == mm[1] }) {
			t.Errorf("args use $(%s), which env does not define", mm[1])
		}
	}
}

func TestKubernetesConfigMap(t *testing.T) {
	m := loadManifest(t)
	c := m.container()
	cfgPath := flagValue(c.Args, "config")
	if cfgPath == "" {
		t.Fatalf("args %v: no --config", c.Args)
	}

	// The file --config names must be the ConfigMap's key, mounted whole.
	var key string
	for _, vm := range c.VolumeMounts {
		for _, v := range m.ds.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil || v.ConfigMap.Name != m.cm.Metadata.Name {
				continue
			}
			if vm.SubPath != "" {
				t.Errorf("volumeMount %s uses subPath: ConfigMap updates would never reach it", vm.Name)
			}
			for _, it := range v.ConfigMap.Items {
				if filepath.Join(vm.MountPath, it.Path) == cfgPath {
					key = it.Key
				}
			}
			if len(v.ConfigMap.Items) == 0 && filepath.Dir(cfgPath) == filepath.Clean(vm.MountPath) {
				key = filepath.Base(cfgPath)
			}
		}
	}
	if key == "" {
		t.Fatalf("--config %s is not a file of ConfigMap %s mounted in the container", cfgPath, m.cm.Metadata.Name)
	}
	if key != "xdpfwd.yaml" || cfgPath != "/etc/xdpfwd/xdpfwd.yaml" {
		t.Errorf("config key %q at %s, want xdpfwd.yaml at /etc/xdpfwd/xdpfwd.yaml", key, cfgPath)
	}
	data, ok := m.cm.Data[key]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %q", m.cm.Metadata.Name, key)
	}

	// The config as the container would start with it.
	args := slices.Clone(c.Args)
	for i, a := range args {
		a = strings.ReplaceAll(a, "$(POD_IP)", "127.0.0.1")
		args[i] = strings.ReplaceAll(a, cfgPath, "CONFIG")
	}
	checkConfig(t, "ConfigMap "+m.cm.Metadata.Name, []byte(data), args...)

	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg["metrics"]; ok {
		t.Error("the ConfigMap sets metrics; the args do, next to the ports and probes")
	}
	// The config must bound the memory: queues 0 means a worker per CPU.
	// Each worker pins at most about 28 MiB of UMEM whatever the NIC's
	// queue count (fwd's TestUMEMBoundedByWorkers), plus 2 MiB of inline
	// slots; the Go runtime adds some 20 MiB.
	q, _ := cfg["queues"].(int)
	if q <= 0 {
		t.Fatalf("queues %v: set it, or memory grows with the NIC's queue count past the limit", cfg["queues"])
	}
	need := int64(q*28+2+20) << 20
	if lim := parseQuantity(t, c.Resources.Limits["memory"]); lim < need {
		t.Errorf("memory limit %s below the %d MiB that %d queues need", c.Resources.Limits["memory"], need>>20, q)
	}
	if req := parseQuantity(t, c.Resources.Requests["memory"]); req < need {
		t.Errorf("memory request %s below the %d MiB that %d queues need", c.Resources.Requests["memory"], need>>20, q)
	}
	if _, ok := cfg["wait-for-links"]; ok {
		t.Error("wait-for-links in the ConfigMap: /healthz is not served while waiting, so the liveness probe would restart the pod anyway")
	}
}

// parseQuantity parses the Kubernetes memory quantities used here.
func parseQuantity(t *testing.T, s string) int64 {
	t.Helper()
	for suffix, mult := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if v, ok := strings.CutSuffix(s, suffix); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("quantity %q: %v", s, err)
			}
			return n * mult
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("quantity %q: want N, NKi, NMi or NGi", s)
	}
	return n
}

// TestControlSocket: the unit gives each instance a control socket in its
// runtime directory, kept while another instance runs; the DaemonSet puts
// the default socket directory on the node (a host path), so that
// `xdpfwd capture` there reaches the pod.
func TestControlSocket(t *testing.T) {
	u := loadUnit(t)
	if got := u.get("Service", "RuntimeDirectory"); got != "xdpfwd" {
		t.Errorf("RuntimeDirectory=%q, want xdpfwd (/run/xdpfwd, writable under ProtectSystem=strict)", got)
	}
	if got := u.get("Service", "RuntimeDirectoryPreserve"); got != "yes" {
		t.Errorf("RuntimeDirectoryPreserve=%q, want yes: one instance stopping would remove the others' sockets", got)
	}
	ctl := flagValue(strings.Fields(u.get("Service", "ExecStart")), "control")
	if ctl != "/run/xdpfwd/%i.sock" {
		t.Errorf("ExecStart --control %q, want /run/xdpfwd/%%i.sock (one per instance, in the RuntimeDirectory)", ctl)
	}

	m := loadManifest(t)
	var vol string
	for _, v := range m.ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil && v.HostPath.Path == "/run/xdpfwd" {
			vol = v.Name
			if v.HostPath.Type != "DirectoryOrCreate" {
				t.Errorf("hostPath /run/xdpfwd of type %q, want DirectoryOrCreate", v.HostPath.Type)
			}
		}
	}
	if vol == "" {
		t.Fatal("no hostPath volume for /run/xdpfwd: xdpfwd capture on the node cannot reach the pod")
	}
	c := m.container()
	mounted := false
	for _, vm := range c.VolumeMounts {
		mounted = mounted || vm.Name == vol && vm.MountPath == "/run/xdpfwd"
	}
	if !mounted {
		t.Errorf("volume %s is not mounted at /run/xdpfwd (the default --control directory; the root file system is read-only)", vol)
	}
	if ctl := flagValue(c.Args, "control"); ctl != "" && !strings.HasPrefix(ctl, "/run/xdpfwd/") {
		t.Errorf("--control %q outside the host path /run/xdpfwd", ctl)
	}
}
