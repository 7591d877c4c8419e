//go:build !linux

package api

import (
	"errors"
	"io"
	"os"
)

var errNoMemfd = errors.New("uploads need memfd_create (Linux)")

func memFile(string, []byte) (*os.File, error) { return nil, errNoMemfd }

func spool(string, io.Reader) (*os.File, int64, error) { return nil, 0, errNoMemfd }
