package api

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// memFile returns an anonymous memory file (memfd) holding data, positioned at its
// start. Uploads live there, never at a path on the host where another process
// could swap them.
func memFile(name string, data []byte) (*os.File, error) {
	f, err := newMemfd(name)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write memory file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("rewind memory file: %w", err)
	}
	return f, nil
}

// spool copies r into a new memory file and returns it, positioned at its start,
// with its size.
func spool(name string, r io.Reader) (*os.File, int64, error) {
	f, err := newMemfd(name)
	if err != nil {
		return nil, 0, err
	}
	n, err := io.Copy(f, r)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("spool upload: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("rewind memory file: %w", err)
	}
	return f, n, nil
}

func newMemfd(name string) (*os.File, error) {
	fd, err := unix.MemfdCreate("moat-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	return os.NewFile(uintptr(fd), "memfd:moat-"+name), nil
}
