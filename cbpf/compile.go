package cbpf

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// ErrNoCompiler: tcpdump, which compiles the expression, is not installed.
var ErrNoCompiler = errors.New("cbpf: compiling a filter expression needs tcpdump (libpcap's compiler); install it (Debian: apt-get install tcpdump)")

// Compile compiles a tcpdump filter expression for Ethernet frames with
// libpcap's compiler, as `tcpdump -y EN10MB -s snaplen -ddd EXPR` prints
// it, and validates the result. An expression libpcap refuses is an error
// carrying tcpdump's message.
func Compile(expr string, snaplen int) (*Program, error) {
	path, err := exec.LookPath("tcpdump")
	if err != nil {
		return nil, ErrNoCompiler
	}
	cmd := exec.Command(path, "-y", "EN10MB", "-s", strconv.Itoa(snaplen), "-ddd", "--", expr)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("filter %q: %s", expr, msg)
	}
	ins, err := ParseDecimal(&stdout)
	if err != nil {
		return nil, fmt.Errorf("filter %q: %w", expr, err)
	}
	return New(ins)
}
