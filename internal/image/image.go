// Package image writes container images as docker-archives (the format
// of docker save, which docker load, podman load and ctr image import
// read): one layer built from files given, and its configuration. It
// owns the archive's layout and digests; it never reads a base image or
// touches the network, so an image of static binaries is built offline
// (deploy/image, the tests' sandbox images).
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Image is an image of one layer.
type Image struct {
	// Tag is its reference, "registry/repository:tag".
	Tag string
	// Files are the layer's entries; the directories above each are
	// made (0755) unless given.
	Files []File
	// Config is what the runtime reads to start it.
	Config Config
	// Arch is its architecture (GOARCH's names); "": this program's.
	Arch string
	// Created stamps the layer's entries and the image; the zero time
	// stands for 1970-01-01, which keeps the archive the same for the
	// same files (a reproducible build).
	Created time.Time
}

// File is one entry of the layer: a regular file (Data), a directory
// (Dir), or a symbolic link (Link).
type File struct {
	Path string // relative to the root: "usr/local/bin/xdpfwd"
	Mode int64
	Data []byte
	Dir  bool
	Link string
}

// Config is the OCI image configuration's "config" (the fields a runtime
// starts a container from).
type Config struct {
	Entrypoint   []string            `json:"Entrypoint,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	Env          []string            `json:"Env,omitempty"`
	User         string              `json:"User,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
	Labels       map[string]string   `json:"Labels,omitempty"`
}

// Sizes are what Write wrote: the layer's bytes (the image's size, as a
// registry stores it uncompressed) and the whole archive's.
type Sizes struct {
	Layer, Archive int64
}

// Write writes img to w as a docker-archive.
func Write(w io.Writer, img Image) (Sizes, error) {
	if !strings.Contains(img.Tag, ":") {
		return Sizes{}, fmt.Errorf("image %q: want a tag, name:tag", img.Tag)
	}
	layer, err := img.layer()
	if err != nil {
		return Sizes{}, fmt.Errorf("image %s: %w", img.Tag, err)
	}
	diff := sha256.Sum256(layer)
	arch := img.Arch
	if arch == "" {
		arch = runtime.GOARCH
	}
	created := img.created()
	config, err := json.Marshal(map[string]any{
		"architecture": arch, "os": "linux", "created": created.Format(time.RFC3339),
		"config": img.Config,
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	if err != nil {
		return Sizes{}, err
	}
	cs := sha256.Sum256(config)
	configName := hex.EncodeToString(cs[:]) + ".json"
	layerName := hex.EncodeToString(diff[:]) + "/layer.tar"
	manifest, _ := json.Marshal([]map[string]any{{"Config": configName, "RepoTags": []string{img.Tag}, "Layers": []string{layerName}}})
	cw := &countingWriter{w: w}
	aw := tar.NewWriter(cw)
	for _, f := range []struct {
		name string
		b    []byte
	}{{layerName, layer}, {configName, config}, {"manifest.json", manifest}} {
		if err := aw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.b)), ModTime: created}); err != nil {
			return Sizes{}, err
		}
		if _, err := aw.Write(f.b); err != nil {
			return Sizes{}, err
		}
	}
	if err := aw.Close(); err != nil {
		return Sizes{}, err
	}
	return Sizes{Layer: int64(len(layer)), Archive: cw.n}, nil
}

func (img Image) created() time.Time {
	if img.Created.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return img.Created.UTC()
}

// layer is the layer's tar: every directory above a file first, the
// entries in path order.
func (img Image) layer() ([]byte, error) {
	entries := map[string]File{}
	for _, f := range img.Files {
		p := path.Clean(strings.TrimPrefix(f.Path, "/"))
		if p == "." || strings.HasPrefix(p, "..") {
			return nil, fmt.Errorf("file %q: not under the root", f.Path)
		}
		f.Path = p
		entries[p] = f
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		f := entries[n]
		h := &tar.Header{Name: n, Mode: f.Mode, ModTime: img.created()}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, n+"/"
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
		default:
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Archive is a docker-archive of one image of one layer, read back
// (Read): for a test, or a look at what was built.
type Archive struct {
	Tags   []string
	Config []byte // the configuration's JSON
	Layer  []byte // the layer's tar
}

// Read reads a docker-archive of one image of one layer, as Write writes
// it.
func Read(r io.Reader) (Archive, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		} else if err != nil {
			return Archive{}, fmt.Errorf("image archive: %w", err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			return Archive{}, fmt.Errorf("image archive: %s: %w", h.Name, err)
		}
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		return Archive{}, fmt.Errorf("image archive: manifest.json %q: want one image of one layer (%v)", files["manifest.json"], err)
	}
	m := manifest[0]
	return Archive{Tags: m.RepoTags, Config: files[m.Config], Layer: files[m.Layers[0]]}, nil
}

// Entries are the layer's entries, in its order: each header and its
// data.
func (a Archive) Entries() ([]Entry, error) {
	var out []Entry
	tr := tar.NewReader(bytes.NewReader(a.Layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("image layer: %w", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("image layer: %s: %w", h.Name, err)
		}
		out = append(out, Entry{Header: h, Data: data})
	}
}

// Entry is one entry of a layer.
type Entry struct {
	Header *tar.Header
	Data   []byte
}
