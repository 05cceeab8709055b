package linkop_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

func TestPodCheck(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		pod  linkop.Pod
		want string // "" for valid, else a word of the error
	}{
		{linkop.Pod{Namespace: "default", Name: "web-0"}, ""},
		{linkop.Pod{Namespace: "kube-system", Name: "coredns-5d78c9869d-x7q2m", UID: "0f6c2a1e-4c0b-4f7e-9a3b-2f8f1e6c7d90"}, ""},
		{linkop.Pod{Namespace: long(63), Name: long(253), UID: long(64)}, ""},
		{linkop.Pod{Namespace: "ns", Name: "a.b_c"}, ""},
		{linkop.Pod{Namespace: "", Name: "p"}, "namespace"},
		{linkop.Pod{Namespace: "ns", Name: ""}, "name"},
		{linkop.Pod{Namespace: long(64), Name: "p"}, "1..63"},
		{linkop.Pod{Namespace: "ns", Name: long(254)}, "1..253"},
		{linkop.Pod{Namespace: "ns", Name: "p", UID: long(65)}, "1..64"},
		{linkop.Pod{Namespace: "n/s", Name: "p"}, "not allowed"},
		{linkop.Pod{Namespace: "ns", Name: "p q"}, "not allowed"},
		{linkop.Pod{Namespace: "ns", Name: "p\n"}, "not allowed"},
		{linkop.Pod{Namespace: "ns", Name: `p"`}, "not allowed"},
		{linkop.Pod{Namespace: "ns", Name: "pé"}, "not allowed"},
		{linkop.Pod{Namespace: "ns", Name: "p", UID: "a.b"}, "not allowed"},
	} {
		err := tc.pod.Check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.pod, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error saying %q", tc.pod, err, tc.want)
		}
	}
}

func TestParsePod(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want linkop.Pod
		bad  bool
	}{
		{in: "default/web-0", want: linkop.Pod{Namespace: "default", Name: "web-0"}},
		{in: "web-0", bad: true},
		{in: "/web-0", bad: true},
		{in: "default/", bad: true},
		{in: "a/b/c", bad: true},
	} {
		got, err := linkop.ParsePod(tc.in)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("ParsePod(%q) = %+v, %v; want %+v, error %v", tc.in, got, err, tc.want, tc.bad)
		}
	}
	if _, err := linkop.ParsePod("web-0"); !errors.Is(err, linkop.ErrPodRef) {
		t.Errorf("ParsePod without a namespace: %v, want ErrPodRef", err)
	}
}

// TestAddPodFitsALine: the longest pod a daemon takes, with a pod's
// other options, is one request line.
func TestAddPodFitsALine(t *testing.T) {
	on := true
	pod := linkop.Pod{Namespace: strings.Repeat("n", 63), Name: strings.Repeat("p", 253), UID: strings.Repeat("u", 64)}
	b, _ := json.Marshal(linkop.Request{Op: linkop.OpAdd, Name: "xfwd0123456789a", AddOptions: linkop.AddOptions{
		MAC: "02:28:00:00:00:0a", IPs: []string{"10.99.0.2", "2001:db8::2"}, PortSecurity: &on,
		Bandwidth: &linkop.Bandwidth{IngressRate: 1e9, IngressBurst: 1 << 30, EgressRate: 1e9, EgressBurst: 1 << 30}, Pod: &pod}})
	if len(b) >= linkop.MaxLine {
		t.Errorf("request of %d bytes, want under %d: %s", len(b), linkop.MaxLine, b)
	}
}
