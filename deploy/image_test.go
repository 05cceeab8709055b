package deploy_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/image"
)

// imageRef is the image the manifests name: deploy/image's repository,
// at the placeholder tag operators replace.
const imageRef = "ghcr.io/xdpfwd/xdpfwd:VERSION"

// builtImage is deploy/image's archive, read back.
type builtImage struct {
	tags   []string
	config struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		Config       struct {
			Entrypoint   []string            `json:"Entrypoint"`
			Cmd          []string            `json:"Cmd"`
			User         string              `json:"User"`
			ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		} `json:"config"`
	}
	files map[string]*tar.Header
	data  map[string][]byte
	size  int64
}

// buildImage runs the repository's one command for the image, `go run
// ./deploy/image`, with the version the manifests name.
func buildImage(t *testing.T) *builtImage {
	t.Helper()
	out := filepath.Join(t.TempDir(), "xdpfwd.tar")
	cmd := exec.Command("go", "run", "./deploy/image", "-version", "VERSION", "-o", out)
	cmd.Dir = ".."
	msg, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./deploy/image: %v\n%s", err, msg)
	}
	t.Logf("go run ./deploy/image: %s", bytes.TrimSpace(msg))
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ar, err := image.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	img := &builtImage{tags: ar.Tags, files: map[string]*tar.Header{}, data: map[string][]byte{}, size: int64(len(ar.Layer))}
	if err := json.Unmarshal(ar.Config, &img.config); err != nil {
		t.Fatalf("the image's config: %v", err)
	}
	entries, err := ar.Entries()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := "/" + strings.TrimSuffix(e.Header.Name, "/")
		img.files[name], img.data[name] = e.Header, e.Data
	}
	return img
}

// TestImage: the image deploy/image builds is the one the manifests name
// and run as they say. Its tag is their image; the daemon's containers
// give only args, which its entrypoint, xdpfwd, takes; install-cni's
// command is in it; both binaries are static executables (no libc in
// the image), and nothing else runs there (no shell); the port the pod
// specs name is the one it exposes and --metrics serves; its user is the
// UID the security contexts give; every mount path is a directory in it
// (a read-only root needs nothing made). Its size is logged.
func TestImage(t *testing.T) {
	img := buildImage(t)
	if !slices.Equal(img.tags, []string{imageRef}) {
		t.Errorf("tags %q, want %s", img.tags, imageRef)
	}
	cfg := img.config.Config
	if img.config.OS != "linux" || !slices.Equal(cfg.Entrypoint, []string{unitBinary}) {
		t.Errorf("os %q, entrypoint %q; want linux, %s", img.config.OS, cfg.Entrypoint, unitBinary)
	}
	var bins []string
	for name, h := range img.files {
		if h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 {
			bins = append(bins, name)
		}
	}
	slices.Sort(bins)
	if want := []string{"/usr/local/bin/xdpfwd", "/usr/local/bin/xdpfwd-cni"}; !slices.Equal(bins, want) {
		t.Errorf("executables %q, want %q alone (no shell)", bins, want)
	}
	for _, b := range bins {
		e, err := elf.NewFile(bytes.NewReader(img.data[b]))
		if err != nil || slices.ContainsFunc(e.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }) {
			t.Errorf("%s: not a static executable (%v)", b, err)
		}
	}
	uid := strings.Split(cfg.User, ":")[0]
	for _, file := range []string{manifestFile, cniManifestFile} {
		for _, c := range manifestContainers(t, file) {
			where := fmt.Sprintf("%s: container %s", file, c.Name)
			if c.Image != imageRef {
				t.Errorf("%s: image %q, want %s (deploy/image's)", where, c.Image, imageRef)
			}
			switch {
			case len(c.Command) == 0 && (len(c.Args) == 0 || c.Args[0] != "run"):
				t.Errorf("%s: args %q: the entrypoint is xdpfwd, want run ...", where, c.Args)
			case len(c.Command) > 0:
				if h := img.files[c.Command[0]]; h == nil || h.Mode&0o111 == 0 {
					t.Errorf("%s: command %s is no executable of the image", where, c.Command[0])
				}
			}
			for _, p := range c.Ports {
				if _, ok := cfg.ExposedPorts[fmt.Sprintf("%d/tcp", p.ContainerPort)]; !ok {
					t.Errorf("%s: port %d, the image exposes %v", where, p.ContainerPort, cfg.ExposedPorts)
				}
				if m := flagValue(c.Args, "metrics"); m != "" && !strings.HasSuffix(m, fmt.Sprintf(":%d", p.ContainerPort)) {
					t.Errorf("%s: --metrics %s, not on port %d", where, m, p.ContainerPort)
				}
			}
			if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil && fmt.Sprint(*sc.RunAsUser) != uid {
				t.Errorf("%s: runAsUser %d, the image's user %q", where, *sc.RunAsUser, cfg.User)
			}
			for _, m := range c.VolumeMounts {
				if h := img.files[m.MountPath]; m.SubPath == "" && (h == nil || h.Typeflag != tar.TypeDir) {
					t.Errorf("%s: mount path %s is no directory of the image", where, m.MountPath)
				}
			}
		}
	}
	t.Logf("image %s: %d bytes (%.1f MiB), one layer on nothing", imageRef, img.size, float64(img.size)/(1<<20))
}

// manifestContainers are the containers of file's DaemonSet.
func manifestContainers(t *testing.T, file string) []container {
	t.Helper()
	if file == manifestFile {
		m := loadManifest(t)
		return append(slices.Clone(m.ds.Spec.Template.Spec.InitContainers), m.ds.Spec.Template.Spec.Containers...)
	}
	ds, _ := loadCNIManifest(t)
	return append(slices.Clone(ds.Spec.Template.Spec.InitContainers), ds.Spec.Template.Spec.Containers...)
}
