package pcapng_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/pcapng"
)

// block is one block as read back.
type block struct {
	typ  uint32
	body []byte
}

// readBlocks splits a section into blocks, checking each block's two
// lengths and alignment.
func readBlocks(b []byte) ([]block, error) {
	var out []block
	o := binary.NativeEndian
	for len(b) > 0 {
		if len(b) < 12 {
			return nil, fmt.Errorf("%d trailing bytes", len(b))
		}
		n := int(o.Uint32(b[4:]))
		if n < 12 || n%4 != 0 || n > len(b) || int(o.Uint32(b[n-4:])) != n {
			return nil, fmt.Errorf("block of %d bytes, trailer %d", n, o.Uint32(b[n-4:]))
		}
		out = append(out, block{o.Uint32(b), b[8 : n-4]})
		b = b[n:]
	}
	return out, nil
}

// epb reads an EPB's fields and options.
func epb(b []byte) (iface uint32, ts uint64, data []byte, orig uint32, opts map[uint16][]byte) {
	o := binary.NativeEndian
	iface = o.Uint32(b)
	ts = uint64(o.Uint32(b[4:]))<<32 | uint64(o.Uint32(b[8:]))
	capLen := o.Uint32(b[12:])
	orig = o.Uint32(b[16:])
	data = b[20 : 20+capLen]
	rest := b[20+(capLen+3)&^3:]
	opts = map[uint16][]byte{}
	for len(rest) >= 4 {
		code, l := o.Uint16(rest), o.Uint16(rest[2:])
		if code == 0 {
			break
		}
		opts[code] = rest[4 : 4+l]
		rest = rest[4+(l+3)&^3:]
	}
	return
}

func TestWriter(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcapng.NewWriter(&buf, "test", []pcapng.Interface{{Name: "veth0", SnapLen: 128}, {Name: "veth1"}})
	if err != nil {
		t.Fatal(err)
	}
	pkts := []struct {
		iface   int
		data    []byte
		orig    int
		dir     pcapng.Direction
		comment string
	}{
		{0, []byte{1, 2, 3}, 3, pcapng.DirInbound, "rx queue=0"},
		{1, bytes.Repeat([]byte{9}, 64), 1500, pcapng.DirOutbound, ""},
		{1, nil, 60, pcapng.DirUnknown, "drop queue=3 reason=rx_bad_descs"},
	}
	for i, p := range pkts {
		if err := w.Packet(p.iface, 1_700_000_000_123_456_789+int64(i), p.data, p.orig, p.dir, p.comment); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Packet(2, 0, nil, 0, 0, ""); err == nil {
		t.Error("a packet on interface 2 of 2 was written")
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	blocks, err := readBlocks(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 6 || blocks[0].typ != 0x0A0D0D0A || blocks[1].typ != 1 || blocks[2].typ != 1 {
		t.Fatalf("blocks %v, want SHB, 2 IDB, 3 EPB", blocks)
	}
	for i, p := range pkts {
		b := blocks[3+i]
		iface, ts, data, orig, opts := epb(b.body)
		if b.typ != 6 || int(iface) != p.iface || ts != 1_700_000_000_123_456_789+uint64(i) || !bytes.Equal(data, p.data) || int(orig) != p.orig {
			t.Errorf("packet %d: type %d iface %d ts %d data % x orig %d", i, b.typ, iface, ts, data, orig)
		}
		if got := string(opts[1]); got != p.comment {
			t.Errorf("packet %d: comment %q, want %q", i, got, p.comment)
		}
		if f, ok := opts[2]; ok != (p.dir != 0) || ok && binary.NativeEndian.Uint32(f) != uint32(p.dir) {
			t.Errorf("packet %d: flags % x, want direction %d", i, f, p.dir)
		}
	}
	// tshark, when installed (CI installs it), reads the same.
	if _, err := exec.LookPath("tshark"); err != nil {
		if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("tshark is not installed")
		}
		return
	}
	file := filepath.Join(t.TempDir(), "w.pcapng")
	os.WriteFile(file, buf.Bytes(), 0o600)
	out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-E", "separator=|", "-e", "frame.interface_name",
		"-e", "frame.packet_flags_direction", "-e", "frame.len", "-e", "frame.cap_len", "-e", "frame.time_epoch", "-e", "frame.comment").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	want := "veth0|0x00000001|3|3|1700000000.123456789|rx queue=0\n" +
		"veth1|0x00000002|1500|64|1700000000.123456790|\n" +
		"veth1||60|0|1700000000.123456791|drop queue=3 reason=rx_bad_descs\n"
	if got := strings.ReplaceAll(string(out), "\r", ""); got != want {
		t.Errorf("tshark reads:\n%s\nwant:\n%s", got, want)
	}
}

// TestAddInterface: an interface described between packets takes the next
// index; tshark and tcpdump read each packet on its interface.
func TestAddInterface(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcapng.NewWriter(&buf, "test", []pcapng.Interface{{Name: "a0"}})
	if err != nil {
		t.Fatal(err)
	}
	w.Packet(0, 1, []byte{1}, 60, pcapng.DirInbound, "")
	if err := w.Packet(1, 2, []byte{2}, 60, pcapng.DirInbound, ""); err == nil {
		t.Error("a packet on interface 1 of 1 was written")
	}
	for i, name := range []string{"b0", "c0"} {
		desc := map[string]string{"b0": "pod default/web-0"}[name] // c0: none
		if n, err := w.AddInterface(pcapng.Interface{Name: name, Description: desc}); n != i+1 || err != nil {
			t.Fatalf("AddInterface(%s) = %d, %v; want %d", name, n, err, i+1)
		}
	}
	w.Packet(2, 3, []byte{3}, 60, pcapng.DirInbound, "")
	w.Packet(1, 4, []byte{4}, 60, pcapng.DirInbound, "")
	w.Packet(0, 5, []byte{5}, 60, pcapng.DirInbound, "")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	blocks, err := readBlocks(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var types []uint32
	for _, b := range blocks {
		types = append(types, b.typ)
	}
	if want := []uint32{0x0A0D0D0A, 1, 6, 1, 1, 6, 6, 6}; fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("blocks of types %v, want %v", types, want)
	}
	if _, err := exec.LookPath("tshark"); err != nil {
		if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
			t.Fatal("tshark is not installed")
		}
		return
	}
	file := filepath.Join(t.TempDir(), "a.pcapng")
	os.WriteFile(file, buf.Bytes(), 0o600)
	out, err := exec.Command("tshark", "-r", file, "-T", "fields", "-E", "separator=|", "-e", "frame.interface_name", "-e", "frame.interface_description", "-e", "frame.len").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if got, want := strings.ReplaceAll(string(out), "\r", ""), "a0||60\nc0||60\nb0|pod default/web-0|60\na0||60\n"; got != want {
		t.Errorf("tshark reads:\n%s\nwant:\n%s", got, want)
	}
	if out, err := exec.Command("tcpdump", "-r", file, "-nn").CombinedOutput(); err != nil {
		t.Errorf("tcpdump -r: %v\n%s", err, out)
	} else if n := strings.Count(string(out), "\n"); n < 4 {
		t.Errorf("tcpdump -r reads %d lines:\n%s", n, out)
	}
}

