package landlock

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestCheckPaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")

	tests := []struct {
		name    string
		rw, dev []string
		wantErr error // nil means valid
		linux   bool  // needs /dev/null to be a character device
	}{
		{name: "empty lists", wantErr: nil},
		{name: "rw directory", rw: []string{dir}, wantErr: nil},
		{name: "rw directory and device", rw: []string{dir}, dev: []string{"/dev/null"}, linux: true},
		{name: "rw missing", rw: []string{missing}, wantErr: fs.ErrNotExist},
		{name: "rw relative", rw: []string{"tmp"}, wantErr: ErrInvalidPath},
		{name: "rw regular file", rw: []string{file}, wantErr: ErrInvalidPath},
		{name: "rw second entry missing", rw: []string{dir, missing}, wantErr: fs.ErrNotExist},
		{name: "dev missing", dev: []string{filepath.Join(dir, "null")}, wantErr: fs.ErrNotExist},
		{name: "dev relative", dev: []string{"dev/null"}, wantErr: ErrInvalidPath},
		{name: "dev directory would grant every device beneath", dev: []string{dir}, wantErr: ErrInvalidPath},
		{name: "dev regular file", dev: []string{file}, wantErr: ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.linux && runtime.GOOS != "linux" {
				t.Skip("needs Linux /dev/null")
			}
			err := checkPaths(tt.rw, tt.dev)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("checkPaths() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("checkPaths() = %v, want errors.Is %v", err, tt.wantErr)
			}
		})
	}
}
