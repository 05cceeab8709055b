// TCP between the namespaces: bulk streams and request/response
// transactions.

package traffic

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/topo"
)

// TCPConns opens n connections from ns a to a listener in ns b and returns
// both ends of each. The sockets are made inside their namespaces and used
// from any goroutine afterwards.
func TCPConns(a, b *topo.NS, aAddr, bAddr netip.Addr, n int, timeout time.Duration) (client, server []*net.TCPConn, err error) {
	var ln *net.TCPListener
	if err := b.Do(func() error {
		var err error
		network := "tcp4"
		if bAddr.Is6() {
			network = "tcp6"
		}
		ln, err = net.ListenTCP(network, net.TCPAddrFromAddrPort(netip.AddrPortFrom(bAddr, 0)))
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("listen in %s: %w", b.Name, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(timeout)
	ln.SetDeadline(deadline)
	to := ln.Addr().(*net.TCPAddr)

	acc := make(chan error, 1)
	go func() {
		for range n {
			c, err := ln.AcceptTCP()
			if err != nil {
				acc <- err
				return
			}
			server = append(server, c)
		}
		acc <- nil
	}()
	derr := a.Do(func() error {
		d := net.Dialer{Deadline: deadline, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(aAddr, 0))}
		for range n {
			network := "tcp4"
			if aAddr.Is6() {
				network = "tcp6"
			}
			c, err := d.Dial(network, to.String())
			if err != nil {
				return err
			}
			client = append(client, c.(*net.TCPConn))
		}
		return nil
	})
	if derr != nil {
		ln.Close()
	}
	aerr := <-acc
	if err := errors.Join(derr, aerr); err != nil {
		closeAll(client)
		closeAll(server)
		return nil, nil, fmt.Errorf("open %d tcp connections %s -> %s: %w", n, a.Name, b.Name, err)
	}
	return client, server, nil
}

func closeAll(cs []*net.TCPConn) {
	for _, c := range cs {
		c.Close()
	}
}

// TCPBulk streams from every client to its server end until stopped and
// counts the bytes received.
type TCPBulk struct {
	client, server []*net.TCPConn
	Received       atomic.Uint64
	stop           atomic.Bool
	wg             sync.WaitGroup
}

// StartTCPBulk streams on every connection until Close or deadline.
func StartTCPBulk(client, server []*net.TCPConn, deadline time.Time) *TCPBulk {
	t := &TCPBulk{client: client, server: server}
	buf := make([]byte, 128<<10)
	for _, c := range client {
		c.SetDeadline(deadline)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for i := 0; !t.stop.Load() && i < maxWrites; i++ {
				if _, err := c.Write(buf); err != nil {
					return
				}
			}
		}()
	}
	for _, c := range server {
		c.SetDeadline(deadline)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			rb := make([]byte, 256<<10)
			for i := 0; i < 4*maxWrites; i++ {
				n, err := c.Read(rb)
				t.Received.Add(uint64(n))
				if err != nil {
					return
				}
			}
		}()
	}
	return t
}

// Close stops the streams and closes every connection.
func (t *TCPBulk) Close() {
	t.stop.Store(true)
	closeAll(t.client)
	closeAll(t.server)
	t.wg.Wait()
}

// RR runs request/response transactions: each client sends a request
// of reqSize bytes and waits for a response of respSize bytes, back to back,
// on every connection. Transactions completed while measuring are counted
// and their latency recorded.
type RR struct {
	client, server []*net.TCPConn
	Measuring      atomic.Bool
	stop           atomic.Bool
	Count          atomic.Uint64
	Hist           *Histogram
	wg             sync.WaitGroup
}

// StartRR runs transactions on every connection until Close or
// deadline; they are counted only while Measuring is set.
func StartRR(client, server []*net.TCPConn, reqSize, respSize int, deadline time.Time) *RR {
	r := &RR{client: client, server: server, Hist: &Histogram{}}
	for _, c := range server {
		c.SetDeadline(deadline)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			req, resp := make([]byte, reqSize), make([]byte, respSize)
			for range maxWrites {
				if _, err := io.ReadFull(c, req); err != nil {
					return
				}
				if _, err := c.Write(resp); err != nil {
					return
				}
			}
		}()
	}
	for _, c := range client {
		c.SetDeadline(deadline)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			req, resp := make([]byte, reqSize), make([]byte, respSize)
			for i := 0; !r.stop.Load() && i < maxWrites; i++ {
				t0 := time.Now()
				if _, err := c.Write(req); err != nil {
					return
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					return
				}
				if r.Measuring.Load() {
					r.Hist.Record(time.Since(t0))
					r.Count.Add(1)
				}
			}
		}()
	}
	return r
}

// Close stops the transactions and closes every connection.
func (r *RR) Close() {
	r.stop.Store(true)
	closeAll(r.client)
	closeAll(r.server)
	r.wg.Wait()
}
