package vmtest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// An archive is an initramfs being put together: the guest's whole root
// file system, written as one "newc" cpio archive (the format the kernel
// unpacks; see Documentation/driver-api/early-userspace/buffer-format.rst).
type archive struct {
	w    io.Writer
	ino  uint32
	dirs map[string]bool
	err  error
}

func newArchive(w io.Writer) *archive {
	return &archive{w: w, ino: 1, dirs: map[string]bool{".": true, "/": true}}
}

// header writes one newc header and name; data follows it, padded by the
// caller through pad.
func (a *archive) header(name string, mode uint32, size int, nlink uint32) {
	if a.err != nil {
		return
	}
	name = strings.TrimPrefix(filepath.Clean(name), "/")
	_, a.err = fmt.Fprintf(a.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%s\x00",
		a.ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0, name)
	a.ino++
	a.pad(110 + len(name) + 1)
}

func (a *archive) pad(n int) {
	if a.err == nil && n%4 != 0 {
		_, a.err = a.w.Write(make([]byte, 4-n%4))
	}
}

// mkdirAll adds dir and its parents, once each.
func (a *archive) mkdirAll(dir string) {
	dir = filepath.Clean(dir)
	if a.dirs[dir] {
		return
	}
	a.mkdirAll(filepath.Dir(dir))
	a.dirs[dir] = true
	a.header(dir, 0o40755, 0, 2)
}

// file adds data at name with mode perm.
func (a *archive) file(name string, perm uint32, data []byte) {
	a.mkdirAll(filepath.Dir(name))
	a.header(name, 0o100000|perm, len(data), 1)
	if a.err == nil {
		_, a.err = a.w.Write(data)
	}
	a.pad(len(data))
}

// copyFile adds the host file src at name, keeping its permission bits.
func (a *archive) copyFile(name, src string) {
	data, err := os.ReadFile(src)
	if err != nil {
		if a.err == nil {
			a.err = fmt.Errorf("initramfs: %w", err)
		}
		return
	}
	perm := uint32(0o644)
	if st, err := os.Stat(src); err == nil {
		perm = uint32(st.Mode().Perm())
	}
	a.file(name, perm, data)
}

// symlink adds name pointing at target.
func (a *archive) symlink(name, target string) {
	a.mkdirAll(filepath.Dir(name))
	a.header(name, 0o120777, len(target), 1)
	if a.err == nil {
		_, a.err = io.WriteString(a.w, target)
	}
	a.pad(len(target))
}

// close writes the trailer.
func (a *archive) close() error {
	a.header("TRAILER!!!", 0, 0, 1)
	return a.err
}
