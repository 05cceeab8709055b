package xsk

import (
	"golang.org/x/sys/unix"

	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/vishvananda/netlink"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// loadUnattached builds a Program with its maps and the plain redirect
// program, attached nowhere, for BPF_PROG_TEST_RUN.
func loadUnattached(t *testing.T) *Program {
	t.Helper()
	topo.RequireRoot(t)
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := &Program{ifname: "test", xsks: xsks}
	t.Cleanup(func() { p.Close() })
	if p.passed, err = newPassedMap(); err != nil {
		t.Fatal(err)
	}
	// Several queues, as links have: the program indexes the stamps by
	// queue, which the verifier must accept.
	if p.stamps, err = newLastStamps(4); err != nil {
		t.Fatal(err)
	}
	if p.prog, err = loadRedirect(xsks, p.passed, p.stamps, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPassedCounts: with no socket in the XSKMAP every run passes the frame
// to the stack, and Passed rises by exactly the number of runs.
func TestPassedCounts(t *testing.T) {
	p := loadUnattached(t)
	frame := make([]byte, 64)
	copy(frame, []byte{0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x88, 0xb5})
	if n, err := p.Passed(); err != nil || n != 0 {
		t.Fatalf("Passed before any run: %d, %v; want 0", n, err)
	}
	var want uint64
	for _, repeat := range []uint32{1, 7, 1000} {
		ret, err := p.prog.Run(&ebpf.RunOptions{Data: frame, Repeat: repeat})
		if err != nil {
			t.Fatalf("test run ×%d: %v", repeat, err)
		}
		if ret != xdpPass {
			t.Fatalf("test run ×%d returned action %d, want XDP_PASS (%d)", repeat, ret, xdpPass)
		}
		want += uint64(repeat)
		if n, err := p.Passed(); err != nil || n != want {
			t.Fatalf("after %d runs Passed = %d, %v; want %d", want, n, err, want)
		}
	}
	p.Close()
	if _, err := p.Passed(); err == nil {
		t.Error("Passed on a closed program succeeded")
	}
}

// TestLastStampFollowsRuns: every run that stamps a packet records the
// stamp as its queue's newest, readable through the mapped array without a
// syscall; runs come one after another, so the newest only grows.
func TestLastStampFollowsRuns(t *testing.T) {
	p := loadUnattached(t)
	if v := p.stamps.Load(0); v != 0 {
		t.Fatalf("newest stamp before any run: %d, want 0", v)
	}
	// Room for the metadata in front of the frame, as a driver leaves it.
	frame := make([]byte, 64)
	prev := int64(0)
	for i := range 3 {
		before := monoNS()
		if _, err := p.prog.Run(&ebpf.RunOptions{Data: frame}); err != nil {
			t.Fatal(err)
		}
		after := monoNS()
		v := p.stamps.Load(0)
		if v < before || v > after || v <= prev {
			t.Fatalf("run %d: newest stamp %d, want in [%d, %d] and above the last (%d)", i, v, before, after, prev)
		}
		prev = v
	}
	for q := 1; q < 5; q++ {
		if v := p.stamps.Load(q); v != 0 {
			t.Errorf("queue %d, which no run came in on, reads %d, want 0", q, v)
		}
	}
}

// TestLastStampBusyWhileStamping: while runs stamp packets on one CPU, a
// reader on another sees the queue's newest stamp as StampBusy at times
// (the program marks the queue before its clock read), and otherwise only
// stamps that grow; once the runs are over it reads a stamp again.
func TestLastStampBusyWhileStamping(t *testing.T) {
	p := loadUnattached(t)
	frame := make([]byte, 64)
	done := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		var err error
		for err == nil {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			_, err = p.prog.Run(&ebpf.RunOptions{Data: frame, Repeat: 100_000})
		}
		done <- err
	}()
	busy, stamps, prev := 0, 0, int64(0)
	deadline := time.Now().Add(20 * time.Second)
	for busy == 0 || stamps == 0 {
		if time.Now().After(deadline) {
			close(stop)
			<-done
			t.Fatalf("in 20 s of runs, %d reads found the queue busy and %d a stamp; want both", busy, stamps)
		}
		switch v := p.stamps.Load(0); {
		case v == StampBusy:
			busy++
		case v < prev:
			close(stop)
			<-done
			t.Fatalf("newest stamp went back from %d to %d", prev, v)
		case v > 0:
			stamps++
			prev = v
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := p.stamps.Load(0); v == StampBusy || v < prev {
		t.Fatalf("after the runs, the newest stamp reads %d; want a stamp at least %d", v, prev)
	}
}

// TestStampsOrNone: the metadata a test run hands out (it starts at
// data_meta) holds the time of the run where the arrival stamp goes, and 0
// from a program loaded without stamps (AttachConfig.NoStamps), which
// keeps no LastStamps either.
func TestStampsOrNone(t *testing.T) {
	p := loadUnattached(t)
	plain, err := loadRedirect(p.xsks, p.passed, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, tc := range []struct {
		name string
		prog *ebpf.Program
	}{{"stamps", p.prog}, {"no stamps", plain}} {
		// Non-zero bytes where the metadata will go: the program must
		// write every byte of it.
		in := make([]byte, 64)
		out := make([]byte, MetaLen+len(in))
		for i := range out {
			out[i] = 0xa5
		}
		before := monoNS()
		ret, err := tc.prog.Run(&ebpf.RunOptions{Data: in, DataOut: out})
		after := monoNS()
		if err != nil || ret != xdpPass {
			t.Fatalf("%s: test run: action %d, %v", tc.name, ret, err)
		}
		stamp := MetaStamp(out, MetaLen)
		if tc.prog == plain && stamp != 0 || tc.prog != plain && (stamp < before || stamp > after) {
			t.Errorf("%s: stamp %d; want the run's time, in [%d, %d], or 0 without stamps", tc.name, stamp, before, after)
		}
		if _, _, ok := MetaVLAN(out, MetaLen); ok || out[MetaLen-MetaVLANOff+4] != 0 {
			t.Errorf("%s: VLAN word %x, want zeroes", tc.name, out[:MetaLen-MetaStampOff])
		}
	}
}

func monoNS() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// TestLoadVLANProgram: on veth, this kernel takes the device-bound program
// that calls the VLAN metadata kfunc, and Attach in native mode uses it.
func TestLoadVLANProgram(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := netlink.LinkByName(p.LinkA)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Attach(p.LinkA, l.Attrs().Index, AttachConfig{Mode: XDPNative})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	if ok, err := prog.VLAN(); !ok {
		t.Fatalf("native program on veth does not recover VLAN tags: %v", err)
	}
	info, err := prog.prog.Info()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("program %s, VLAN recovery on", info.Name)
	// Loopback has no XDP RX metadata at all.
	if ok, err := rxVLANMetadata(1); ok || err != nil {
		t.Errorf("rxVLANMetadata(lo) = %v, %v; want false, nil", ok, err)
	}
	if err := prog.Close(); err != nil {
		t.Fatal(err)
	}
	gen, err := Attach(p.LinkA, l.Attrs().Index, AttachConfig{Mode: XDPGeneric})
	if err != nil {
		t.Fatalf("generic: %v", err)
	}
	defer gen.Close()
	if ok, err := gen.VLAN(); ok || err == nil {
		t.Errorf("generic program: VLAN() = %v, %v; want false and a reason", ok, err)
	}
}

// TestProgramBTF: the program the kernel holds, plain and device-bound,
// carries a BTF function named like the program, int (struct xdp_md *ctx),
// at its first instruction, and line info from that instruction on: what
// xdpdump (fentry/fexit on the program) and bpftool's line dump need.
func TestProgramBTF(t *testing.T) {
	topo.RequireRoot(t)
	p, err := topo.NewPair(topo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := netlink.LinkByName(p.LinkA)
	if err != nil {
		t.Fatal(err)
	}
	u := loadUnattached(t)
	for _, tc := range []struct {
		name    string
		ifindex int
	}{
		{"plain", 0},
		{"device-bound", l.Attrs().Index},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prog, err := loadRedirect(u.xsks, u.passed, u.stamps, tc.ifindex)
			if err != nil {
				t.Fatal(err)
			}
			defer prog.Close()
			info, err := prog.Info()
			if err != nil {
				t.Fatal(err)
			}
			if info.Name != ProgramName {
				t.Errorf("program name %q, want %q", info.Name, ProgramName)
			}
			if _, ok := info.BTFID(); !ok {
				t.Fatal("program loaded without BTF")
			}
			fns, err := info.FuncInfos()
			if err != nil {
				t.Fatalf("func info: %v", err)
			}
			if len(fns) != 1 || fns[0].Offset != 0 {
				t.Fatalf("func info %v: want one function at instruction 0", fns)
			}
			checkRedirectFunc(t, fns[0].Func)
			lines, err := info.LineInfos()
			if err != nil {
				t.Fatalf("line info: %v", err)
			}
			if len(lines) < 4 || lines[0].Offset != 0 {
				t.Fatalf("line info %v: want several lines, the first at instruction 0", lines)
			}
			if got := lines[0].Line.Line(); got != "int xdpfwd_redir(struct xdp_md *ctx)" {
				t.Errorf("first line %q", got)
			}
		})
	}
}

// checkRedirectFunc checks fn is int ProgramName(struct xdp_md *ctx), global.
func checkRedirectFunc(t *testing.T, fn *btf.Func) {
	t.Helper()
	if fn.Name != ProgramName || fn.Linkage != btf.GlobalFunc {
		t.Fatalf("BTF function %q, linkage %v; want %q, global", fn.Name, fn.Linkage, ProgramName)
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok || len(proto.Params) != 1 {
		t.Fatalf("BTF function type %v: want a prototype with one parameter", fn.Type)
	}
	if ret, ok := proto.Return.(*btf.Int); !ok || ret.Size != 4 || ret.Encoding != btf.Signed {
		t.Errorf("returns %v, want int", proto.Return)
	}
	ctx := proto.Params[0]
	ptr, ok := ctx.Type.(*btf.Pointer)
	if !ok {
		t.Fatalf("parameter %q is %v, want a pointer", ctx.Name, ctx.Type)
	}
	if s, ok := ptr.Target.(*btf.Struct); !ok || s.Name != "xdp_md" || ctx.Name != "ctx" {
		t.Errorf("parameter %q points to %v, want ctx, struct xdp_md", ctx.Name, ptr.Target)
	}
}

// TestBTFCostsNothing: with or without its function and line info, the
// kernel holds the same program: same tag (the hash of the instructions),
// same instructions after verification, same machine code size. The BTF
// is metadata beside the code, so it cannot cost anything per packet.
func TestBTFCostsNothing(t *testing.T) {
	u := loadUnattached(t)
	load := func(strip bool) *ebpf.ProgramInfo {
		t.Helper()
		spec, err := redirectSpec(u.xsks, u.passed, u.stamps, 0)
		if err != nil {
			t.Fatal(err)
		}
		if strip {
			for i, ins := range spec.Instructions {
				spec.Instructions[i] = btf.WithFuncMetadata(ins, nil).WithSource(nil)
			}
		}
		prog, err := ebpf.NewProgram(spec)
		if err != nil {
			t.Fatal(err)
		}
		// Open until the end: reading the instructions loads the BTF.
		t.Cleanup(func() { prog.Close() })
		info, err := prog.Info()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := info.BTFID(); ok == strip {
			t.Fatalf("stripped %v, yet BTF present %v", strip, ok)
		}
		return info
	}
	with, without := load(false), load(true)
	if with.Tag != without.Tag {
		t.Errorf("tag with BTF %s, without %s", with.Tag, without.Tag)
	}
	js1, err1 := with.JitedSize()
	js2, err2 := without.JitedSize()
	if err1 != nil || err2 != nil || js1 != js2 || js1 == 0 {
		t.Errorf("JIT size with BTF %d (%v), without %d (%v)", js1, err1, js2, err2)
	}
	x1, err1 := with.Instructions()
	x2, err2 := without.Instructions()
	if err1 != nil || err2 != nil {
		t.Fatalf("translated instructions: %v, %v", err1, err2)
	}
	if len(x1) != len(x2) {
		t.Fatalf("%d translated instructions with BTF, %d without", len(x1), len(x2))
	}
	for i := range x1 {
		a, b := x1[i], x2[i]
		if a.OpCode != b.OpCode || a.Dst != b.Dst || a.Src != b.Src || a.Offset != b.Offset || a.Constant != b.Constant {
			t.Errorf("instruction %d: %v with BTF, %v without", i, a, b)
		}
	}
	t.Logf("%d instructions, %d bytes of machine code either way", len(x1), js1)
}
