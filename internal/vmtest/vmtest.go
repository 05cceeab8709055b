// Package vmtest runs xdpfwd on real NIC drivers: it boots a QEMU guest (a
// q35 machine under TCG, with an emulated Intel IOMMU in strict mode and two
// igb or virtio-net NICs) from an initramfs it builds, and runs shell
// scripts in it through an agent on the guest's second serial port.
//
// Each guest NIC is backed by a tap in a network namespace of its own on
// the host, so the host's two namespaces are the machines on either side
// of the guest: traffic goes A → tap → guest NIC → xdpfwd → guest NIC →
// tap → B. The guest's drivers are the kernel's real ones (igb with its
// AF_XDP zero-copy, virtio_net with its own), behind the IOMMU, so zero-copy
// binding, receive buffer sizing, promiscuous filtering, RSS and DMA
// mapping behave as on hardware. Under TCG only counts mean anything,
// never timings.
//
// The package owns the VM's processes, taps and namespaces; it never
// touches anything on the host outside the namespaces it created. The
// kernel, its modules and QEMU come from fetch-assets.sh beside this file
// (CI runs it); Require says what is missing.
package vmtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// NIC is the guest's network device model.
type NIC string

const (
	// IGB is QEMU's model of the Intel 82576, driven by Linux's igb, which
	// has AF_XDP zero-copy since Linux 6.14.
	IGB NIC = "igb"
	// Virtio is virtio-net-pci with iommu_platform=on (so its DMA goes
	// through the IOMMU, as a hardware NIC's does), driven by virtio_net.
	Virtio NIC = "virtio"
)

// Config describes a VM. The zero value is igb with one queue.
type Config struct {
	NIC NIC
	// Queues is the tap queues behind each virtio NIC (mq); igb's model
	// has its own RSS queues whatever the tap has. 0: 1.
	Queues int
	// MTU of the taps (the host side); the guest sets its own. 0: 1500.
	MTU int
	// MemoryMiB is the guest's memory. 0: 2048.
	MemoryMiB int
	// NoIndirectDesc turns off virtio's indirect descriptors
	// (indirect_desc=off): virtio_ring then maps no descriptor table per
	// packet sent (see TestNICs' iommu scenario).
	NoIndirectDesc bool
}

// Guest addresses: A and B are the host namespaces on either side.
var (
	AddrA = netip.MustParseAddr("198.18.7.1")
	AddrB = netip.MustParseAddr("198.18.7.2")
)

// VM is a running guest and the two host namespaces wired to it.
type VM struct {
	A, B *topo.NS
	// MACA and MACB are the taps' addresses (the hosts' NICs).
	MACA, MACB net.HardwareAddr

	cfg     Config
	dir     string
	cmd     *exec.Cmd
	exited  chan struct{}
	conn    net.Conn
	replies *bufio.Scanner
	mu      sync.Mutex // one request at a time
	id      int        // the last request's, under mu
	daemons int        // xdpfwd runs started, to name their files
}

// Start boots a VM for t and removes it, its taps and namespaces when t
// ends. It fails t (never skips) on any error once Require has passed.
func Start(t testing.TB, cfg Config) *VM {
	t.Helper()
	a := Require(t)
	vm, err := boot(a, cfg, t.TempDir())
	if errors.Is(err, errNoAgent) {
		// Under TCG on a loaded host the guest's early boot can miss its
		// timer checks and panic: that is the emulator, not xdpfwd, so
		// one more boot is allowed, and said.
		t.Logf("vmtest: guest did not come up (%v); console:\n%s\nbooting once more", err, vm.ConsoleTail(20))
		vm.Close()
		vm, err = boot(a, cfg, t.TempDir())
	}
	if vm != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("guest console (tail):\n%s", vm.ConsoleTail(60))
			}
			vm.Close()
		})
	}
	if err != nil {
		t.Fatalf("vmtest: %v", err)
	}
	return vm
}

