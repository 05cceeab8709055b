// pfwd runs the fwd library with its defaults between two links, like
// `xdpfwd run`, writing a Go CPU profile of the whole run to os.Args[3];
// it stops on SIGTERM/SIGINT or after os.Args[4] seconds.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
)

func main() {
	secs, _ := strconv.Atoi(os.Args[4])
	f, err := fwd.New(fwd.Config{Links: []string{os.Args[1], os.Args[2]}})
	if err != nil {
		panic(err)
	}
	out, err := os.Create(os.Args[3])
	if err != nil {
		panic(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, time.Duration(secs)*time.Second)
	defer cancel2()
	go func() {
		// profile after warm-up, for as long as the run lasts
		time.Sleep(time.Second)
		pprof.StartCPUProfile(out)
	}()
	err = f.Run(ctx)
	pprof.StopCPUProfile()
	out.Close()
	s, _ := f.Shutdown()
	fmt.Printf("run: %v; rx %d tx %d; efficiency %+v\n", err, s.Links[os.Args[1]].RXPackets, s.Links[os.Args[2]].TXPackets, s.Efficiency)
}
