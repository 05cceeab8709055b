package image_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/xdpfwd/xdpfwd/internal/image"
)

// TestWrite: the archive is docker save's format (read back by Read): a
// manifest naming the tag, the config and the layer; the config's diff_id is the layer's
// digest; the layer holds the files, a link, and the directories above
// them, in path order; the same image writes the same bytes.
func TestWrite(t *testing.T) {
	img := image.Image{
		Tag: "example.org/x:1",
		Files: []image.File{
			{Path: "/usr/local/bin/x", Mode: 0o755, Data: []byte("\x7fELF")},
			{Path: "bin/y", Mode: 0o777, Link: "../usr/local/bin/x"},
			{Path: "tmp", Dir: true, Mode: 0o1777},
		},
		Config: image.Config{Entrypoint: []string{"/usr/local/bin/x"}, ExposedPorts: map[string]struct{}{"80/tcp": {}}},
		Arch:   "arm64",
	}
	var a, b bytes.Buffer
	sizes, err := image.Write(&a, img)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := image.Write(&b, img); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("two writes of one image differ (%v): not reproducible", err)
	}
	ar, err := image.Read(bytes.NewReader(a.Bytes()))
	if err != nil || !slices.Equal(ar.Tags, []string{img.Tag}) {
		t.Fatalf("Read: %v, tags %q", err, ar.Tags)
	}
	var config struct {
		Architecture, OS string
		Config           image.Config
		RootFS           struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(ar.Config, &config); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(ar.Layer)
	if config.Architecture != "arm64" || config.OS != "linux" || !slices.Equal(config.RootFS.DiffIDs, []string{"sha256:" + hex.EncodeToString(sum[:])}) ||
		!slices.Equal(config.Config.Entrypoint, img.Config.Entrypoint) || sizes.Layer != int64(len(ar.Layer)) || sizes.Archive != int64(a.Len()) {
		t.Errorf("config %+v, sizes %+v; want arm64/linux, the layer's digest, the entrypoint, the sizes written", config, sizes)
	}
	entries, err := ar.Entries()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		h := e.Header
		names = append(names, h.Name)
		if h.Name == "bin/y" && (h.Typeflag != tar.TypeSymlink || h.Linkname != "../usr/local/bin/x") {
			t.Errorf("bin/y: %+v, want a link", h)
		}
		if h.Name == "tmp/" && h.Mode != 0o1777 {
			t.Errorf("tmp/: mode %o", h.Mode)
		}
	}
	if want := []string{"bin/", "bin/y", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/x"}; !slices.Equal(names, want) {
		t.Errorf("layer %q, want %q", names, want)
	}
}

func TestWriteRefuses(t *testing.T) {
	for _, img := range []image.Image{
		{Tag: "untagged"},
		{Tag: "x:1", Files: []image.File{{Path: "../etc/passwd"}}},
		{Tag: "x:1", Files: []image.File{{Path: "/"}}},
	} {
		if _, err := image.Write(io.Discard, img); err == nil || !strings.Contains(err.Error(), "image") {
			t.Errorf("Write(%+v): %v, want an error", img, err)
		}
	}
}