func boot(a *Assets, cfg Config, dir string) (_ *VM, err error) {
	if cfg.NIC == "" {
		cfg.NIC = IGB
	}
	if cfg.Queues == 0 {
		cfg.Queues = 1
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 2048
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := a.buildInitramfs(initrd); err != nil {
		return nil, err
	}
	vm := &VM{cfg: cfg, dir: dir, exited: make(chan struct{})}
	if vm.A, err = topo.NewNS("vma"); err != nil {
		return nil, err
	}
	if vm.B, err = topo.NewNS("vmb"); err != nil {
		return vm, err
	}
	tapA, tapB := "vt"+vm.A.Name[7:15]+"a", "vt"+vm.A.Name[7:15]+"b"
	// QEMU creates both taps in A, where it runs; B's moves once it is
	// open. The host's root namespace never sees either.
	if err := vm.A.Do(func() error { return vm.startQEMU(a, initrd, tapA, tapB) }); err != nil {
		return vm, err
	}
	if err := vm.wireHosts(tapA, tapB); err != nil {
		return vm, err
	}
	if err := vm.connect(90 * time.Second); err != nil {
		return vm, err
	}
	return vm, nil
}

func (vm *VM) startQEMU(a *Assets, initrd, tapA, tapB string) error {
	args := []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-machine", "q35,kernel-irqchip=split", "-smp", "2",
		"-m", fmt.Sprint(vm.cfg.MemoryMiB),
		"-device", "intel-iommu,intremap=on,device-iotlb=off",
		"-kernel", a.Kernel, "-initrd", initrd,
		"-append", "console=ttyS0 intel_iommu=on iommu.strict=1 panic=-1 quiet loglevel=4 net.ifnames=0 no_timer_check",
		"-display", "none", "-no-reboot", "-nodefaults",
		"-serial", "file:" + filepath.Join(vm.dir, "console.log"),
		"-chardev", "socket,id=ctl,path=" + filepath.Join(vm.dir, "ctl.sock") + ",server=on,wait=off",
		"-serial", "chardev:ctl",
	}
	for i, tap := range []string{tapA, tapB} {
		nd := fmt.Sprintf("tap,id=n%d,ifname=%s,script=no,downscript=no,vnet_hdr=off", i, tap)
		var dev string
		switch vm.cfg.NIC {
		case IGB:
			// Explicit slots: otherwise the second igb lands where QEMU
			// reserves a function for igbvf.
			dev = fmt.Sprintf("igb,netdev=n%d,bus=pcie.0,addr=0x%x", i, 4+2*i)
		case Virtio:
			q := vm.cfg.Queues
			if q > 1 {
				nd += fmt.Sprintf(",queues=%d", q)
			}
			dev = fmt.Sprintf("virtio-net-pci,netdev=n%d,bus=pcie.0,addr=0x%x,iommu_platform=on,disable-legacy=on,mq=%s,vectors=%d,indirect_desc=%s",
				i, 4+2*i, onOff(q > 1), 2*q+2, onOff(!vm.cfg.NoIndirectDesc))
		default:
			return fmt.Errorf("unknown NIC model %q", vm.cfg.NIC)
		}
		args = append(args, "-netdev", nd, "-device", dev)
	}
	vm.cmd = exec.Command(a.QEMU, args...)
	logf, err := os.Create(filepath.Join(vm.dir, "qemu.log"))
	if err != nil {
		return err
	}
	vm.cmd.Stdout, vm.cmd.Stderr = logf, logf
	vm.cmd.SysProcAttr = &unix.SysProcAttr{Pdeathsig: unix.SIGKILL}
	if err := vm.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", a.QEMU, err)
	}
	go func() {
		vm.cmd.Wait()
		logf.Close()
		close(vm.exited)
	}()
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// wireHosts waits for QEMU's taps, moves B's into B, and gives each host
// its address and a static neighbour for the other: QEMU's igb drops frames
// shorter than 60 bytes from a tap once XDP runs, and Linux sends its
// 42-byte ARP replies to a tap unpadded, which no wire would do.
func (vm *VM) wireHosts(tapA, tapB string) error {
	var la, lb netlink.Link
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := vm.A.Do(func() error {
			var err error
			if la, err = netlink.LinkByName(tapA); err != nil {
				return err
			}
			lb, err = netlink.LinkByName(tapB)
			return err
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || vm.hasExited() {
			return fmt.Errorf("taps %s, %s: %w (qemu: %s)", tapA, tapB, err, vm.qemuLog())
		}
		time.Sleep(20 * time.Millisecond)
	}
	vm.MACA, vm.MACB = la.Attrs().HardwareAddr, lb.Attrs().HardwareAddr
	bfd, err := os.Open("/run/netns/" + vm.B.Name)
	if err != nil {
		return err
	}
	defer bfd.Close()
	if err := vm.A.Do(func() error { return netlink.LinkSetNsFd(lb, int(bfd.Fd())) }); err != nil {
		return fmt.Errorf("move %s into %s: %w", tapB, vm.B.Name, err)
	}
	for _, side := range []struct {
		ns        *topo.NS
		tap       string
		addr      netip.Addr
		peer      netip.Addr
		peerMAC   net.HardwareAddr
		ownMAC    net.HardwareAddr
		otherSide string
	}{
		{vm.A, tapA, AddrA, AddrB, vm.MACB, vm.MACA, "B"},
		{vm.B, tapB, AddrB, AddrA, vm.MACA, vm.MACB, "A"},
	} {
		err := side.ns.Do(func() error {
			l, err := netlink.LinkByName(side.tap)
			if err != nil {
				return err
			}
			os.WriteFile("/proc/sys/net/ipv6/conf/"+side.tap+"/disable_ipv6", []byte("1"), 0)
			if err := netlink.LinkSetMTU(l, vm.cfg.MTU); err != nil {
				return fmt.Errorf("mtu %d: %w", vm.cfg.MTU, err)
			}
			if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: side.addr.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			lo, err := netlink.LinkByName("lo")
			if err == nil {
				netlink.LinkSetUp(lo)
			}
			return netlink.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_INET,
				State: netlink.NUD_PERMANENT, IP: side.peer.AsSlice(), HardwareAddr: side.peerMAC})
		})
		if err != nil {
			return fmt.Errorf("host %s (%s): %w", side.ns.Name, side.tap, err)
		}
	}
	return nil
}

