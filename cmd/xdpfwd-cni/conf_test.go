package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/internal/cpulist"
)

// TestParseConf: good configurations get their defaults; each bad one
// is refused with the spec's code and a message naming the field.
func TestParseConf(t *testing.T) {
	const ipam = `"ipam":{"type":"host-local"}`
	tests := []struct {
		name, conf, args string
		code             uint   // 0: accepted
		want             string // in the message, or (accepted) the MAC
		mtu              int
	}{
		{name: "defaults", conf: `{"cniVersion":"1.1.0","name":"n","type":"xdpfwd-cni","control":"/run/xdpfwd/eth0.sock",` + ipam + `}`, mtu: DefaultMTU},
		{name: "mtu and mac", conf: `{"cniVersion":"1.1.0","name":"n","control":"/s","mtu":9000,"mac":"02:00:00:00:00:01",` + ipam + `}`, mtu: 9000, want: "02:00:00:00:00:01"},
		{name: "CNI_ARGS MAC wins", conf: `{"name":"n","control":"/s","mac":"02:00:00:00:00:01",` + ipam + `}`, args: "IgnoreUnknown=1;MAC=02:00:00:00:00:02", mtu: DefaultMTU, want: "02:00:00:00:00:02"},
		// The reference bridge plugin's order, "mac" below it all.
		{name: "args.cni.mac over CNI_ARGS", conf: `{"name":"n","control":"/s","mac":"02:00:00:00:00:01","args":{"cni":{"mac":"02:00:00:00:00:03"}},` + ipam + `}`, args: "IgnoreUnknown=1;MAC=02:00:00:00:00:02", mtu: DefaultMTU, want: "02:00:00:00:00:03"},
		{name: "runtimeConfig mac wins", conf: `{"name":"n","control":"/s","mac":"02:00:00:00:00:01","args":{"cni":{"mac":"02:00:00:00:00:03"}},"runtimeConfig":{"mac":"02:00:00:00:00:04","ips":["10.1.2.3/24","fd00::3"]},` + ipam + `}`, args: "MAC=02:00:00:00:00:02", mtu: DefaultMTU, want: "02:00:00:00:00:04"},
		{name: "bad runtimeConfig mac", conf: `{"name":"n","control":"/s","runtimeConfig":{"mac":"02:00"},` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `mac "02:00"`},
		{name: "bad runtimeConfig ips", conf: `{"name":"n","control":"/s","runtimeConfig":{"ips":["10.1.2"]},` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `runtimeConfig ips "10.1.2"`},
		{name: "not JSON", conf: `{"name":`, code: types.ErrDecodingFailure, want: "decode"},
		{name: "no control", conf: `{"name":"n",` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `"control"`},
		{name: "relative control", conf: `{"name":"n","control":"x.sock",` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: "absolute"},
		{name: "no ipam", conf: `{"name":"n","control":"/s"}`, code: types.ErrInvalidNetworkConfig, want: `"ipam"`},
		{name: "mtu too small", conf: `{"name":"n","control":"/s","mtu":67,` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `"mtu" 67`},
		{name: "mtu too big", conf: `{"name":"n","control":"/s","mtu":70000,` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `"mtu" 70000`},
		{name: "bad mac", conf: `{"name":"n","control":"/s","mac":"zz",` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `mac "zz"`},
		{name: "multicast mac", conf: `{"name":"n","control":"/s","mac":"01:00:5e:00:00:01",` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: "multicast"},
		{name: "relative stateDir", conf: `{"name":"n","control":"/s","stateDir":"st",` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `"stateDir"`},
		{name: "no name", conf: `{"control":"/s",` + ipam + `}`, code: types.ErrInvalidNetworkConfig, want: `"name"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConf([]byte(tt.conf), tt.args)
			if tt.code != 0 {
				var te *types.Error
				if !errors.As(err, &te) || te.Code != tt.code || !strings.Contains(te.Error(), tt.want) {
					t.Fatalf("err %v; want CNI code %d naming %q", err, tt.code, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.MTU != tt.mtu || c.StateDir != DefaultStateDir && !strings.Contains(tt.conf, "stateDir") {
				t.Errorf("mtu %d, stateDir %q; want %d, %q", c.MTU, c.StateDir, tt.mtu, DefaultStateDir)
			}
			if got := c.mac.String(); got != tt.want {
				t.Errorf("mac %q, want %q", got, tt.want)
			}
		})
	}
}

// TestHostName: 15 bytes ("xfwd" and 11 hex digits), the same for the
// same attachment, different when the container or the interface is.
func TestHostName(t *testing.T) {
	re := regexp.MustCompile(`^xfwd[0-9a-f]{11}$`)
	seen := map[string]string{}
	for _, id := range []string{"a", "b", "cnitool-0123456789abcdef0123", strings.Repeat("f", 64)} {
		for _, ifn := range []string{"eth0", "eth1", "net1"} {
			n := HostName(id, ifn)
			if !re.MatchString(n) || len(n) != 15 {
				t.Errorf("HostName(%q, %q) = %q: want xfwd and 11 hex digits", id, ifn, n)
			}
			if n != HostName(id, ifn) {
				t.Errorf("HostName(%q, %q) not deterministic", id, ifn)
			}
			if prev, dup := seen[n]; dup {
				t.Errorf("HostName(%q, %q) = %q, as for %s", id, ifn, n, prev)
			}
			seen[n] = id + "/" + ifn
		}
	}
	// The separator keeps ("ab", "c") and ("a", "bc") apart.
	if HostName("ab", "c") == HostName("a", "bc") {
		t.Error("HostName: container ID and ifname run together")
	}
}

// TestInstall: install writes the binary (executable) and the conflist
// into the given directories; a file that is not a conflist exits 2 and
// installs nothing.
func TestInstall(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "10-xdpfwd.conflist")
	os.WriteFile(good, []byte(`{"cniVersion":"1.1.0","name":"xdpfwd","plugins":[{"type":"xdpfwd-cni"}]}`), 0o600)
	bad := filepath.Join(dir, "bad.conflist")
	os.WriteFile(bad, []byte(`{"type":"xdpfwd-cni"}`), 0o600)
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"good", []string{"--conflist", good}, 0},
		{"not a conflist", []string{"--conflist", bad}, 2},
		{"no conflist", nil, 2},
		{"missing file", []string{"--conflist", filepath.Join(dir, "nope")}, 2},
		{"extra word", []string{"--conflist", good, "x"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bin, conf := filepath.Join(t.TempDir(), "bin"), filepath.Join(t.TempDir(), "net.d")
			var stderr strings.Builder
			code := install(append(tt.args, "--bin-dir", bin, "--conf-dir", conf), &stderr)
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s", code, tt.code, stderr.String())
			}
			fi, berr := os.Stat(filepath.Join(bin, "xdpfwd-cni"))
			c, cerr := os.ReadFile(filepath.Join(conf, filepath.Base(good)))
			if tt.code != 0 {
				if berr == nil || cerr == nil {
					t.Errorf("a refused install wrote files")
				}
				return
			}
			if berr != nil || fi.Mode().Perm() != 0o755 || fi.Size() == 0 {
				t.Errorf("binary: %v, %v", fi, berr)
			}
			if want, _ := os.ReadFile(good); cerr != nil || string(c) != string(want) {
				t.Errorf("conflist: %q, %v", c, cerr)
			}
		})
	}
}

// TestCheckPolicy: CHECK fails a pod whose link the daemon secures for
// another MAC (a chained tuning changed it after ADD), or whose port lost
// its MAC (revoked: heard on another link), or polices to other
// limits than the network's, and passes one without either, or with the
// same.
func TestCheckPolicy(t *testing.T) {
	pod := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	bw := &linkop.Bandwidth{IngressRate: 8e6, IngressBurst: 8e5, EgressRate: 8e6, EgressBurst: 8e5}
	other := *bw
	other.EgressRate = 16e6
	for _, tt := range []struct {
		name string
		k    linkop.Link
		want *linkop.Bandwidth
		err  string
	}{
		{"not secured, no limits", linkop.Link{}, nil, ""},
		{"secured for the pod's MAC", linkop.Link{MAC: pod.String()}, nil, ""},
		{"secured for another MAC", linkop.Link{MAC: "02:00:00:00:00:02"}, nil, "spoofed_source"},
		{"secured, provisionally (taken over)", linkop.Link{MAC: pod.String(), PortState: "provisional"}, nil, ""},
		{"secured, revoked (its MAC heard elsewhere)", linkop.Link{MAC: pod.String(), PortState: "revoked"}, nil, "revoked"},
		{"policed as the network says", linkop.Link{Bandwidth: bw}, bw, ""},
		{"policed, no limits given", linkop.Link{Bandwidth: bw}, nil, "gives no limits"},
		{"limits given, not policed", linkop.Link{}, bw, "not policed"},
		{"policed to other limits", linkop.Link{Bandwidth: &other}, bw, "the network gives"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPolicy(tt.k, pod, tt.want, nil)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("checkPolicy(%+v): %v; want %q", tt.k, err, tt.err)
			}
		})
	}
}

// TestCheckVLAN: CHECK fails a link in other VLANs than the network's
// (or in some, when the network has none), and passes the same.
func TestCheckVLAN(t *testing.T) {
	pod := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	a100, a200 := &linkop.VLAN{Access: 100}, &linkop.VLAN{Access: 200}
	trunk := &linkop.VLAN{Trunk: []uint16{0, 100}}
	for _, tt := range []struct {
		name string
		has  *linkop.VLAN
		want *linkop.VLAN
		ok   bool
	}{
		{"neither", nil, nil, true},
		{"the same access", a100, &linkop.VLAN{Access: 100}, true},
		{"the same trunk", trunk, &linkop.VLAN{Trunk: []uint16{0, 100}}, true},
		{"another access", a200, a100, false},
		{"a trunk for an access", trunk, a100, false},
		{"none for an access", nil, a100, false},
		{"an access for none", a100, nil, false},
	} {
		err := checkPolicy(linkop.Link{VLAN: tt.has}, pod, nil, tt.want)
		if (err == nil) != tt.ok || err != nil && !strings.Contains(err.Error(), "VLANs") {
			t.Errorf("%s: checkPolicy: %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// TestConfVLAN: "vlan" and "trunk", ovs-cni's keys, as the daemon takes
// them; what is malformed is error 7 naming the key.
func TestConfVLAN(t *testing.T) {
	for _, tt := range []struct {
		keys string
		want *linkop.VLAN
		err  string
	}{
		{``, nil, ""},
		{`"vlan": 100`, &linkop.VLAN{Access: 100}, ""},
		{`"vlan": 4094`, &linkop.VLAN{Access: 4094}, ""},
		{`"trunk": [{"id": 42}, {"minID": 100, "maxID": 102}, {"id": 0}, {"id": 101}]`, &linkop.VLAN{Trunk: []uint16{0, 42, 100, 101, 102}}, ""},
		{`"vlan": 0`, nil, `"vlan" 0`},
		{`"vlan": 4095`, nil, `"vlan" 4095`},
		{`"vlan": 100, "trunk": [{"id": 1}]`, nil, "not both"},
		{`"trunk": []`, nil, "empty"},
		{`"trunk": [{"id": 5000}]`, nil, `"trunk" entry`},
		{`"trunk": [{"minID": 10}]`, nil, `"trunk" entry`},
		{`"trunk": [{"minID": 10, "maxID": 5}]`, nil, `"trunk" entry`},
		{`"trunk": [{"id": 1, "minID": 1, "maxID": 2}]`, nil, `"trunk" entry`},
		{`"trunk": [{"id": -1}]`, nil, `"trunk" entry`},
	} {
		stdin := `{"cniVersion": "1.0.0", "name": "n", "type": "xdpfwd-cni", "control": "/run/x.sock", "ipam": {"type": "host-local"}`
		if tt.keys != "" {
			stdin += ", " + tt.keys
		}
		conf, err := parseConf([]byte(stdin+"}"), "")
		switch {
		case tt.err != "":
			var e *types.Error
			if err == nil || !errors.As(err, &e) || e.Code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s: %v, want error 7 saying %q", tt.keys, err, tt.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.keys, err)
		case (conf.vlan == nil) != (tt.want == nil) || tt.want != nil && (conf.vlan.Access != tt.want.Access || !slices.Equal(conf.vlan.Trunk, tt.want.Trunk)):
			t.Errorf("%s: VLAN %+v, want %+v", tt.keys, conf.vlan, tt.want)
		}
	}
}

// TestConfRPSCPUs: "rpsCPUs" as ADD resolves it against this machine's
// online CPUs and the daemon's pinned workers: auto (the default) is the
// online CPUs but the workers', nothing when they are not pinned or
// leave none; "off" nothing; a list exactly its CPUs. A malformed list,
// or one naming a CPU that is not online, is error 7 naming the key.
func TestConfRPSCPUs(t *testing.T) {
	online, err := onlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	without := func(c int) []int {
		return slices.DeleteFunc(slices.Clone(online), func(x int) bool { return x == c })
	}
	offline := slices.Max(online) + 1
	tests := []struct {
		name, rps string
		pinned    []int
		want      []int // nil: RPS left as it is
		code      uint  // 0: accepted
	}{
		{name: "default, pinned", rps: "", pinned: []int{1}, want: nil},
		{name: "default, not pinned", rps: "", pinned: nil, want: nil},
		{name: "auto, pinned", rps: "auto", pinned: []int{1}, want: without(1)},
		{name: "auto, workers on every CPU", rps: "auto", pinned: online, want: nil},
		{name: "auto, not pinned", rps: "auto", want: nil},
		{name: "off", rps: "off", pinned: []int{1}, want: nil},
		{name: "one CPU", rps: "0", pinned: []int{0}, want: []int{0}},
		{name: "range", rps: "0-1", pinned: []int{1}, want: []int{0, 1}},
		{name: "not a CPU", rps: "x", code: types.ErrInvalidNetworkConfig},
		{name: "range down", rps: "3-1", code: types.ErrInvalidNetworkConfig},
		{name: "negative", rps: "-1", code: types.ErrInvalidNetworkConfig},
		{name: "open range", rps: "1-", code: types.ErrInvalidNetworkConfig},
		{name: "empty item", rps: "0,,1", code: types.ErrInvalidNetworkConfig},
		{name: "not online", rps: strconv.Itoa(offline), code: types.ErrInvalidNetworkConfig},
	}
	if !slices.Contains(online, 1) {
		t.Fatalf("online CPUs %v: the table wants CPUs 0 and 1 (a machine of 2 CPUs or more)", online)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(map[string]any{"name": "n", "control": "/s", "rpsCPUs": tt.rps, "ipam": map[string]any{"type": "host-local"}})
			c, err := parseConf(b, "")
			var got []int
			if err == nil {
				got, err = c.rpsTargets(tt.pinned)
			}
			if tt.code != 0 {
				var te *types.Error
				if !errors.As(err, &te) || te.Code != tt.code || !strings.Contains(te.Error(), `"rpsCPUs"`) {
					t.Fatalf("rpsCPUs %q: %v (targets %v); want CNI code %d naming \"rpsCPUs\"", tt.rps, err, got, tt.code)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("rpsCPUs %q, workers on %v: targets %v, %v; want %v", tt.rps, tt.pinned, got, err, tt.want)
			}
		})
	}
}

// TestCPUSet: a CPU list read as a set, written as the kernel writes it.
func TestCPUSet(t *testing.T) {
	for _, tc := range []struct {
		in, out string
		cpus    []int
	}{
		{"0", "0", []int{0}},
		{"0-3,8", "0-3,8", []int{0, 1, 2, 3, 8}},
		{"8,0-1,1\n", "0-1,8", []int{0, 1, 8}},
		{"1,3,5-6", "1,3,5-6", []int{1, 3, 5, 6}},
	} {
		cpus, err := cpuSet(tc.in)
		if err != nil || !slices.Equal(cpus, tc.cpus) || cpulist.Format(cpus) != tc.out {
			t.Errorf("cpuSet(%q) = %v, %v, written %q; want %v, %q", tc.in, cpus, err, cpulist.Format(cpus), tc.cpus, tc.out)
		}
	}
}

// TestDaemonErrCodes: the CNI code of each daemon answer: a refusal of
// the request as it stands is definite (100, or 7 for the network's MTU),
// the rest is to try again (11).
func TestDaemonErrCodes(t *testing.T) {
	conf := &NetConf{MTU: 9000}
	for _, c := range []struct {
		err  error
		code uint
	}{
		{linkop.ErrMTU, types.ErrInvalidNetworkConfig},
		{linkop.ErrExists, ErrDaemonRefused},
		{linkop.ErrExistsOther, ErrDaemonRefused},
		{linkop.ErrMACInUse, ErrDaemonRefused},
		{linkop.ErrMACNoRoom, ErrDaemonRefused},
		{linkop.ErrNoSuchLink, ErrDaemonRefused},
		{linkop.ErrUnsupported, ErrDaemonRefused},
		{errors.New("control socket: i/o timeout"), types.ErrTryAgainLater},
	} {
		if got := daemonErr(conf, "add x", fmt.Errorf("link add x: %w", c.err)); got.Code != c.code {
			t.Errorf("%v: code %d, want %d", c.err, got.Code, c.code)
		}
	}
}

// TestConfPod: CNI_ARGS' K8S_POD_* name the pod ADD gives the daemon; a
// namespace without a name (or none) is no pod; a pod the daemon would
// refuse fails ADD with code 4 (podOf), never DEL (parseConf takes it).
func TestConfPod(t *testing.T) {
	const conf = `{"name":"n","control":"/s","ipam":{"type":"host-local"}}`
	for _, tc := range []struct {
		name, args string
		want       *linkop.Pod
		code       uint // podOf's; 0: none
	}{
		{name: "kubelet's", args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
			want: &linkop.Pod{Namespace: "shop", Name: "web-0", UID: "u-1"}},
		{name: "no UID", args: "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0", want: &linkop.Pod{Namespace: "shop", Name: "web-0"}},
		{name: "namespace alone", args: "K8S_POD_NAMESPACE=shop"},
		{name: "none", args: "IgnoreUnknown=1;MAC=02:00:00:00:00:02"},
		{name: "bad name", args: "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web 0", want: &linkop.Pod{Namespace: "shop", Name: "web 0"}, code: types.ErrInvalidEnvironmentVariables},
		{name: "name too long", args: "K8S_POD_NAMESPACE=shop;K8S_POD_NAME=" + strings.Repeat("a", 254), want: &linkop.Pod{Namespace: "shop", Name: strings.Repeat("a", 254)}, code: types.ErrInvalidEnvironmentVariables},
	} {
		c, err := parseConf([]byte(conf), tc.args)
		if err != nil {
			t.Errorf("%s: parseConf: %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(c.pod, tc.want) {
			t.Errorf("%s: pod %+v, want %+v", tc.name, c.pod, tc.want)
		}
		p, err := c.podOf()
		var te *types.Error
		switch {
		case tc.code == 0 && (err != nil || !reflect.DeepEqual(p, tc.want)):
			t.Errorf("%s: podOf %+v, %v; want %+v", tc.name, p, err, tc.want)
		case tc.code != 0 && (!errors.As(err, &te) || te.Code != tc.code || p != nil):
			t.Errorf("%s: podOf %+v, %v; want CNI code %d", tc.name, p, err, tc.code)
		}
	}
}
