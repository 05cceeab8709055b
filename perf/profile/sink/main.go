// sink attaches XDP_DROP (native) to the interface named by os.Args[1] in
// the current network namespace, and holds it until SIGTERM/SIGINT or
// os.Args[2] seconds.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
)

func main() {
	secs, _ := strconv.Atoi(os.Args[2])
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "sink_drop", Type: ebpf.XDP, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}})
	if err != nil {
		panic(err)
	}
	iface, err := net.InterfaceByName(os.Args[1])
	if err != nil {
		panic(err)
	}
	l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: iface.Index, Flags: link.XDPDriverMode})
	if err != nil {
		panic(err)
	}
	fmt.Println("attached")
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-c:
	case <-time.After(time.Duration(secs) * time.Second):
	}
	l.Close()
}
