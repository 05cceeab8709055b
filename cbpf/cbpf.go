// Package cbpf runs classic BPF programs — the packet filters of
// tcpdump's expression language, as libpcap's pcap_compile emits them —
// over a packet in memory.
//
// It owns nothing but the program it was given. Run never allocates,
// never panics on any packet once New has accepted the program, and never
// loops: New refuses a program whose jumps are not all forward and in
// range, that reads scratch memory out of range, divides by a constant
// zero, or may fall off its end. A load beyond the packet ends the program
// with 0 (no match), as in the kernel.
package cbpf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Instruction is one classic BPF instruction, as struct sock_filter.
type Instruction struct {
	Op uint16 `json:"op"`
	Jt uint8  `json:"jt"`
	Jf uint8  `json:"jf"`
	K  uint32 `json:"k"`
}

// Instruction classes and fields (linux/filter.h, linux/bpf_common.h).
const (
	classLD   = 0x00
	classLDX  = 0x01
	classST   = 0x02
	classSTX  = 0x03
	classALU  = 0x04
	classJMP  = 0x05
	classRET  = 0x06
	classMISC = 0x07

	sizeW = 0x00
	sizeH = 0x08
	sizeB = 0x10

	modeIMM = 0x00
	modeABS = 0x20
	modeIND = 0x40
	modeMEM = 0x60
	modeLEN = 0x80
	modeMSH = 0xa0

	aluADD = 0x00
	aluSUB = 0x10
	aluMUL = 0x20
	aluDIV = 0x30
	aluOR  = 0x40
	aluAND = 0x50
	aluLSH = 0x60
	aluRSH = 0x70
	aluNEG = 0x80
	aluMOD = 0x90
	aluXOR = 0xa0

	jmpJA   = 0x00
	jmpJEQ  = 0x10
	jmpJGT  = 0x20
	jmpJGE  = 0x30
	jmpJSET = 0x40

	srcK = 0x00
	srcX = 0x08

	retA = 0x10

	miscTAX = 0x00
	miscTXA = 0x80
)

// MaxInstructions is the kernel's BPF_MAXINSNS.
const MaxInstructions = 4096

// memWords is the scratch memory, BPF_MEMWORDS.
const memWords = 16

// Program is a validated classic BPF program.
type Program struct {
	ins []Instruction
}

// New validates ins and returns it as a Program.
func New(ins []Instruction) (*Program, error) {
	if len(ins) == 0 || len(ins) > MaxInstructions {
		return nil, fmt.Errorf("cbpf: %d instructions, want 1..%d", len(ins), MaxInstructions)
	}
	for pc, in := range ins {
		if err := check(in, pc, len(ins)); err != nil {
			return nil, fmt.Errorf("cbpf: instruction %d (%#x): %w", pc, in.Op, err)
		}
	}
	if last := ins[len(ins)-1]; last.Op&0x07 != classRET {
		return nil, errors.New("cbpf: the last instruction is not a return")
	}
	return &Program{ins: append([]Instruction(nil), ins...)}, nil
}

// check validates one instruction at pc of a program of n.
func check(in Instruction, pc, n int) error {
	switch in.Op & 0x07 {
	case classLD, classLDX:
		mode := in.Op & 0xe0
		switch mode {
		case modeIMM, modeLEN:
		case modeMEM:
			if in.K >= memWords {
				return errors.New("scratch memory index out of range")
			}
		case modeABS, modeIND:
			if in.Op&0x07 == classLDX {
				return errors.New("unknown load")
			}
			if s := in.Op & 0x18; s != sizeW && s != sizeH && s != sizeB {
				return errors.New("unknown load size")
			}
		case modeMSH:
			if in.Op != classLDX|sizeB|modeMSH {
				return errors.New("unknown load")
			}
		default:
			return errors.New("unknown load mode")
		}
		if in.Op&0x07 == classLDX && mode != modeMSH && in.Op&0x18 != sizeW {
			return errors.New("unknown load size")
		}
	case classST, classSTX:
		if in.K >= memWords {
			return errors.New("scratch memory index out of range")
		}
	case classALU:
		op := in.Op & 0xf0
		if op > aluXOR {
			return errors.New("unknown ALU operation")
		}
		if (op == aluDIV || op == aluMOD) && in.Op&srcX == 0 && in.K == 0 {
			return errors.New("division by zero")
		}
	case classJMP:
		op := in.Op & 0xf0
		if op > jmpJSET {
			return errors.New("unknown jump")
		}
		if op == jmpJA {
			if uint64(pc)+1+uint64(in.K) >= uint64(n) {
				return errors.New("jump out of range")
			}
		} else if pc+1+int(in.Jt) >= n || pc+1+int(in.Jf) >= n {
			return errors.New("jump out of range")
		}
	case classRET:
		if s := in.Op & 0x18; s != srcK && s != retA {
			return errors.New("unknown return")
		}
	case classMISC:
		if op := in.Op & 0xf8; op != miscTAX && op != miscTXA {
			return errors.New("unknown misc operation")
		}
	}
	return nil
}

