package handover

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pair is a handover's two sides over a unix socket in a temporary
// directory, as the daemons have them on the control socket.
func pair(t *testing.T) (pred, succ *Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		c   *Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			ch <- accepted{err: err}
			return
		}
		h, err := Accept(c, c)
		ch <- accepted{h, err}
	}()
	succ, err = Dial(path, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	t.Cleanup(func() { succ.Close(); a.c.Close() })
	return a.c, succ
}

// TestMessagesAndFiles: messages arrive whole and in order, files with
// them (more than fit one SCM_RIGHTS message), and a peer that closed is
// io.EOF.
func TestMessagesAndFiles(t *testing.T) {
	pred, succ := pair(t)
	type msg struct{ N int }
	if err := pred.Send(msg{7}); err != nil {
		t.Fatal(err)
	}
	const n = filesPerMsg + 3
	var files []*os.File
	for i := 0; i < n; i++ {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte{byte(i)})
		w.Close()
		files = append(files, r)
	}
	if err := pred.SendFiles(files); err != nil {
		t.Fatal(err)
	}
	if err := pred.Send(msg{8}); err != nil {
		t.Fatal(err)
	}
	var m msg
	if err := succ.Recv(&m, time.Second); err != nil || m.N != 7 {
		t.Fatalf("first message: %+v %v", m, err)
	}
	got, err := succ.RecvFiles(n, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range got {
		var b [1]byte
		if _, err := f.Read(b[:]); err != nil || b[0] != byte(i) {
			t.Errorf("file %d reads %d, %v", i, b[0], err)
		}
		f.Close()
		files[i].Close()
	}
	if err := succ.Recv(&m, time.Second); err != nil || m.N != 8 {
		t.Fatalf("message after the files: %+v %v", m, err)
	}
	pred.Close()
	if err := succ.Recv(&m, time.Second); !errors.Is(err, io.EOF) {
		t.Errorf("Recv from a closed peer: %v, want io.EOF", err)
	}
}

// TestSendFilesLeavesDescriptionNonblocking: sending a listener's file
// leaves the open file description it shares with the listener still
// accepting non-blocking, so that Close of that listener ends an Accept
// under way. (os.File.Fd would make it blocking: the next accept then
// blocks in the kernel, and Close waits for it: a predecessor that
// handed its control socket over hung at its end.)
func TestSendFilesLeavesDescriptionNonblocking(t *testing.T) {
	pred, succ := pair(t)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "l.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan error, 4)
	go func() {
		for {
			c, err := ln.Accept()
			accepted <- err
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	f, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pred.SendFiles([]*os.File{f}); err != nil {
		t.Fatal(err)
	}
	got, err := succ.RecvFiles(1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer got[0].Close()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	rc.Control(func(fd uintptr) { flags, err = unix.FcntlInt(fd, unix.F_GETFL, 0) })
	if err != nil || flags&unix.O_NONBLOCK == 0 {
		t.Errorf("the listener's file description after SendFiles: flags %#x, %v; want O_NONBLOCK", flags, err)
	}
	// The accept loop goes round once more, then the listener closes.
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- ln.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the listener's Close is stuck behind its Accept 5 s later")
	}
	if err := <-accepted; err == nil {
		t.Error("Accept went on after Close")
	}
}
