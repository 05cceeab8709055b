// Command image builds xdpfwd's container image, the one the manifests
// in deploy/kubernetes name, offline: the two static binaries (xdpfwd
// and xdpfwd-cni, CGO_ENABLED=0) in one layer on nothing (FROM scratch:
// no base image to pull, no shell, no libc: the binaries need only the
// kernel), written as a docker-archive that docker load, podman load and
// ctr image import read, and skopeo copies to a registry.
//
//	go run ./deploy/image -version 0.1.0 -o xdpfwd-0.1.0.tar
//
// It prints the image's reference and size.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/xdpfwd/xdpfwd/internal/image"
)

// Repository is where the manifests say the image is.
const Repository = "ghcr.io/xdpfwd/xdpfwd"

// The image's layout, which deploy/kubernetes's pod specs rely on
// (deploy/deploy_test.go's TestImage holds them to each other).
const (
	daemonPath  = "/usr/local/bin/xdpfwd"
	pluginPath  = "/usr/local/bin/xdpfwd-cni"
	metricsPort = "9425"
)

func main() {
	version := flag.String("version", "0.1.0-dev", "the version the binaries report (xdpfwd --version, xdpfwd_info)")
	tag := flag.String("tag", "", "the image's reference (default "+Repository+":VERSION)")
	out := flag.String("o", "", "the docker-archive to write (default xdpfwd-VERSION.tar)")
	arch := flag.String("arch", runtime.GOARCH, "the architecture to build for (GOARCH)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected %q\n", flag.Args())
		os.Exit(2)
	}
	if *tag == "" {
		*tag = Repository + ":" + *version
	}
	if *out == "" {
		*out = "xdpfwd-" + *version + ".tar"
	}
	if err := build(*tag, *version, *arch, *out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func build(tag, version, arch, out string) error {
	dir, err := os.MkdirTemp("", "xdpfwd-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	var files []image.File
	for _, b := range []struct{ pkg, path, ldflags string }{
		{"./cmd/xdpfwd", daemonPath, "-s -w -X main.version=" + version},
		{"./cmd/xdpfwd-cni", pluginPath, "-s -w"},
	} {
		bin := filepath.Join(dir, filepath.Base(b.path))
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", b.ldflags, "-o", bin, b.pkg)
		cmd.Dir = root
		// GOWORK=off: the daemon's module alone, not perf/'s.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH="+arch)
		if o, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, o)
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return err
		}
		files = append(files, image.File{Path: b.path, Mode: 0o755, Data: data})
	}
	// Mount points the pod specs use exist in the image, so that a
	// read-only root needs nothing made; /tmp for anything that asks.
	for _, d := range []string{"etc/xdpfwd", "run/xdpfwd", "host/opt/cni/bin", "host/etc/cni/net.d", "proc", "sys", "dev"} {
		files = append(files, image.File{Path: d, Dir: true, Mode: 0o755})
	}
	files = append(files, image.File{Path: "tmp", Dir: true, Mode: 0o1777})
	img := image.Image{
		Tag:   tag,
		Files: files,
		Arch:  arch,
		Config: image.Config{
			Entrypoint:   []string{daemonPath},
			Cmd:          []string{"run", "--config=/etc/xdpfwd/xdpfwd.yaml", "--metrics=:" + metricsPort},
			Env:          []string{"PATH=/usr/local/bin"},
			User:         "0:0",
			ExposedPorts: map[string]struct{}{metricsPort + "/tcp": {}},
			Labels: map[string]string{
				"org.opencontainers.image.title":   "xdpfwd",
				"org.opencontainers.image.version": version,
				"org.opencontainers.image.source":  "https://github.com/xdpfwd/xdpfwd",
			},
		},
	}
	var buf bytes.Buffer
	sizes, err := image.Write(&buf, img)
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	fmt.Printf("%s: %s, %d bytes (%.1f MiB; xdpfwd %.1f MiB, xdpfwd-cni %.1f MiB), in %s (%d bytes)\n",
		tag, arch, sizes.Layer, mib(sizes.Layer), mib(int64(len(files[0].Data))), mib(int64(len(files[1].Data))), out, sizes.Archive)
	return nil
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// moduleRoot is the directory of the go.mod of the module this runs in.
func moduleRoot() (string, error) {
	o, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(o))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not in xdpfwd's module (run it from the repository: go run ./deploy/image)")
	}
	return filepath.Dir(mod), nil
}
