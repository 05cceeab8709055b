// The pods the links serve (linkop.Pod), as the adds that made the links
// named them: shown by link list, the metrics, the summary and capture.

package main

import (
	"slices"
	"sync"

	"github.com/xdpfwd/xdpfwd/control/linkop"
	"github.com/xdpfwd/xdpfwd/metrics"
)

// maxRemovedPods is how many removed links' pods are kept, the last
// removed: as many as fwd.Summary keeps removed links by name.
const maxRemovedPods = 64

// podTable is each link's pod. It is written by the link changes made
// over the control socket (linkOps held), a start's restore and a
// handover's import; read by link list, the metrics' scrapes and the
// summary, which do not take linkOps: hence its own mutex.
type podTable struct {
	mu      sync.Mutex
	live    map[string]linkop.Pod
	removed []namedPod // oldest first, at most maxRemovedPods
}

type namedPod struct {
	link string
	pod  linkop.Pod
}

// set records link's pod; nil: it serves none (a link added by hand).
func (t *podTable) set(link string, p *linkop.Pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p == nil {
		delete(t.live, link)
		return
	}
	if t.live == nil {
		t.live = map[string]linkop.Pod{}
	}
	t.live[link] = *p
}

// of is link's pod, if it serves one.
func (t *podTable) of(link string) (linkop.Pod, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.live[link]
	return p, ok
}

// keep forgets the pods of the links not in links (removed, or gone
// with their pods' namespaces), keeping the last maxRemovedPods of them
// for the summary.
func (t *podTable) keep(links []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for link, p := range t.live {
		if slices.Contains(links, link) {
			continue
		}
		delete(t.live, link)
		t.removed = slices.DeleteFunc(t.removed, func(r namedPod) bool { return r.link == link })
		t.removed = append(t.removed, namedPod{link, p})
		if n := len(t.removed) - maxRemovedPods; n > 0 {
			t.removed = slices.Delete(t.removed, 0, n)
		}
	}
}

// all is every link's pod: those of the links there are, and of the last
// ones removed (withRemoved) unless a link of that name is there now.
func (t *podTable) all(withRemoved bool) map[string]linkop.Pod {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[string]linkop.Pod, len(t.live)+len(t.removed))
	if withRemoved {
		for _, r := range t.removed {
			m[r.link] = r.pod
		}
	}
	for link, p := range t.live {
		m[link] = p
	}
	return m
}

// load replaces the live pods with m (a predecessor's, at a handover).
func (t *podTable) load(m map[string]linkop.Pod) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live = nil
	for link, p := range m {
		if t.live == nil {
			t.live = map[string]linkop.Pod{}
		}
		t.live[link] = p
	}
}

// podAttr is a log attribute's value for pod: NAMESPACE/NAME, or "" for
// none.
func podAttr(p *linkop.Pod) string {
	if p == nil {
		return ""
	}
	return p.String()
}

// metric is link's pod as the metrics label it (metrics.Options.Pods).
func (t *podTable) metric(link string) (metrics.Pod, bool) {
	p, ok := t.of(link)
	return metrics.Pod{Namespace: p.Namespace, Name: p.Name, UID: p.UID}, ok
}
