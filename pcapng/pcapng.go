// Package pcapng writes packet captures in the pcapng format
// (draft-ietf-opsawg-pcapng) that tcpdump, tshark and Wireshark read: a
// Section Header Block, one Interface Description Block per interface
// (named, Ethernet, nanosecond timestamps; those of interfaces that appear
// later may come between packets) and an Enhanced Packet Block per packet,
// with its direction in epb_flags and an optional comment.
//
// A Writer owns its buffer and nothing else: it writes to the io.Writer it
// was given, from one goroutine at a time, in the host's byte order (which
// the Section Header Block announces, as the format allows).
package pcapng

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Block types and option codes used here.
const (
	blockSHB  = 0x0A0D0D0A
	blockIDB  = 0x00000001
	blockEPB  = 0x00000006
	byteMagic = 0x1A2B3C4D

	optEnd     = 0
	optComment = 1
	optIfName  = 2
	optIfDescr = 3
	optIfTsres = 9
	optEPBFlag = 2
	optShbUA   = 4

	// maxOpt is the longest option value (16-bit length, padded).
	maxOpt = 0xfffc

	// LinkTypeEthernet is LINKTYPE_ETHERNET.
	LinkTypeEthernet = 1
)

// Direction is an EPB's inbound/outbound flag (epb_flags bits 0-1).
type Direction uint32

const (
	DirUnknown  Direction = 0
	DirInbound  Direction = 1
	DirOutbound Direction = 2
)

var order = binary.NativeEndian

// Interface describes one capture interface.
type Interface struct {
	Name    string
	SnapLen uint32 // 0: no limit
	// Description is its if_description ("pod NAMESPACE/NAME"); "": none.
	Description string
}

// Writer writes one pcapng section.
type Writer struct {
	w       *bufio.Writer
	nif     int
	err     error
	scratch []byte
}

// NewWriter writes the section header and one interface description per
// element of ifs (interface i is the index Packet takes).
func NewWriter(w io.Writer, app string, ifs []Interface) (*Writer, error) {
	pw := &Writer{w: bufio.NewWriterSize(w, 64<<10)}
	// SHB: magic, version 1.0, section length unknown (-1).
	body := make([]byte, 16)
	order.PutUint32(body[0:], byteMagic)
	order.PutUint16(body[4:], 1)
	order.PutUint16(body[6:], 0)
	order.PutUint64(body[8:], ^uint64(0))
	body = appendOpt(body, optShbUA, []byte(app))
	body = appendOpt(body, optEnd, nil)
	pw.block(blockSHB, body)
	for _, i := range ifs {
		pw.AddInterface(i)
	}
	return pw, pw.err
}

// AddInterface writes an interface description after those given so far,
// and returns its index for Packet. The format allows one anywhere in the
// section before its first packet: a capture may describe the interfaces
// as they appear.
func (pw *Writer) AddInterface(i Interface) (int, error) {
	b := make([]byte, 8)
	order.PutUint16(b[0:], LinkTypeEthernet)
	order.PutUint32(b[4:], i.SnapLen)
	b = appendOpt(b, optIfName, []byte(i.Name))
	if i.Description != "" {
		b = appendOpt(b, optIfDescr, []byte(i.Description))
	}
	b = appendOpt(b, optIfTsres, []byte{9}) // 10^-9 s
	b = appendOpt(b, optEnd, nil)
	pw.block(blockIDB, b)
	if pw.err != nil {
		return 0, pw.err
	}
	pw.nif++
	return pw.nif - 1, nil
}

// Interfaces is how many interfaces are described.
func (pw *Writer) Interfaces() int { return pw.nif }

// Packet writes one Enhanced Packet Block: data (already cut to the
// snapshot length) of a packet origLen bytes long, seen on interface iface
// at ts (ns since the Unix epoch), with its direction and an optional
// comment.
func (pw *Writer) Packet(iface int, ts int64, data []byte, origLen int, dir Direction, comment string) error {
	if pw.err != nil {
		return pw.err
	}
	if iface < 0 || iface >= pw.nif {
		return fmt.Errorf("pcapng: interface %d of %d", iface, pw.nif)
	}
	if origLen < len(data) {
		origLen = len(data)
	}
	b := pw.scratch[:0]
	b = order.AppendUint32(b, uint32(iface))
	b = order.AppendUint32(b, uint32(uint64(ts)>>32))
	b = order.AppendUint32(b, uint32(ts))
	b = order.AppendUint32(b, uint32(len(data)))
	b = order.AppendUint32(b, uint32(origLen))
	b = append(b, data...)
	b = pad(b)
	if dir != DirUnknown {
		b = appendOpt(b, optEPBFlag, order.AppendUint32(nil, uint32(dir)))
	}
	if comment != "" {
		b = appendOpt(b, optComment, []byte(comment))
	}
	if dir != DirUnknown || comment != "" {
		b = appendOpt(b, optEnd, nil)
	}
	pw.scratch = b
	pw.block(blockEPB, b)
	return pw.err
}

// Flush writes what is buffered.
func (pw *Writer) Flush() error {
	if pw.err != nil {
		return pw.err
	}
	pw.err = pw.w.Flush()
	return pw.err
}

// block writes a block of type t around body (a multiple of 4 bytes).
func (pw *Writer) block(t uint32, body []byte) {
	if pw.err != nil {
		return
	}
	if len(body)%4 != 0 {
		pw.err = errors.New("pcapng: unpadded block body")
		return
	}
	var hdr [8]byte
	n := uint32(12 + len(body))
	order.PutUint32(hdr[0:], t)
	order.PutUint32(hdr[4:], n)
	pw.w.Write(hdr[:])
	pw.w.Write(body)
	_, pw.err = pw.w.Write(hdr[4:8])
}

// appendOpt appends an option (code, length, value padded to 4 bytes). A
// value longer than an option holds is cut.
func appendOpt(b []byte, code uint16, v []byte) []byte {
	v = v[:min(len(v), maxOpt)]
	b = order.AppendUint16(b, code)
	b = order.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return pad(b)
}

func pad(b []byte) []byte {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}
