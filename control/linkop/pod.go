package linkop

import (
	"errors"
	"fmt"
	"strings"
)

// Pod names the pod a link serves, as the container runtime gives it to
// a CNI plugin (CNI_ARGS K8S_POD_NAMESPACE, K8S_POD_NAME, K8S_POD_UID).
// It is a label: the daemon shows it (link list, metrics, the summary,
// capture) and checks nothing by it.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// The bounds of a Pod's fields: Kubernetes' (a namespace is a DNS label,
// a pod's name a DNS subdomain, a UID a UUID), so that what goes into
// metric labels, logs and pcapng comments stays short and plain.
const (
	maxPodNamespace = 63
	maxPodName      = 253
	maxPodUID       = 64
)

// String is NAMESPACE/NAME, as kubectl and capture --pod spell it.
func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Check says what is wrong with p, if anything: a namespace of 1..63 and
// a name of 1..253 bytes of letters, digits, '-', '.' and '_', a UID of
// at most 64 of letters, digits and '-'.
func (p Pod) Check() error {
	if err := podField("namespace", p.Namespace, maxPodNamespace, "-._"); err != nil {
		return err
	}
	if err := podField("name", p.Name, maxPodName, "-._"); err != nil {
		return err
	}
	if p.UID == "" {
		return nil
	}
	return podField("uid", p.UID, maxPodUID, "-")
}

func podField(what, s string, maxLen int, punct string) error {
	if s == "" || len(s) > maxLen {
		return fmt.Errorf("pod %s %q: want 1..%d bytes", what, s, maxLen)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(punct, r)
		if !ok {
			return fmt.Errorf("pod %s %q: %q not allowed (letters, digits and %q only)", what, s, r, punct)
		}
	}
	return nil
}

// ErrPodRef: a pod reference that is not NAMESPACE/NAME.
var ErrPodRef = errors.New("want NAMESPACE/NAME")

// ParsePod reads NAMESPACE/NAME (capture --pod's argument).
func ParsePod(s string) (Pod, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return Pod{}, fmt.Errorf("pod %q: %w", s, ErrPodRef)
	}
	p := Pod{Namespace: ns, Name: name}
	if err := p.Check(); err != nil {
		return Pod{}, err
	}
	return p, nil
}

// Is reports whether p is the pod ref names: the same namespace and name
// (a ref has no UID).
func (p Pod) Is(ref Pod) bool { return p.Namespace == ref.Namespace && p.Name == ref.Name }
