// Command agent is the guest side of package vmtest: the guest's init starts
// it on the second serial port, and it runs each shell script the host sends,
// one at a time, answering with the script's exit code and output.
//
// The protocol is one JSON object per line each way (vmtest.Request,
// vmtest.Reply); the agent never writes anything else on its port, so the
// kernel's console (the first port) can say what it likes.
//
// Scripts call the agent back for what busybox cannot do (commands.go):
// veth pairs, pods in network namespaces, link state, verified TCP
// streams and paced UDP.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"
)

type request struct {
	ID      int     `json:"id"`
	Script  string  `json:"sh"`
	Timeout float64 `json:"timeout"` // seconds; 0: 60
}

type reply struct {
	ID  int    `json:"id"`
	RC  int    `json:"rc"`
	Out string `json:"out"`
}

func main() {
	if len(os.Args) > 1 {
		if cmd, ok := commands[os.Args[1]]; ok {
			os.Exit(cmd(os.Args[2:]))
		}
	}
	port := "/dev/ttyS1"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	f, err := os.OpenFile(port, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	if err := makeRaw(int(f.Fd())); err != nil {
		fmt.Fprintln(os.Stderr, "agent: raw mode:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(f)
	// The host waits for this line before it sends anything.
	enc.Encode(reply{ID: 0, Out: "ready"})
	in := bufio.NewScanner(f)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			enc.Encode(reply{ID: -1, RC: 255, Out: "agent: bad request: " + err.Error()})
			continue
		}
		enc.Encode(run(req))
	}
}

// run runs one script under sh with its timeout; a script that overruns is
// killed with its whole process group and answers rc 124, as timeout(1) does.
func run(req request) reply {
	d := time.Duration(req.Timeout * float64(time.Second))
	if d <= 0 {
		d = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", req.Script)
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	r := reply{ID: req.ID, Out: string(out)}
	switch {
	case ctx.Err() != nil:
		r.RC = 124
	case err != nil:
		r.RC = 255
		if ee, ok := err.(*exec.ExitError); ok {
			r.RC = ee.ExitCode()
		} else {
			r.Out += "agent: " + err.Error()
		}
	}
	return r
}

// makeRaw turns off echo, line editing and CR/LF translation on the port.
func makeRaw(fd int) error {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8 | unix.CLOCAL | unix.CREAD
	t.Cc[unix.VMIN], t.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, t)
}
