//go:build linux && (amd64 || arm64)

package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Encoded returns the assembled filter stack in a compact binary form, so that a
// process that will confine a box can build it once, off the box's critical path, and
// hand it to the box's init (InstallEncoded). Assembling takes about a millisecond;
// loading takes microseconds. The result is cached for the life of the process.
//
// Format: for each filter, a little-endian uint32 instruction count followed by that
// many 8-byte instructions (code u16, jt u8, jf u8, k u32).
func Encoded() ([]byte, error) {
	c, err := compile()
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp filter: %w", err)
	}
	var out []byte
	for _, f := range c.filters {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(f)))
		for _, in := range f {
			out = binary.LittleEndian.AppendUint16(out, in.Code)
			out = append(out, in.Jt, in.Jf)
			out = binary.LittleEndian.AppendUint32(out, in.K)
		}
	}
	return out, nil
}

// maxFilters bounds what InstallEncoded accepts.
const maxFilters = 16

// InstallEncoded loads filters produced by Encoded in this binary, with the same
// semantics and preconditions as Install. It refuses malformed input before loading
// anything, and refuses an empty stack: a box is never left unfiltered by accident.
func InstallEncoded(b []byte) error {
	filters, err := decode(b)
	if err != nil {
		return fmt.Errorf("install seccomp filter: %w", err)
	}
	return installFilters(filters)
}

func decode(b []byte) ([][]unix.SockFilter, error) {
	var filters [][]unix.SockFilter
	for len(b) > 0 {
		if len(b) < 4 || len(filters) == maxFilters {
			return nil, errors.New("malformed encoded filter")
		}
		n := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if n == 0 || n > bpfMaxInsns || len(b) < n*8 {
			return nil, fmt.Errorf("malformed encoded filter: %d instructions", n)
		}
		f := make([]unix.SockFilter, n)
		for i := range f {
			f[i] = unix.SockFilter{
				Code: binary.LittleEndian.Uint16(b),
				Jt:   b[2],
				Jf:   b[3],
				K:    binary.LittleEndian.Uint32(b[4:]),
			}
			b = b[8:]
		}
		filters = append(filters, f)
	}
	if len(filters) == 0 {
		return nil, errors.New("empty encoded filter")
	}
	return filters, nil
}