// connect waits for the agent's "ready" line on the control socket.
func (vm *VM) connect(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	sock := filepath.Join(vm.dir, "ctl.sock")
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			vm.conn = c
			break
		}
		if time.Now().After(deadline) || vm.hasExited() {
			return fmt.Errorf("%w: control socket: %w (qemu: %s)", errNoAgent, err, vm.qemuLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
	vm.replies = bufio.NewScanner(vm.conn)
	vm.replies.Buffer(make([]byte, 1<<20), 64<<20)
	r, err := vm.read(time.Until(deadline))
	if err != nil {
		return fmt.Errorf("%w: %w", errNoAgent, err)
	}
	if r.Out != "ready" {
		return fmt.Errorf("guest agent: unexpected greeting %q", r.Out)
	}
	return nil
}

// errNoAgent: the guest never answered on its serial port.
var errNoAgent = errors.New("guest agent did not start")

// Request is what the host sends the agent: a script for /bin/sh.
type Request struct {
	ID      int     `json:"id"`
	Script  string  `json:"sh"`
	Timeout float64 `json:"timeout"`
}

// Reply is the agent's answer: rc 124 means the script overran its time.
type Reply struct {
	ID  int    `json:"id"`
	RC  int    `json:"rc"`
	Out string `json:"out"`
}

func (vm *VM) read(timeout time.Duration) (Reply, error) {
	vm.conn.SetReadDeadline(time.Now().Add(timeout))
	var r Reply
	for {
		if !vm.replies.Scan() {
			err := vm.replies.Err()
			if err == nil {
				err = errors.New("guest closed its serial port")
			}
			return r, err
		}
		line := bytes.TrimSpace(vm.replies.Bytes())
		// Anything before the agent's first line is the port's noise.
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		if err := json.Unmarshal(line, &r); err != nil {
			return r, fmt.Errorf("agent reply %q: %w", line, err)
		}
		return r, nil
	}
}

// Exec runs script in the guest with a time limit and returns its exit
// code and combined output.
func (vm *VM) Exec(script string, timeout time.Duration) (int, string, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.id++
	req, _ := json.Marshal(Request{ID: vm.id, Script: script, Timeout: timeout.Seconds()})
	vm.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := vm.conn.Write(append(req, '\n')); err != nil {
		return -1, "", fmt.Errorf("send to guest: %w", err)
	}
	r, err := vm.read(timeout + 15*time.Second)
	if err != nil {
		return -1, "", err
	}
	if r.ID != vm.id {
		return -1, r.Out, fmt.Errorf("agent answered request %d, want %d", r.ID, vm.id)
	}
	return r.RC, r.Out, nil
}

// Run runs script in the guest and fails t unless it exits 0.
func (vm *VM) Run(t testing.TB, script string, timeout time.Duration) string {
	t.Helper()
	rc, out, err := vm.Exec(script, timeout)
	if err != nil {
		t.Fatalf("guest: %q: %v", script, err)
	}
	if rc != 0 {
		t.Fatalf("guest: %q: exit %d:\n%s", script, rc, out)
	}
	return out
}

func (vm *VM) hasExited() bool {
	select {
	case <-vm.exited:
		return true
	default:
		return false
	}
}

func (vm *VM) qemuLog() string {
	b, _ := os.ReadFile(filepath.Join(vm.dir, "qemu.log"))
	return strings.TrimSpace(string(b))
}

// ConsoleTail returns the last n lines of the guest's console.
func (vm *VM) ConsoleTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(vm.dir, "console.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Close powers the guest off (killing QEMU, which this package started, by
// its PID if it does not stop), then removes the namespaces and with them
// the taps.
func (vm *VM) Close() error {
	if vm.cmd != nil && vm.cmd.Process != nil {
		if vm.conn != nil {
			vm.conn.SetWriteDeadline(time.Now().Add(time.Second))
			vm.conn.Write([]byte(`{"id":-2,"sh":"poweroff -f","timeout":5}` + "\n"))
		}
		select {
		case <-vm.exited:
		case <-time.After(5 * time.Second):
			vm.cmd.Process.Kill()
			<-vm.exited
		}
	}
	if vm.conn != nil {
		vm.conn.Close()
	}
	return errors.Join(vm.A.Close(), vm.B.Close())
}
