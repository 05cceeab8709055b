package fwd

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/xdpfwd/xdpfwd/internal/bytesize"
	"github.com/xdpfwd/xdpfwd/internal/cpulist"
	"github.com/xdpfwd/xdpfwd/umem"
	"github.com/xdpfwd/xdpfwd/xps"
	"github.com/xdpfwd/xdpfwd/xsk"
)

// spelling is how a setting's values are written in xdpfwd's flags, its
// config file and a reload: parse sets the Config field from a string,
// refusing what no value of the field spells (check refuses what the
// field may hold but New cannot take); format writes the field back, so
// that parse(format(c)) changes nothing. The zero Config's is the flag's
// default.
type spelling struct {
	parse  func(c *Config, v string) error
	format func(c *Config) string
	// value names the value in help: N, SIZE, D (a duration), MODE.
	value string
}

// Set sets s's field of c from value, spelled as xdpfwd's flag and config
// file spell it. A setting whose values the library does not spell
// (Spelled) is refused.
func (s Setting) Set(c *Config, value string) error {
	r := rowOf(s.Field)
	if r == nil || r.parse == nil {
		return fmt.Errorf("setting %s: spelled by its command, not by fwd", s.Name)
	}
	return r.parse(c, value)
}

// Format returns s's field of c as Set reads it; "" for a setting whose
// values the library does not spell.
func (s Setting) Format(c *Config) string {
	if r := rowOf(s.Field); r != nil && r.format != nil {
		return r.format(c)
	}
	return ""
}

// Spelled reports whether the library spells s's values (Set, Format):
// all but the links, the Handler (xdpfwd's mode), MaxLinks (whose flag's
// default, auto, depends on the mode) and Batch (no flag).
func (s Setting) Spelled() bool {
	r := rowOf(s.Field)
	return r != nil && r.parse != nil
}

// ValueName is how help names s's value (N, SIZE, LIST, D for a
// duration, MODE, auto|N|off|busy); "" for a boolean or a setting the
// library does not spell.
func (s Setting) ValueName() string {
	if r := rowOf(s.Field); r != nil {
		return r.value
	}
	return ""
}

// rowOf is the row of Config field f, or nil.
func rowOf(f string) *setting {
	for i := range settings {
		if settings[i].Field == f {
			return &settings[i]
		}
	}
	return nil
}

func intSpelling(name string, field func(*Config) *int) spelling {
	return spelling{
		value: "N",
		parse: func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("--%s %q: want a whole number", name, v)
			}
			*field(c) = n
			return nil
		},
		format: func(c *Config) string { return strconv.Itoa(*field(c)) },
	}
}

func ringSpelling(name string, field func(*Config) *uint32) spelling {
	return spelling{
		value: "N",
		parse: func(c *Config, v string) error {
			n, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return fmt.Errorf("--%s %q: want a power of two, %d..%d, or 0 (auto)", name, v, MinRingSize, MaxRingSize)
			}
			*field(c) = uint32(n)
			return nil
		},
		format: func(c *Config) string { return strconv.FormatUint(uint64(*field(c)), 10) },
	}
}

func boolSpelling(name string, field func(*Config) *bool) spelling {
	return spelling{
		parse: func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("--%s %q: want true or false", name, v)
			}
			*field(c) = b
			return nil
		},
		format: func(c *Config) string { return strconv.FormatBool(*field(c)) },
	}
}

// durationSpelling reads a duration as time.ParseDuration does, from 0
// to most; 0 is written "0".
func durationSpelling(name string, most time.Duration, field func(*Config) *time.Duration) spelling {
	return spelling{
		value: "D",
		parse: func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > most {
				shown := v
				if err == nil {
					shown = d.String()
				}
				return fmt.Errorf("--%s %s: want 0..%v", name, shown, most)
			}
			*field(c) = d
			return nil
		},
		format: func(c *Config) string {
			if *field(c) == 0 {
				return "0"
			}
			return field(c).String()
		},
	}
}

// modeSpelling is a field whose type parses and prints its own names.
func modeSpelling[T fmt.Stringer](parse func(string) (T, error), field func(*Config) *T) spelling {
	return spelling{
		value: "MODE",
		parse: func(c *Config, v string) error {
			m, err := parse(v)
			if err != nil {
				return err
			}
			*field(c) = m
			return nil
		},
		format: func(c *Config) string { return (*field(c)).String() },
	}
}