// FuzzPacket: whatever the packet, comment and interface, the section is
// well formed and the packet reads back as written.
func FuzzPacket(f *testing.F) {
	f.Add([]byte{1, 2, 3}, "rx queue=1", uint8(0), uint16(3))
	f.Add([]byte{}, "", uint8(1), uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, comment string, iface uint8, extra uint16) {
		if len(comment) > 0xfffc {
			return
		}
		var buf bytes.Buffer
		w, err := pcapng.NewWriter(&buf, "fuzz", []pcapng.Interface{{Name: "a"}, {Name: comment}})
		if err != nil {
			t.Fatal(err)
		}
		err = w.Packet(int(iface), 1, data, len(data)+int(extra), pcapng.DirOutbound, comment)
		if iface >= 2 {
			if err == nil {
				t.Fatal("interface out of range accepted")
			}
			return
		}
		if err != nil || w.Flush() != nil {
			t.Fatal(err)
		}
		blocks, err := readBlocks(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		i, _, got, orig, opts := epb(blocks[3].body)
		if i != uint32(iface) || !bytes.Equal(got, data) || orig != uint32(len(data)+int(extra)) || string(opts[1]) != comment {
			t.Fatalf("read back iface %d, %d bytes, orig %d, comment %q", i, len(got), orig, opts[1])
		}
	})
}

// Example writes a capture of one packet to a buffer.
func Example() {
	var buf bytes.Buffer
	w, _ := pcapng.NewWriter(&buf, "example", []pcapng.Interface{{Name: "eth0"}})
	w.Packet(0, 1_700_000_000_000_000_000, []byte{0xff, 0xff}, 60, pcapng.DirInbound, "rx queue=0")
	w.Flush()
	fmt.Println(buf.Len())
	// Output: 148
}