// Run runs the program over pkt and returns its result: how many bytes of
// the packet to keep, 0 to reject it.
func (p *Program) Run(pkt []byte) uint32 { return p.RunLen(pkt, len(pkt)) }

// RunLen is Run over the first bytes of a packet of wireLen bytes (its
// first segment, say): loads see pkt, the length instructions wireLen.
func (p *Program) RunLen(pkt []byte, wireLen int) uint32 {
	var a, x uint32
	var mem [memWords]uint32
	ins := p.ins
	for pc := 0; pc < len(ins); pc++ {
		in := &ins[pc]
		switch in.Op & 0x07 {
		case classLD:
			switch in.Op & 0xe0 {
			case modeIMM:
				a = in.K
			case modeLEN:
				a = uint32(wireLen)
			case modeMEM:
				a = mem[in.K]
			case modeABS, modeIND:
				off := uint64(in.K)
				if in.Op&0xe0 == modeIND {
					off += uint64(x)
				}
				v, ok := load(pkt, off, in.Op&0x18)
				if !ok {
					return 0
				}
				a = v
			}
		case classLDX:
			switch in.Op & 0xe0 {
			case modeIMM:
				x = in.K
			case modeLEN:
				x = uint32(wireLen)
			case modeMEM:
				x = mem[in.K]
			case modeMSH:
				if uint64(in.K) >= uint64(len(pkt)) {
					return 0
				}
				x = uint32(pkt[in.K]&0x0f) * 4
			}
		case classST:
			mem[in.K] = a
		case classSTX:
			mem[in.K] = x
		case classALU:
			v := in.K
			if in.Op&srcX != 0 {
				v = x
			}
			switch in.Op & 0xf0 {
			case aluADD:
				a += v
			case aluSUB:
				a -= v
			case aluMUL:
				a *= v
			case aluDIV:
				if v == 0 {
					return 0
				}
				a /= v
			case aluMOD:
				if v == 0 {
					return 0
				}
				a %= v
			case aluOR:
				a |= v
			case aluAND:
				a &= v
			case aluXOR:
				a ^= v
			case aluLSH:
				a = shl(a, v)
			case aluRSH:
				a = shr(a, v)
			case aluNEG:
				a = -a
			}
		case classJMP:
			op := in.Op & 0xf0
			if op == jmpJA {
				pc += int(in.K)
				continue
			}
			v := in.K
			if in.Op&srcX != 0 {
				v = x
			}
			var cond bool
			switch op {
			case jmpJEQ:
				cond = a == v
			case jmpJGT:
				cond = a > v
			case jmpJGE:
				cond = a >= v
			case jmpJSET:
				cond = a&v != 0
			}
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case classRET:
			if in.Op&0x18 == retA {
				return a
			}
			return in.K
		case classMISC:
			if in.Op&0xf8 == miscTAX {
				x = a
			} else {
				a = x
			}
		}
	}
	return 0 // unreachable for a validated program
}

func shl(a, v uint32) uint32 {
	if v >= 32 {
		return 0
	}
	return a << v
}

func shr(a, v uint32) uint32 {
	if v >= 32 {
		return 0
	}
	return a >> v
}

// load reads a big-endian word, half-word or byte at off.
func load(pkt []byte, off uint64, size uint16) (uint32, bool) {
	n := uint64(4)
	switch size {
	case sizeH:
		n = 2
	case sizeB:
		n = 1
	}
	if off+n > uint64(len(pkt)) {
		return 0, false
	}
	switch n {
	case 4:
		return binary.BigEndian.Uint32(pkt[off:]), true
	case 2:
		return uint32(binary.BigEndian.Uint16(pkt[off:])), true
	}
	return uint32(pkt[off]), true
}

// Instructions returns a copy of the program's instructions.
func (p *Program) Instructions() []Instruction {
	return append([]Instruction(nil), p.ins...)
}

// ParseDecimal reads a program in the format of `tcpdump -ddd`: the
// instruction count on the first line, then one instruction per line as
// four decimal numbers, code jt jf k.
func ParseDecimal(r io.Reader) ([]Instruction, error) {
	sc := bufio.NewScanner(r)
	var ins []Instruction
	want := -1
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if want < 0 {
			n, err := strconv.Atoi(f[0])
			if err != nil || len(f) != 1 || n <= 0 || n > MaxInstructions {
				return nil, fmt.Errorf("cbpf: line %d: %q is not an instruction count", line, sc.Text())
			}
			want = n
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("cbpf: line %d: %q is not code jt jf k", line, sc.Text())
		}
		var v [4]uint64
		for i, s := range f {
			var err error
			bits := []int{16, 8, 8, 32}[i]
			if v[i], err = strconv.ParseUint(s, 10, bits); err != nil {
				return nil, fmt.Errorf("cbpf: line %d: %w", line, err)
			}
		}
		ins = append(ins, Instruction{Op: uint16(v[0]), Jt: uint8(v[1]), Jf: uint8(v[2]), K: uint32(v[3])})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cbpf: %w", err)
	}
	if want < 0 || len(ins) != want {
		return nil, fmt.Errorf("cbpf: %d instructions, the count line says %d", len(ins), want)
	}
	return ins, nil
}
