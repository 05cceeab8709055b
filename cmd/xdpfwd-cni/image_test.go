package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/topo"
)

const cniManifest = "../../deploy/kubernetes/xdpfwd-cni.yaml"

// podManifest is what a kubelet reads of xdpfwd-cni.yaml to run its
// DaemonSet's pod on a node: the ConfigMap's files and the pod spec.
type podManifest struct {
	namespace   string
	configMap   map[string]string
	hostNetwork bool
	containers  []specContainer
	volumes     map[string]specVolume
}

type specContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Resources struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	StartupProbe *struct {
		HTTPGet struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	} `yaml:"startupProbe"`
	SecurityContext struct {
		Privileged               bool   `yaml:"privileged"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		RunAsGroup               *int64 `yaml:"runAsGroup"`
		ReadOnlyRootFilesystem   bool   `yaml:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
		SeccompProfile struct {
			Type string `yaml:"type"`
		} `yaml:"seccompProfile"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type specVolume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
	} `yaml:"hostPath"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

func loadPodManifest(t *testing.T) podManifest {
	t.Helper()
	b, err := os.ReadFile(cniManifest)
	if err != nil {
		t.Fatal(err)
	}
	m := podManifest{volumes: map[string]specVolume{}}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc struct {
			Kind     string `yaml:"kind"`
			Metadata struct {
				Namespace string `yaml:"namespace"`
			} `yaml:"metadata"`
			Data map[string]string `yaml:"data"`
			Spec struct {
				Template struct {
					Spec struct {
						HostNetwork    bool            `yaml:"hostNetwork"`
						InitContainers []specContainer `yaml:"initContainers"`
						Containers     []specContainer `yaml:"containers"`
						Volumes        []specVolume    `yaml:"volumes"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", cniManifest, err)
		}
		switch doc.Kind {
		case "ConfigMap":
			m.configMap = doc.Data
		case "DaemonSet":
			s := doc.Spec.Template.Spec
			if len(s.InitContainers) > 0 {
				t.Fatalf("%s: init containers: this test runs containers only", cniManifest)
			}
			m.namespace, m.hostNetwork, m.containers = doc.Metadata.Namespace, s.HostNetwork, s.Containers
			for _, v := range s.Volumes {
				m.volumes[v.Name] = v
			}
		}
	}
	if m.configMap == nil || len(m.containers) == 0 {
		t.Fatalf("%s: want a ConfigMap and a DaemonSet", cniManifest)
	}
	return m
}

// kubeletVar is $(NAME) in a container's args, which the kubelet expands
// from its environment.
var kubeletVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// criContainer is the CRI's ContainerConfig for c, as a kubelet makes
// it: its image, command and args (the environment's $(VAR) expanded,
// status.podIP being the node's address on a host network), its
// environment, its mounts (a hostPath volume's path on the node, a
// ConfigMap's files in cmDir), its security context, the node's network.
func (m podManifest) criContainer(t *testing.T, c specContainer, podIP, cmDir string) map[string]any {
	t.Helper()
	env := map[string]string{}
	var envs []any
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef.FieldPath != "status.podIP" {
				t.Fatalf("container %s: env %s from %s: not a field this test gives", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			v = podIP
		}
		env[e.Name] = v
		envs = append(envs, map[string]any{"key": e.Name, "value": v})
	}
	expand := func(args []string) []string {
		var out []string
		for _, a := range args {
			out = append(out, kubeletVar.ReplaceAllStringFunc(a, func(s string) string {
				if v, ok := env[kubeletVar.FindStringSubmatch(s)[1]]; ok {
					return v
				}
				return s
			}))
		}
		return out
	}
	var mounts []any
	for _, vm := range c.VolumeMounts {
		v, ok := m.volumes[vm.Name]
		var host string
		switch {
		case !ok:
			t.Fatalf("container %s: mount of volume %s, which the pod has not", c.Name, vm.Name)
		case v.HostPath != nil:
			host = v.HostPath.Path
		case v.ConfigMap != nil:
			host = cmDir
		default:
			t.Fatalf("volume %s: neither hostPath nor configMap", vm.Name)
		}
		mounts = append(mounts, map[string]any{"container_path": vm.MountPath, "host_path": host, "readonly": vm.ReadOnly})
	}
	sc := c.SecurityContext
	linuxSC := map[string]any{
		"capabilities":      map[string]any{"add_capabilities": sc.Capabilities.Add, "drop_capabilities": sc.Capabilities.Drop},
		"privileged":        sc.Privileged,
		"readonly_rootfs":   sc.ReadOnlyRootFilesystem,
		"no_new_privs":      sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation,
		"namespace_options": map[string]any{"network": criNamespaceNode(m.hostNetwork)},
	}
	if sc.RunAsUser != nil {
		linuxSC["run_as_user"] = map[string]any{"value": *sc.RunAsUser}
	}
	if sc.RunAsGroup != nil {
		linuxSC["run_as_group"] = map[string]any{"value": *sc.RunAsGroup}
	}
	if sc.SeccompProfile.Type == "RuntimeDefault" {
		linuxSC["seccomp"] = map[string]any{"profile_type": 0} // RuntimeDefault
	}
	linux := map[string]any{"security_context": linuxSC}
	if q, ok := c.Resources.Limits["memory"]; ok {
		linux["resources"] = map[string]any{"memory_limit_in_bytes": memoryQuantity(t, q)}
	}
	return map[string]any{
		"metadata": map[string]any{"name": c.Name, "attempt": 0},
		"image":    map[string]any{"image": c.Image},
		"command":  c.Command,
		"args":     expand(c.Args),
		"envs":     envs,
		"mounts":   mounts,
		"log_path": c.Name + ".log",
		"linux":    linux,
	}
}

// memoryQuantity is a Kubernetes memory quantity ("256Mi") in bytes.
func memoryQuantity(t *testing.T, q string) int64 {
	t.Helper()
	for suffix, unit := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if n, err := strconv.ParseInt(strings.TrimSuffix(q, suffix), 10, 64); strings.HasSuffix(q, suffix) && err == nil {
			return n * unit
		}
	}
	t.Fatalf("memory quantity %q: want NKi, NMi or NGi", q)
	return 0
}

// criNamespaceNode is the CRI's NamespaceMode for a pod on the host's
// network (NODE) or its own (POD).
func criNamespaceNode(host bool) int {
	if host {
		return 2
	}
	return 0
}

// TestImageUnderCRI: the image the repository builds (go run
// ./deploy/image, FROM nothing: no registry), run by containerd's CRI as
// deploy/kubernetes/xdpfwd-cni.yaml's pod spec says, as a kubelet would:
// a host-network sandbox; the daemon container and the install-cni
// container with the spec's image, command and args (the kubelet's
// $(POD_IP) expanded to the node's address), environment, mounts (the
// ConfigMap's files, the node's /run/xdpfwd, /opt/cni/bin and
// /etc/cni/net.d: test directories bound over them in containerd's mount
// namespace, so that the host's are untouched), capabilities (NET_ADMIN,
// NET_RAW, BPF, IPC_LOCK, every other dropped), read-only root, UID 0,
// no_new_privs, the runtime's default seccomp profile and the memory
// limit. The probes'
// endpoint answers /healthz; the install container writes the plugin and
// the conflist; the CRI's network turns ready. Then two pods, sandboxes
// the CRI attaches through that conflist: they ping each other, and a
// host behind the uplink (the config's eth1), through the daemon in the
// container, and link list names them by namespace and name (the CRI's
// K8S_POD_* args). Their removal removes their links; the daemon's
// container stops on SIGTERM with exit 0, the uplink left without XDP.
func TestImageUnderCRI(t *testing.T) {
	topo.RequireRoot(t)
	bin := need(t, "containerd")
	need(t, "ctr")
	crictlBin := need(t, "crictl", "/root/go/bin/crictl", filepath.Join(os.Getenv("HOME"), "go/bin/crictl"))
	need(t, "runc", "/usr/sbin/runc")
	need(t, "nsenter")
	need(t, "unshare")
	busybox := need(t, "busybox", "/bin/busybox")
	if f, err := elf.Open(busybox); err != nil || slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
		t.Fatalf("%s: not a static executable (%v): install busybox-static", busybox, err)
	}
	m := loadPodManifest(t)
	var cfg struct {
		Link    []string `yaml:"link"`
		Control string   `yaml:"control"`
		Queues  int      `yaml:"queues"`
	}
	if err := yaml.Unmarshal([]byte(m.configMap["xdpfwd.yaml"]), &cfg); err != nil || len(cfg.Link) != 1 || cfg.Control == "" {
		t.Fatalf("the ConfigMap's xdpfwd.yaml: %v, %+v; want one link and a control socket", err, cfg)
	}
	var conflist struct {
		Plugins []struct {
			IPAM struct {
				Ranges [][]struct{ Subnet string } `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	json.Unmarshal([]byte(m.configMap["10-xdpfwd.conflist"]), &conflist)
	if len(conflist.Plugins) == 0 || len(conflist.Plugins[0].IPAM.Ranges) == 0 {
		t.Fatalf("the ConfigMap's conflist: no subnet")
	}
	subnet := netip.MustParsePrefix(conflist.Plugins[0].IPAM.Ranges[0][0].Subnet)
	dir := t.TempDir()
	begin := time.Now()

	// The image, as the repository builds it, and a sandbox image.
	start := time.Now()
	archive := filepath.Join(dir, "xdpfwd.tar")
	build := exec.Command("go", "run", "./deploy/image", "-version", "VERSION", "-o", archive)
	build.Dir = "../.."
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./deploy/image: %v\n%s", err, out)
	}
	t.Logf("go run ./deploy/image: %s (%v)", bytes.TrimSpace(out), time.Since(start).Round(time.Millisecond))
	const pauseRef = "docker.io/library/i41-pause:1"
	pause := filepath.Join(dir, "pause.tar")
	pauseImage(t, busybox, pause, "i41-pause:1")

	// The node: its uplink (the config's link) a veth, with the daemon's
	// queues, to a host behind it, in the pods' subnet.
	node, err := topo.NewNS("i41node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	behind, err := topo.NewNS("i41host")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { behind.Close() })
	uplink := cfg.Link[0]
	queues := strconv.Itoa(max(cfg.Queues, 1))
	a4 := subnet.Addr().As4()
	a4[3] = 250 // high in the subnet: host-local hands out from the bottom
	hostAddr := netip.AddrFrom4(a4)
	ipIn(t, node, []string{"link", "add", uplink, "numtxqueues", queues, "numrxqueues", queues, "type", "veth", "peer", "name", "eth0",
		"numtxqueues", queues, "numrxqueues", queues, "netns", behind.Name},
		[]string{"link", "set", uplink, "up"}, []string{"link", "set", "lo", "up"})
	ipIn(t, behind, []string{"addr", "add", hostAddr.String() + "/" + strconv.Itoa(subnet.Bits()), "dev", "eth0"},
		[]string{"link", "set", "eth0", "up"}, []string{"link", "set", "lo", "up"})
	const podIP = "127.0.0.1" // the node's address a host-network pod has (status.podIP)

	// The node's directories the pod spec names (its hostPath volumes),
	// and libcni's cache: the test's, bound over them in containerd's
	// mount namespace.
	nodeDirs := []string{"/var/lib/cni"}
	for _, v := range m.volumes {
		if v.HostPath != nil {
			nodeDirs = append(nodeDirs, v.HostPath.Path)
		}
	}
	slices.Sort(nodeDirs)
	for _, d := range []string{"/run/xdpfwd", "/opt/cni/bin", "/etc/cni/net.d"} {
		if !slices.Contains(nodeDirs, d) {
			t.Fatalf("%s: no hostPath volume %s (the control socket's, the plugins', the conflists' directory)", cniManifest, d)
		}
	}
	var binds []string
	bound := map[string]string{}
	for i, d := range nodeDirs {
		src := filepath.Join(dir, "node", strconv.Itoa(i))
		os.MkdirAll(src, 0o755)
		mountPoint(t, d)
		bound[d] = src
		binds = append(binds, fmt.Sprintf(`mount --bind %q %q`, src, d))
	}
	// The runtime's own plugins, on the node before any network.
	for _, p := range []string{"loopback", "host-local"} {
		if err := os.Symlink(need(t, p, "/usr/lib/cni/"+p), filepath.Join(bound["/opt/cni/bin"], p)); err != nil {
			t.Fatal(err)
		}
	}
	cmDir := filepath.Join(dir, "configmap")
	os.MkdirAll(cmDir, 0o755)
	for k, v := range m.configMap {
		if err := os.WriteFile(filepath.Join(cmDir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	cdDir := filepath.Join(dir, "containerd")
	t.Cleanup(func() { killLeftShims(t, filepath.Join(cdDir, "state", "io.containerd.runtime.v2.task", "k8s.io")) })
	criConf := criConfig(pauseRef, "/opt/cni/bin", "/etc/cni/net.d") // the node's, as bound
	cd, _ := runContainerd(t, cdDir, "", criConf, func(cfgPath string) *exec.Cmd {
		return exec.Command("nsenter", "--net="+nsPath(node), "unshare", "--mount", "--propagation", "private",
			"sh", "-c", strings.Join(binds, " && ")+` && exec "$0" --config "$1"`, bin, cfgPath)
	})
	cd.ns = "k8s.io"
	cri := newCrictl(t, crictlBin, cd)
	for _, a := range []string{archive, pause} {
		if _, err := cd.ctr("image", "import", a); err != nil {
			t.Fatal(err)
		}
	}

	// The DaemonSet's pod.
	logs := filepath.Join(dir, "logs")
	os.MkdirAll(logs, 0o755)
	podCfg := map[string]any{
		"metadata":      map[string]any{"name": "xdpfwd-cni-i41", "namespace": m.namespace, "uid": "i41-xdpfwd-uid", "attempt": 0},
		"log_directory": logs, // no hostname: the node's (its UTS namespace, with its network)
		"linux":         map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"network": criNamespaceNode(m.hostNetwork)}}},
	}
	podFile := writeJSON(t, filepath.Join(dir, "xdpfwd-pod.json"), podCfg)
	out2, err := cri.run("runp", podFile)
	if err != nil {
		t.Fatalf("%v\ncontainerd: %s", err, cd.log.String())
	}
	podSandbox := strings.TrimSpace(out2)
	var running []string
	t.Cleanup(func() {
		for _, c := range running {
			cri.run("stop", "-t", "10", c)
		}
		cri.run("stopp", podSandbox)
		cri.run("rmp", "-f", podSandbox)
	})
	ids := map[string]string{}
	for _, c := range m.containers {
		cc := writeJSON(t, filepath.Join(dir, c.Name+".json"), m.criContainer(t, c, podIP, cmDir))
		id, err := cri.run("create", podSandbox, cc, podFile)
		if err != nil {
			t.Fatalf("container %s: %v\ncontainerd: %s", c.Name, err, cd.log.String())
		}
		ids[c.Name] = strings.TrimSpace(id)
		if _, err := cri.run("start", ids[c.Name]); err != nil {
			t.Fatalf("container %s: %v\ncontainerd: %s", c.Name, err, cd.log.String())
		}
		running = append(running, ids[c.Name])
	}
	// What runc was told: the capabilities the spec adds and no other,
	// the memory limit, a read-only root, a seccomp profile.
	for _, c := range m.containers {
		out, err := cri.run("inspect", "-o", "json", ids[c.Name])
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Info struct {
				RuntimeSpec struct {
					Process struct {
						Capabilities struct{ Effective []string }
					}
					Root  struct{ Readonly bool }
					Linux struct {
						Resources struct {
							Memory struct{ Limit int64 }
						}
						Seccomp *struct{ DefaultAction string }
					}
				}
			}
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("crictl inspect %s: %v", c.Name, err)
		}
		spec := st.Info.RuntimeSpec
		var want []string
		for _, a := range c.SecurityContext.Capabilities.Add {
			want = append(want, "CAP_"+a)
		}
		got := slices.Sorted(slices.Values(spec.Process.Capabilities.Effective))
		slices.Sort(want)
		if !slices.Equal(got, want) || spec.Root.Readonly != c.SecurityContext.ReadOnlyRootFilesystem ||
			spec.Linux.Resources.Memory.Limit != memoryQuantity(t, c.Resources.Limits["memory"]) ||
			(spec.Linux.Seccomp != nil) != (c.SecurityContext.SeccompProfile.Type == "RuntimeDefault") {
			t.Errorf("container %s: capabilities %v, read-only root %v, memory limit %d, seccomp %v; want %v, %v, %s, %s", c.Name, got, spec.Root.Readonly,
				spec.Linux.Resources.Memory.Limit, spec.Linux.Seccomp, want, c.SecurityContext.ReadOnlyRootFilesystem, c.Resources.Limits["memory"], c.SecurityContext.SeccompProfile.Type)
		}
	}
	containerLog := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(logs, name+".log"))
		return string(b)
	}

	// The probes' endpoint, as the kubelet asks it, within the startup
	// probe's patience.
	var daemon specContainer
	for _, c := range m.containers {
		if c.StartupProbe != nil {
			daemon = c
		}
	}
	if daemon.Name == "" || len(daemon.Ports) == 0 {
		t.Fatalf("%s: no container with a startup probe and a port", cniManifest)
	}
	if p := fmt.Sprint(daemon.StartupProbe.HTTPGet.Port); p != daemon.Ports[0].Name && p != strconv.Itoa(daemon.Ports[0].ContainerPort) {
		t.Fatalf("%s: the startup probe's port %s is not the container's port %+v", cniManifest, p, daemon.Ports[0])
	}
	addr := net.JoinHostPort(podIP, strconv.Itoa(daemon.Ports[0].ContainerPort))
	probe := "http://" + addr + daemon.StartupProbe.HTTPGet.Path
	patience := time.Duration(daemon.StartupProbe.PeriodSeconds*daemon.StartupProbe.FailureThreshold) * time.Second
	start = time.Now()
	for {
		code := httpStatus(node, addr, daemon.StartupProbe.HTTPGet.Path)
		if code == 200 {
			break
		}
		if time.Since(start) > patience {
			t.Fatalf("%s: %d after %v (the startup probe's patience)\n%s's log:\n%s", probe, code, patience, daemon.Name, containerLog(daemon.Name))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the daemon's container answers %s: %v after its start", probe, time.Since(start).Round(time.Millisecond))

	// install-cni: the plugin and the conflist on the node; the CRI's
	// network ready.
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := cri.run("info")
		_, plugin := os.Stat(filepath.Join(bound["/opt/cni/bin"], "xdpfwd-cni"))
		_, conf := os.Stat(filepath.Join(bound["/etc/cni/net.d"], "10-xdpfwd.conflist"))
		if err == nil && cri.networkReady(info) && plugin == nil && conf == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no plugin (%v) or conflist (%v) installed, or the CRI's network not ready: %v\ninstall-cni's log:\n%s", plugin, conf, err, containerLog("install-cni"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("install-cni installed the plugin and the conflist; the CRI's network is ready: %v", time.Since(start).Round(time.Millisecond))

	// Two pods, attached through the installed conflist.
	ctl := filepath.Join(bound["/run/xdpfwd"], filepath.Base(cfg.Control))
	pods := []*sandbox{{name: "web-0"}, {name: "web-1"}}
	cri.removeAtEnd(t, pods)
	for i, p := range pods {
		f := writeJSON(t, filepath.Join(dir, p.name+".json"), map[string]any{
			"metadata": map[string]any{"name": p.name, "namespace": "i41", "uid": fmt.Sprintf("i41-uid-%d", i), "attempt": 0},
			"hostname": p.name,
			"linux":    map[string]any{},
		})
		out, err := cri.run("runp", f)
		if err != nil {
			t.Fatalf("%v\ncontainerd: %s\ndaemon: %s", err, cd.log.String(), containerLog(daemon.Name))
		}
		p.id = strings.TrimSpace(out)
		out, err = cri.run("inspectp", "-o", "json", p.id)
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Status struct{ Network struct{ IP string } }
			Info   struct{ Pid int }
		}
		json.Unmarshal([]byte(out), &st)
		p.pid, p.host = st.Info.Pid, HostName(p.id, "eth0")
		p.addr, _ = netip.ParseAddr(st.Status.Network.IP)
		if p.pid == 0 || !subnet.Contains(p.addr) {
			t.Fatalf("%s: pid %d, IP %v; want an address in %s\n%s", p.name, p.pid, p.addr, subnet, out)
		}
	}
	netns := func(p *sandbox) string { return fmt.Sprintf("/proc/%d/ns/net", p.pid) }
	for i, p := range pods {
		for _, to := range []netip.Addr{pods[1-i].addr, hostAddr} {
			if out, err := exec.Command("nsenter", "--net="+netns(p), "ping", "-c", "1", "-W", "3", to.String()).CombinedOutput(); err != nil {
				t.Errorf("%s pings %s through the containerized xdpfwd: %v\n%s", p.name, to, err, out)
			}
		}
	}
	c, err := linkop.Dial(ctl)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.ListLinks()
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		k, ok := l.Link(p.host)
		if !ok || k.Pod == nil || k.Pod.String() != "i41/"+p.name {
			t.Errorf("link list: %s's link %s: %+v (listed %v); want it serving pod i41/%s", p.name, p.host, k, ok, p.name)
		}
	}
	if _, ok := l.Link(uplink); !ok {
		t.Errorf("link list: no uplink %s: %+v", uplink, l.Links)
	}
	if t.Failed() {
		t.FailNow()
	}
	for _, p := range pods {
		for _, step := range []string{"stopp", "rmp"} {
			if _, err := cri.run(step, p.id); err != nil {
				t.Errorf("%v", err)
			}
		}
		p.removed = true
	}
	c, err = linkop.Dial(ctl)
	if err != nil {
		t.Fatal(err)
	}
	l, _ = c.ListLinks()
	c.Close()
	if len(l.Links) != 1 || l.Links[0].Name != uplink {
		t.Errorf("links after the pods went: %+v, want %s alone", l.Links, uplink)
	}

	// SIGTERM, as the kubelet stops it: exit 0, the uplink left clean.
	if _, err := cri.run("stop", "-t", "30", ids[daemon.Name]); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(crictlBin, "--config", cri.config, "inspect", "-o", "go-template", "--template", "{{.status.exitCode}}", ids[daemon.Name]).Output()
	if err != nil || strings.TrimSpace(string(out)) != "0" {
		t.Errorf("the daemon's container exited %q (%v), want 0\n%s", out, err, containerLog(daemon.Name))
	}
	xdp, _ := exec.Command("ip", "-n", node.Name, "link", "show", uplink).CombinedOutput()
	if strings.Contains(string(xdp), "prog/xdp") {
		t.Errorf("%s still has an XDP program after the daemon stopped:\n%s", uplink, xdp)
	}
	t.Logf("the image ran under containerd's CRI as %s says: 2 pods attached through the conflist install-cni wrote, pinging each other and %s behind %s; whole test %v",
		cniManifest, hostAddr, uplink, time.Since(begin).Round(time.Millisecond))
}

// httpStatus is the status of GET path from addr, dialled in ns (as the
// kubelet's probe, on the node); 0 for no answer.
func httpStatus(ns *topo.NS, addr, path string) int {
	var conn net.Conn
	if err := ns.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	}); err != nil {
		return 0
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// writeJSON writes v to path, and returns path.
func writeJSON(t *testing.T, path string, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
