package fwd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/xdpfwd/xdpfwd/fwd"
)

// The engine on two links, as the daemon runs it: New attaches the XDP
// programs and binds a socket to every RX queue, Run forwards until the
// context is done (SIGINT or SIGTERM here) while another goroutine reads
// the counters, and Shutdown detaches, releases everything and returns the
// summary. It needs root (CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF,
// CAP_IPC_LOCK) and two links (veth0 and veth1 here), so it is not run as
// a test.
func Example() {
	f, err := fwd.New(fwd.Config{
		Links:  []string{"veth0", "veth1"},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		// Every other field has a working default: workers for the CPUs
		// the process may use, sticky XPS, 256-byte inline copies,
		// partial checksums finished on veth, native XDP if possible.
	})
	if err != nil {
		if fwd.IsInputError(err) { // a bad link, a missing capability, a foreign program
			log.Fatalf("usage: %v", err)
		}
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The readers may run alongside Run (and Shutdown).
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		names := f.Links()
		prev, last := []fwd.LinkStats{f.LinkStats(0), f.LinkStats(1)}, time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				cur := []fwd.LinkStats{f.LinkStats(0), f.LinkStats(1)}
				sec := now.Sub(last).Seconds()
				for i, n := range names {
					fmt.Fprintf(os.Stderr, "%s: %.0f pps in, %.0f out, %d dropped\n", n,
						float64(cur[i].RXPackets-prev[i].RXPackets)/sec, float64(cur[i].TXPackets-prev[i].TXPackets)/sec,
						cur[i].TotalDrops()-prev[i].TotalDrops())
				}
				prev, last = cur, now
			}
		}
	}()

	runErr := f.Run(ctx) // ErrLinkGone if a link is deleted meanwhile
	stop()
	<-done
	sum, err := f.Shutdown()
	if err := errors.Join(runErr, err); err != nil {
		log.Print(err)
	}
	out, _ := json.MarshalIndent(sum, "", "  ")
	fmt.Println(string(out))
	if sum.UMEM.LeakedAddresses != 0 {
		log.Fatalf("%d UMEM addresses leaked", sum.UMEM.LeakedAddresses)
	}
}

// A network function is a Handler: here, drop what one MAC address sends
// and cross-connect the rest. Handle runs on the workers' threads, once per
// batch; it must not block or keep a packet.
func ExampleHandlerFunc() {
	blocked := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x66}
	drop := fwd.HandlerFunc(func(pkts []fwd.Packet) {
		for i := range pkts {
			p := &pkts[i]
			if len(p.Data) >= 12 && bytes.Equal(p.Data[6:12], blocked) {
				p.Drop()
				continue
			}
			p.Forward(1 - p.Link)
		}
	})
	f, err := fwd.New(fwd.Config{Links: []string{"veth0", "veth1"}, Handler: drop})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	f.Run(ctx)
	sum, _ := f.Shutdown()
	fmt.Println("dropped:", sum.Links["veth0"].Drops[fwd.DropHandler])
}
