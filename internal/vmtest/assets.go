package vmtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// Assets are what a guest is made of: QEMU, a kernel and its modules (from
// fetch-assets.sh's cache), busybox, and the guest's two Go programs, built
// static from this tree once per test binary.
type Assets struct {
	QEMU    string
	Kernel  string // bzImage
	Modules string // directory of decompressed .ko files
	Busybox string // static
	Release string // the kernel's release, for the record
	Xdpfwd  string // static binary of ./cmd/xdpfwd
	Agent   string // static binary of ./internal/vmtest/agent
}

// CacheDir is where fetch-assets.sh leaves the kernel and modules:
// $XDPFWD_VM_CACHE, or /var/cache/xdpfwd-vm.
func CacheDir() string {
	if d := os.Getenv("XDPFWD_VM_CACHE"); d != "" {
		return d
	}
	return "/var/cache/xdpfwd-vm"
}

// modules are the guest's modules, in load order (dependencies first).
var modules = []string{
	"dca", "i2c-algo-bit", "igb", // igb
	"failover", "net_failover", "virtio_net", // virtio-net
	"llc", "stp", "bridge", // the Linux bridge, the iommu workload's baseline
	"veth", // a link without zero-copy
}

var (
	assetsOnce sync.Once
	assets     *Assets
	assetsErr  error
)

// Require returns the assets, or skips t when they are missing or the test
// does not run as root, and fails it instead with
// XDPFWD_REQUIRE_INTEGRATION=1, saying how to get what is missing.
func Require(t testing.TB) *Assets {
	t.Helper()
	topo.RequireRoot(t)
	assetsOnce.Do(func() { assets, assetsErr = findAssets() })
	if assetsErr != nil {
		if os.Getenv("XDPFWD_REQUIRE_INTEGRATION") == "1" {
			t.Fatalf("vmtest: %v", assetsErr)
		}
		t.Skipf("vmtest: %v", assetsErr)
	}
	return assets
}

func findAssets() (*Assets, error) {
	a := &Assets{}
	var missing []string
	need := func(path, what string) string {
		if _, err := os.Stat(path); err != nil {
			missing = append(missing, what+" ("+path+")")
		}
		return path
	}
	if p, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		a.QEMU = p
	} else {
		missing = append(missing, "qemu-system-x86_64")
	}
	dir := CacheDir()
	a.Kernel = need(filepath.Join(dir, "vmlinuz"), "guest kernel")
	a.Modules = filepath.Join(dir, "modules")
	for _, m := range modules {
		need(filepath.Join(a.Modules, m+".ko"), "module "+m)
	}
	a.Busybox = need("/bin/busybox", "busybox-static")
	if out, err := exec.Command("file", "-L", a.Busybox).Output(); err == nil && !strings.Contains(string(out), "statically linked") {
		missing = append(missing, "a static busybox (busybox-static, not busybox)")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "release")); err == nil {
		a.Release = strings.TrimSpace(string(b))
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s: run internal/vmtest/fetch-assets.sh (as root; .ci/install does)", strings.Join(missing, ", "))
	}
	var err error
	if a.Xdpfwd, err = buildStatic("./cmd/xdpfwd"); err != nil {
		return nil, err
	}
	if a.Agent, err = buildStatic("./internal/vmtest/agent"); err != nil {
		return nil, err
	}
	return a, nil
}

// buildStatic builds pkg (relative to the module root) without cgo, so
// that it runs in a guest with no C library.
func buildStatic(pkg string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "xdpfwd-vmtest-bin-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command(goTool(), "build", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s for the guest: %w\n%s", pkg, err, b)
	}
	return out, nil
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// moduleRoot is the directory of the go.mod this package belongs to.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("vmtest: cannot locate the source tree")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..")), nil
}

// The guest's PID 1 is busybox init, which reaps the daemons a script
// started in the background once the script has exited; it runs rcScript,
// then keeps the agent serving the host on the second serial port.
const inittab = `::sysinit:/etc/rc
::respawn:/bin/agent /dev/ttyS1
`

// rcScript mounts what xdpfwd and the tests need and loads the NIC drivers.
const rcScript = `#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t tmpfs run /run
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mkdir -p /dev/hugepages && mount -t hugetlbfs none /dev/hugepages
for m in $(cat /etc/modules); do insmod /lib/modules/$m.ko; done
ip link set lo up
echo "vmtest: init done $(cut -d' ' -f1 /proc/uptime)s"
`

// buildInitramfs writes the guest's root file system to path.
func (a *Assets) buildInitramfs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	ar := newArchive(w)
	ar.copyFile("/bin/busybox", a.Busybox)
	applets, err := exec.Command(a.Busybox, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox --list: %w", err)
	}
	for _, name := range strings.Fields(string(applets)) {
		if name != "busybox" {
			ar.symlink("/bin/"+name, "busybox")
		}
	}
	ar.symlink("/sbin", "bin")
	ar.symlink("/usr/bin", "../bin")
	ar.symlink("/usr/sbin", "../bin")
	for _, d := range []string{"/proc", "/sys", "/dev", "/tmp", "/run", "/etc"} {
		ar.mkdirAll(d)
	}
	ar.symlink("/init", "bin/busybox")
	ar.file("/etc/inittab", 0o644, []byte(inittab))
	ar.file("/etc/rc", 0o755, []byte(rcScript))
	ar.file("/etc/modules", 0o644, []byte(strings.Join(modules, "\n")+"\n"))
	ar.file("/etc/passwd", 0o644, []byte("root:x:0:0:root:/:/bin/sh\n"))
	for _, m := range modules {
		ar.copyFile("/lib/modules/"+m+".ko", filepath.Join(a.Modules, m+".ko"))
	}
	ar.copyFile("/bin/xdpfwd", a.Xdpfwd)
	ar.copyFile("/bin/agent", a.Agent)
	if err := ar.close(); err != nil {
		return fmt.Errorf("initramfs %s: %w", path, err)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}
