package cbpf_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/cbpf"
	"github.com/xdpfwd/xdpfwd/pcapng"
)

// frame builds an Ethernet frame: ethertype, then the rest.
func frame(etype uint16, rest ...[]byte) []byte {
	b := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, byte(etype >> 8), byte(etype)}
	for _, r := range rest {
		b = append(b, r...)
	}
	return b
}

func ipv4(proto byte, payload []byte) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
	h[8], h[9] = 64, proto
	copy(h[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	return append(h, payload...)
}

func ipv6(next byte, payload []byte) []byte {
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6], h[7] = next, 64
	h[8], h[39] = 0xfd, 2
	return append(h, payload...)
}

func l4(sport, dport uint16, n int) []byte {
	b := make([]byte, 20+n)
	binary.BigEndian.PutUint16(b, sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	b[12] = 5 << 4
	return b
}

// frames are the packets every expression is run over.
var frames = [][]byte{
	frame(0x0800, ipv4(17, l4(1000, 9, 10))),
	frame(0x0800, ipv4(17, l4(9, 2000, 1000))),
	frame(0x0800, ipv4(17, l4(1000, 90, 10))),
	frame(0x0800, ipv4(6, l4(1000, 9, 10))),
	frame(0x0800, ipv4(1, []byte{8, 0, 0, 0, 0, 1, 0, 1})),
	frame(0x86dd, ipv6(17, l4(53, 9, 4))),
	frame(0x86dd, ipv6(6, l4(1, 53, 4))),
	frame(0x8100, []byte{0, 5, 0x08, 0x00}, ipv4(17, l4(1000, 9, 10))),
	frame(0x0806, make([]byte, 28)),
	frame(0x0800, []byte{0x45, 0}), // cut short
	{1, 2, 3},
}

var exprs = []string{
	"udp port 9",
	"tcp",
	"icmp",
	"ip host 198.18.0.1",
	"ip6 and udp dst port 9",
	"vlan and udp",
	"vlan 5 and udp port 9",
	"arp",
	"len > 500",
	"ether[0] & 1 = 0",
	"ip[2:2] > 40",
	"udp[0:2] = 9 or tcp[2:2] = 53",
	"not ip",
	"portrange 50-100",
}

// TestAgainstLibpcap: for each expression, the packets Run accepts are
// those tcpdump itself (libpcap's own interpreter, reading a pcapng file
// the package's writer made) accepts.
func TestAgainstLibpcap(t *testing.T) {
	if _, err := exec.LookPath("tcpdump"); err != nil {
		if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("tcpdump is not installed (apt-get install tcpdump)")
		}
		t.Skip("tcpdump is not installed")
	}
	file := filepath.Join(t.TempDir(), "frames.pcapng")
	var buf bytes.Buffer
	w, err := pcapng.NewWriter(&buf, "test", []pcapng.Interface{{Name: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range frames {
		w.Packet(0, int64(i)*1e9, f, len(f), pcapng.DirInbound, "") // second i: its number in tcpdump -tt
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(file, buf.Bytes(), 0o600)
	for _, e := range exprs {
		t.Run(e, func(t *testing.T) {
			p, err := cbpf.Compile(e, 262144)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("tcpdump", "-r", file, "-tt", "-nn", "-q", e).Output()
			if err != nil {
				t.Fatalf("tcpdump: %v", err)
			}
			want := map[int]bool{}
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) > 0 {
					n, err := strconv.Atoi(strings.Split(f[0], ".")[0])
					if err != nil {
						t.Fatalf("tcpdump line %q", l)
					}
					want[n] = true
				}
			}
			for i, f := range frames {
				if got := p.Run(f) != 0; got != want[i] {
					t.Errorf("frame %d: Run accepts %v, libpcap %v", i, got, want[i])
				}
			}
		})
	}
}

// TestCompileErrors: a bad expression carries tcpdump's message; a
// missing tcpdump says so.
func TestCompileErrors(t *testing.T) {
	if _, err := exec.LookPath("tcpdump"); err == nil {
		if _, err := cbpf.Compile("udp port", 100); err == nil || !strings.Contains(err.Error(), "syntax error") {
			t.Errorf("udp port: %v, want tcpdump's syntax error", err)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := cbpf.Compile("udp", 100); !errors.Is(err, cbpf.ErrNoCompiler) {
		t.Errorf("without tcpdump: %v, want ErrNoCompiler", err)
	}
}

// TestNewRefuses: programs that could misbehave are refused.
func TestNewRefuses(t *testing.T) {
	ret := cbpf.Instruction{Op: 0x06}
	tests := []struct {
		name string
		ins  []cbpf.Instruction
	}{
		{"empty", nil},
		{"no return", []cbpf.Instruction{{Op: 0x00, K: 1}}},
		{"jump past the end", []cbpf.Instruction{{Op: 0x15, Jt: 5}, ret}},
		{"ja past the end", []cbpf.Instruction{{Op: 0x05, K: 1}, ret}},
		{"ja wrapping", []cbpf.Instruction{{Op: 0x05, K: ^uint32(0)}, ret}},
		{"divide by zero", []cbpf.Instruction{{Op: 0x34, K: 0}, ret}},
		{"mod by zero", []cbpf.Instruction{{Op: 0x94, K: 0}, ret}},
		{"scratch out of range", []cbpf.Instruction{{Op: 0x02, K: 16}, ret}},
		{"load scratch out of range", []cbpf.Instruction{{Op: 0x60, K: 99}, ret}},
		{"unknown ALU", []cbpf.Instruction{{Op: 0xc4}, ret}},
		{"unknown jump", []cbpf.Instruction{{Op: 0x55}, ret}},
		{"unknown misc", []cbpf.Instruction{{Op: 0x27}, ret}},
	}
	for _, tc := range tests {
		if _, err := cbpf.New(tc.ins); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestRun: loads beyond the packet reject it; arithmetic, scratch memory
// and the index register work as the kernel's.
func TestRun(t *testing.T) {
	tests := []struct {
		name string
		ins  []cbpf.Instruction
		pkt  []byte
		want uint32
	}{
		{"word beyond", []cbpf.Instruction{{Op: 0x20, K: 2}, {Op: 0x16}}, []byte{1, 2, 3, 4, 5}, 0},
		{"word", []cbpf.Instruction{{Op: 0x20, K: 1}, {Op: 0x16}}, []byte{1, 2, 3, 4, 5}, 0x02030405},
		{"half", []cbpf.Instruction{{Op: 0x28, K: 3}, {Op: 0x16}}, []byte{1, 2, 3, 4, 5}, 0x0405},
		{"msh", []cbpf.Instruction{{Op: 0xb1, K: 0}, {Op: 0x87}, {Op: 0x16}}, []byte{0x45}, 20},
		{"ind beyond", []cbpf.Instruction{{Op: 0x01, K: 4}, {Op: 0x50, K: 1}, {Op: 0x16}}, []byte{1, 2, 3, 4, 5}, 0},
		{"ind", []cbpf.Instruction{{Op: 0x01, K: 3}, {Op: 0x50, K: 1}, {Op: 0x16}}, []byte{1, 2, 3, 4, 5}, 5},
		{"len", []cbpf.Instruction{{Op: 0x80}, {Op: 0x16}}, make([]byte, 77), 77},
		{"scratch", []cbpf.Instruction{{Op: 0x00, K: 9}, {Op: 0x02, K: 3}, {Op: 0x00, K: 1}, {Op: 0x61, K: 3}, {Op: 0x0c}, {Op: 0x16}}, nil, 10},
		{"div x zero", []cbpf.Instruction{{Op: 0x00, K: 9}, {Op: 0x3c}, {Op: 0x06, K: 1}}, nil, 0},
		{"shift 40", []cbpf.Instruction{{Op: 0x00, K: 9}, {Op: 0x64, K: 40}, {Op: 0x16}}, nil, 0},
		{"neg", []cbpf.Instruction{{Op: 0x00, K: 1}, {Op: 0x84}, {Op: 0x16}}, nil, ^uint32(0)},
		{"jset", []cbpf.Instruction{{Op: 0x00, K: 6}, {Op: 0x45, Jt: 0, Jf: 1, K: 2}, {Op: 0x06, K: 1}, {Op: 0x06, K: 2}}, nil, 1},
		{"ja", []cbpf.Instruction{{Op: 0x05, K: 1}, {Op: 0x06, K: 1}, {Op: 0x06, K: 2}}, nil, 2},
	}
	for _, tc := range tests {
		p, err := cbpf.New(tc.ins)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := p.Run(tc.pkt); got != tc.want {
			t.Errorf("%s: %#x, want %#x", tc.name, got, tc.want)
		}
	}
}

// TestRunAllocs: Run allocates nothing.
func TestRunAllocs(t *testing.T) {
	p, err := cbpf.New([]cbpf.Instruction{{Op: 0x00, K: 9}, {Op: 0x02, K: 3}, {Op: 0x28, K: 12}, {Op: 0x16}})
	if err != nil {
		t.Fatal(err)
	}
	pkt := frames[0]
	if n := testing.AllocsPerRun(100, func() { p.Run(pkt) }); n != 0 {
		t.Errorf("%v allocations per Run", n)
	}
}

func TestParseDecimal(t *testing.T) {
	ins, err := cbpf.ParseDecimal(strings.NewReader("2\n40 0 0 12\n6 0 0 262144\n"))
	if err != nil || len(ins) != 2 || ins[0].Op != 40 || ins[1].K != 262144 {
		t.Errorf("%v, %v", ins, err)
	}
	for _, bad := range []string{"", "3\n6 0 0 1\n", "1\n6 0 0\n", "1\n6 0 0 x\n", "x\n", "1\n6 0 256 1\n"} {
		if _, err := cbpf.ParseDecimal(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// BenchmarkUDPPort9 is the filter "udp port 9" on a UDP frame.
func BenchmarkUDPPort9(b *testing.B) {
	p, err := cbpf.Compile("udp port 9", 262144)
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		p.Run(frames[0])
	}
}

// Example runs a program that keeps IPv4 frames (what `tcpdump -ddd ip`
// prints, Compile's source) over a frame.
func Example() {
	p, err := cbpf.New([]cbpf.Instruction{
		{Op: 0x28, K: 12},                   // ldh [12]: the EtherType
		{Op: 0x15, Jt: 0, Jf: 1, K: 0x0800}, // jeq #0x800 (IPv4)
		{Op: 0x06, K: 262144},               // ret: keep
		{Op: 0x06, K: 0},                    // ret: reject
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Run(frames[0]) != 0)
	// Output: true
}