var (
	xdpModeSpelling   = modeSpelling(xsk.ParseXDPMode, func(c *Config) *xsk.XDPMode { return &c.XDPMode })
	zeroCopySpelling  = modeSpelling(xsk.ParseZeroCopy, func(c *Config) *xsk.ZeroCopy { return &c.ZeroCopy })
	promiscSpelling   = modeSpelling(ParsePromiscMode, func(c *Config) *PromiscMode { return &c.Promisc })
	hugePagesSpelling = modeSpelling(umem.ParseHugePages, func(c *Config) *umem.HugePages { return &c.HugePages })
	xpsSpelling       = modeSpelling(xps.ParseMode, func(c *Config) *xps.Mode { return &c.XPS })
	checksumsSpelling = modeSpelling(ParseChecksumMode, func(c *Config) *ChecksumMode { return &c.Checksums })
	// multi-buffer was a boolean once: true and false are on and off.
	multiBufferSpelling = modeSpelling(ParseMultiBufferMode, func(c *Config) *MultiBufferMode { return &c.MultiBufferMode })
)

// frameSizeSpelling: 2048 or 4096; the zero value, the driver's choice,
// is written as the usual 2048.
var frameSizeSpelling = spelling{
	value: "N",
	parse: func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n != 2048 && n != 4096 {
			return fmt.Errorf("--frame-size %s: want 2048 or 4096", v)
		}
		c.FrameSize = n
		return nil
	},
	format: func(c *Config) string { return strconv.Itoa(cmp0(c.FrameSize, 2048)) },
}

// maxUMEMSpelling: a byte count (bytesize), up to what an int64 holds.
var maxUMEMSpelling = spelling{
	value: "SIZE",
	parse: func(c *Config, v string) error {
		n, ok := bytesize.Parse(v)
		if !ok || n > math.MaxInt64 {
			return fmt.Errorf("--max-umem %q: want bytes, e.g. 268435456, 256MiB or 2GiB, 0 .. %d", v, int64(math.MaxInt64))
		}
		c.MaxUMEM = int64(n)
		return nil
	},
	format: func(c *Config) string { return bytesize.Format(uint64(c.MaxUMEM)) },
}

// cpusSpelling: a CPU list, 0,1 or 2-3; empty for none.
var cpusSpelling = spelling{
	value: "LIST",
	parse: func(c *Config, v string) error {
		if v == "" {
			c.CPUs = nil
			return nil
		}
		cpus, err := cpulist.Parse(v)
		if err != nil {
			return fmt.Errorf("--cpus: %v; want a list like 0,1 or 2-3", err)
		}
		c.CPUs = cpus
		return nil
	},
	format: func(c *Config) string {
		if len(c.CPUs) == 0 {
			return ""
		}
		return cpulist.Format(c.CPUs)
	},
}

// spinSpelling: auto (0), off (negative), busy (SpinBusy), or a count.
var spinSpelling = spelling{
	value: "auto|N|off|busy",
	parse: func(c *Config, v string) error {
		switch v {
		case "auto", "":
			c.Spin = 0
			return nil
		case "off":
			c.Spin = -1
			return nil
		case "busy":
			c.Spin = SpinBusy
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > maxSpin {
			return fmt.Errorf("--spin %q: want auto, off, busy, or 0..%d empty rounds (0: auto)", v, maxSpin)
		}
		c.Spin = n
		return nil
	},
	format: func(c *Config) string { return spinString(c.Spin) },
}

// maxSpin is the most empty rounds --spin N takes: beyond, busy says it.
const maxSpin = 1 << 20

// inlineMaxSpelling: ParseInlineMax's; InlineOff is written "off".
var inlineMaxSpelling = spelling{
	value: "N",
	parse: func(c *Config, v string) error {
		n, err := ParseInlineMax(v)
		if err != nil {
			return err
		}
		c.InlineMax = n
		return nil
	},
	format: func(c *Config) string {
		if c.InlineMax == InlineOff {
			return "off"
		}
		return strconv.Itoa(c.InlineMax)
	},
}

// fragOrderSpelling: 0 (the default), 3 or 4, or off; a negative number
// is off too, as in the Config.
var fragOrderSpelling = spelling{
	value: "N",
	parse: func(c *Config, v string) error {
		if v == "off" {
			c.FragOrder = FragOff
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("--frag-order %q: want 3, 4, 0 (the default, 4) or off", v)
		}
		c.FragOrder = max(n, FragOff)
		return nil
	},
	format: func(c *Config) string { return fragOrderString(c.FragOrder) },
}
