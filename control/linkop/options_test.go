package linkop_test

import (
	"bufio"
	"encoding/json"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/xdpfwd/xdpfwd/control/linkop"
)

// optionsManager records the options of each add.
type optionsManager struct {
	fakeManager
	mu   sync.Mutex
	opts map[string]*linkop.AddOptions // nil: added by Add, without
}

func (m *optionsManager) Add(name string) error {
	m.mu.Lock()
	m.opts[name] = nil
	m.mu.Unlock()
	return m.fakeManager.Add(name)
}

func (m *optionsManager) AddWith(name string, o linkop.AddOptions) error {
	m.mu.Lock()
	m.opts[name] = &o
	m.mu.Unlock()
	return m.fakeManager.Add(name)
}

// TestAddOptions: an add's port security options reach a Manager that
// takes them (AddWith), from the client and from a raw line; an add
// without (an older client's line) is a plain Add; a Manager that takes
// none (an older daemon) adds the link by its name.
func TestAddOptions(t *testing.T) {
	on := true
	m := &optionsManager{opts: map[string]*linkop.AddOptions{}}
	path := serve(t, m)
	c, err := linkop.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	full := linkop.AddOptions{MAC: "02:28:00:00:00:0a", IPs: []string{"10.99.0.2", "2001:db8::2"}, PortSecurity: &on}
	if err := c.AddLinkWith("s28a", full); err != nil {
		t.Fatal(err)
	}
	if err := c.AddLink("s28b"); err != nil {
		t.Fatal(err)
	}
	raw := func(line string) {
		t.Helper()
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.Write([]byte(line + "\n"))
		rep, err := bufio.NewReader(conn).ReadString('\n')
		var r linkop.Reply
		if err != nil || json.Unmarshal([]byte(rep), &r) != nil || !r.OK {
			t.Fatalf("%s: answer %q, %v", line, rep, err)
		}
	}
	raw(`{"op":"link.add","name":"s28c"}`)
	raw(`{"op":"link.add","name":"s28d","mac":"02:28:00:00:00:0d"}`)
	raw(`{"op":"link.add","name":"s28f","pod":{"namespace":"ns","name":"web-0","uid":"u1"}}`)
	for _, tc := range []struct {
		name string
		want *linkop.AddOptions
	}{
		{"s28a", &full},
		{"s28b", nil},
		{"s28c", nil},
		{"s28d", &linkop.AddOptions{MAC: "02:28:00:00:00:0d"}},
		{"s28f", &linkop.AddOptions{Pod: &linkop.Pod{Namespace: "ns", Name: "web-0", UID: "u1"}}}, // a pod alone is an option
	} {
		if got := m.opts[tc.name]; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: options %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// An older daemon's Manager: the link is added, by name.
	plain := &fakeManager{}
	c2, err := linkop.Dial(serve(t, plain))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.AddLinkWith("s28e", full); err != nil {
		t.Fatalf("add with options to a Manager without: %v", err)
	}
	if l, _ := c2.ListLinks(); !l.Has("s28e") {
		t.Errorf("links %v, want s28e", l.Links)
	}
	// The wire form: what the CNI plugin sends fits a line.
	b, _ := json.Marshal(linkop.Request{Op: linkop.OpAdd, Name: "s28veth0123456", AddOptions: full})
	if len(b) >= linkop.MaxLine || !strings.Contains(string(b), `"port_security":true`) {
		t.Errorf("request %s: want under %d bytes with port_security", b, linkop.MaxLine)
	}
}
