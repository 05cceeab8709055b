// Package xsk owns xdpfwd's AF_XDP sockets and the XDP program that feeds
// them: Open creates a socket on one (link, queue), registers a umem.Region
// with the kernel (or shares the one another socket registered) and maps
// its four rings; Attach loads the redirect program on a link, held by a
// BPF link, and Program.Register points an RX queue at a socket.
//
// # Rings
//
// A Socket has four single-producer, single-consumer rings, each a Producer
// or a Consumer of the user-space side:
//
//   - Fill (Producer): UMEM frames lent to the kernel to receive into;
//   - RX (Consumer): received packets, as Desc (address, length, options;
//     PktContd in Options when a multi-buffer packet continues);
//   - TX (Producer): packets to transmit, as Desc;
//   - Comp (Consumer): addresses of TX descriptors the kernel is done with.
//
// A producer reserves entries (Reserve), writes them (SetAddr, SetDesc) and
// publishes them (Submit); a consumer claims entries (Peek), reads them
// (Addr, Desc) and hands them back (Release). Addresses the kernel returns
// may be in the unaligned-chunk encoding: pass them through Flat.
//
// # The program
//
// The redirect program, assembled with cilium/ebpf's asm package (no C
// compiler), sends each packet to the socket registered for its RX queue,
// and to the kernel's stack, counted (Program.Passed), when there is none.
// In front of every packet it writes MetaLen bytes of metadata: the arrival
// time (MetaStamp; 0 when attached with AttachConfig.NoStamps, for a reader
// that needs none) and, when the program is device-bound in native mode, a
// VLAN tag the driver or the sender kept out of the frame (MetaVLAN). It
// carries BTF, a function named ProgramName taking a struct xdp_md pointer
// and line info, as a compiled program does, so that xdp-tools' xdpdump can
// attach to it and bpftool can print it with its lines.
//
// # Concurrency
//
// The rings are memory shared with the kernel, mapped from the socket. As
// in the kernel's xsk_queue.h and libxdp, each side owns one index and only
// reads the other's: a side loads the other's index with acquire semantics
// before reading the entries it covers, and stores its own with release
// semantics after writing (or reading) its entries. The need_wakeup flag is
// loaded atomically. Nothing else is shared, and no lock is taken.
//
// Each Producer and Consumer keeps cached indices that are not guarded, so
// a ring must be used by one goroutine at a time; two rings of one socket
// may be used by two goroutines (one RX owner, one TX owner). Empty and
// Pending are the exceptions: they load both indices atomically, from any
// goroutine. FD, Queue, Ifname, BindMode,
// Kick, WakeRX and Stats may be called from any goroutine while the socket
// is open. Open and Close are not concurrent with any other use of the
// socket. Program methods may be called from any goroutine: the XSKMAP and
// the counter map are kernel objects updated by bpf(2), one entry at a time.
//
// The UMEM is the other shared memory. An address written to the fill or
// TX ring belongs to the kernel until it comes back on the RX or
// completion ring: user space must not read or write its buffer in
// between (the kernel may be writing a received packet into it, or a
// device reading it). Which addresses are where is umem's bookkeeping;
// this package only moves them.
//
// # What it must never do
//
// It never allocates and never makes a syscall per packet: Kick and WakeRX
// are one syscall per batch, made by the caller when the ring asks for it
// (NeedsWakeup) or the ring is full. It never leaves a program behind: the
// program is held by a BPF link, so the kernel detaches it when the process
// exits, even on SIGKILL, and a foreign program replaced with force is put
// back if setup fails before Commit. A socket that registered the UMEM is
// closed after the sockets sharing it, and the region is unmapped only after
// all of them are closed.
package xsk
