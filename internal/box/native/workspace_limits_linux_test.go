package native

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
)

// makeFiles creates n empty files named by name(i) in the directory dir below the
// workspace (created), through a directory fd: fast enough for tens of thousands.
func makeFiles(t *testing.T, w *testWorkspace, dir string, n int, name func(int) string) {
	t.Helper()
	if err := os.MkdirAll(w.at(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := unix.Open(w.at(dir), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	for i := range n {
		fd, err := unix.Openat(d, name(i), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatalf("create %s/%s: %v", dir, name(i), err)
		}
		unix.Close(fd)
	}
}

// referenceList lists dir below the workspace as walk did before it read directories
// in batches: every name of a directory first, then each in turn, depth first, until
// limit entries. It gives the paths a listing must have, in its order.
func referenceList(t *testing.T, w *testWorkspace, dir string, limit int) []string {
	t.Helper()
	var out []string
	var walkAll func(path, prefix string, depth int)
	walkAll = func(path, prefix string, depth int) {
		d, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if len(out) >= limit {
				return
			}
			out = append(out, prefix+name)
			var st unix.Stat_t
			if err := unix.Lstat(path+"/"+name, &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR && depth < maxListDepth {
				walkAll(path+"/"+name, prefix+name+"/", depth+1)
			}
		}
	}
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	walkAll(w.at(dir), prefix, 0)
	return out
}

func listPaths(t *testing.T, w *testWorkspace, dir string) []string {
	t.Helper()
	files, err := w.list(dir)
	if err != nil && !errors.Is(err, box.ErrListTruncated) {
		t.Fatalf("list %q: %v", dir, err)
	}
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

// TestWorkspaceListBatches: a listing under the cap holds every entry, in the order
// walk always gave them, though directories are read in batches and walked into
// between batches.
func TestWorkspaceListBatches(t *testing.T) {
	w := newTestWorkspace(t, 1<<20)
	n := 3*listBatch + 7
	makeFiles(t, w, "top", n, func(i int) string { return fmt.Sprintf("f%04d", i) })
	for i := 0; i < n; i += listBatch / 3 {
		makeFiles(t, w, fmt.Sprintf("top/d%04d", i), 3, func(j int) string { return fmt.Sprintf("g%d", j) })
	}
	makeFiles(t, w, "top/d0000/deeper", listBatch+1, func(j int) string { return fmt.Sprintf("h%d", j) })
	for _, dir := range []string{"", "top", "top/d0000"} {
		want := referenceList(t, w, dir, box.MaxListEntries)
		if len(want) >= box.MaxListEntries {
			t.Fatalf("the tree has %d entries, want it under the cap", len(want))
		}
		if got := listPaths(t, w, dir); !slices.Equal(got, want) {
			t.Errorf("list %q: %d entries, want %d in the order %q...", dir, len(got), len(want), want[:5])
		}
	}
}

// TestWorkspaceListCap: a directory with more entries than the cap lists the first
// MaxListEntries entries with box.ErrListTruncated, and the
// memory the listing takes is bounded by the cap, not by the directory's size: the
// code could fill a directory with millions of names for the server to list.
func TestWorkspaceListCap(t *testing.T) {
	w := newTestWorkspace(t, 1<<20)
	const dir = "big"
	// Long names, as a box would use to blow the server up, but short enough that
	// MaxListEntries of them fit in MaxListBytes: the entry cap is what cuts here
	// (TestSessionListLongPaths has the byte cap cut).
	const nameLen = 170
	n := 6 * box.MaxListEntries
	makeFiles(t, w, dir, n, func(i int) string {
		s := fmt.Sprintf("%07d-", i)
		return s + strings.Repeat("x", nameLen-len(s))
	})

	// The allocations a listing of MaxListEntries names may make, generously: per
	// entry, the name as read, the C string fstatat takes, the path and the mode
	// string (each at most a name with the prefix and a string header), and the entry
	// in the result several times over (the slice grows by copying); plus a batch of
	// names read ahead.
	per := 4*(nameLen+len(dir)+1+16) + 6*int(unsafe.Sizeof(box.FileInfo{}))
	bound := box.MaxListEntries*per + listBatch*(nameLen+16)
	// Reading every name of the directory would take at least the names themselves,
	// and the listing needs at least the paths of the entries it keeps: the bound
	// must be below that, or the test proves nothing.
	floor := n*(nameLen+16) + box.MaxListEntries*(nameLen+len(dir)+1)
	if bound >= floor {
		t.Fatalf("bound %d not below %d: use more or longer names", bound, floor)
	}

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	files, err := w.list(dir)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, box.ErrListTruncated) {
		t.Fatalf("list: %v, want box.ErrListTruncated", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(bound) {
		t.Errorf("listing %d of %d names allocated %d bytes, want at most %d (reading them all takes over %d)",
			len(files), n, alloc, bound, floor)
	}

	if len(files) != box.MaxListEntries {
		t.Fatalf("list: %d entries, want exactly %d", len(files), box.MaxListEntries)
	}
	got := make([]string, len(files))
	for i, f := range files {
		got[i] = f.Path
		if f.Dir || f.Size != 0 || f.Mode != "-rw-r--r--" || len(f.Path) != len(dir)+1+nameLen {
			t.Fatalf("entry %d: %+v", i, f)
		}
	}
	if want := referenceList(t, w, dir, box.MaxListEntries); !slices.Equal(got, want) {
		t.Errorf("list: not the first %d entries in directory order", box.MaxListEntries)
	}

	// The whole workspace: the cap counts entries below subdirectories too.
	makeFiles(t, w, "small", 10, func(i int) string { return fmt.Sprint(i) })
	files, err = w.list("")
	if !errors.Is(err, box.ErrListTruncated) || len(files) != box.MaxListEntries {
		t.Fatalf("list the workspace: %d entries, %v; want %d", len(files), err, box.MaxListEntries)
	}
	if want := referenceList(t, w, "", box.MaxListEntries); !slices.Equal(listPaths(t, w, ""), want) {
		t.Errorf("list the workspace: not the first %d entries in walk order", box.MaxListEntries)
	}
}

// TestWorkspaceGetNotRegular: a GET of anything but a regular file (a socket, FIFO
// or device, or a symlink to one) fails with not_regular, at once.
func TestWorkspaceGetNotRegular(t *testing.T) {
	w := newTestWorkspace(t, 1<<20)
	l, err := net.Listen("unix", w.at("sock"))
	if err != nil {
		t.Fatalf("listen on a unix socket in the workspace: %v", err)
	}
	defer l.Close()
	if err := unix.Mkfifo(w.at("fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	// A tmpfs mounted nodev still lets root create a device node; only opening it fails.
	if err := unix.Mknod(w.at("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sock", w.at("link-to-sock")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"sock", "fifo", "null", "link-to-sock"} {
		done := make(chan error, 1)
		go func() {
			f, _, err := w.openFile(p, 100)
			if f != nil {
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			wantCode(t, "get "+p, err, failNotRegular)
			if !errors.Is(err, box.ErrNotRegular) || !errors.Is(localError(err, p), box.ErrNotRegular) {
				t.Errorf("get %s: %v, as the server answers it %v; want %v", p, err, localError(err, p), box.ErrNotRegular)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("get %s blocks", p)
		}
	}

	// A regular file still reads.
	if err := w.putString("f", "data"); err != nil {
		t.Fatal(err)
	}
	f, size, err := w.openFile("f", 100)
	if err != nil {
		t.Fatalf("get a regular file: %v", err)
	}
	defer f.Close()
	if b, err := io.ReadAll(f); err != nil || string(b) != "data" || size != 4 {
		t.Errorf("get a regular file: %q (size %d), %v", b, size, err)
	}
}

// TestSessionListLongPaths: a listing of box.MaxListEntries long paths, more than one
// frame of the in-box agent can carry, is still answered (cut, not an error), and the
// session goes on.
func TestSessionListLongPaths(t *testing.T) {
	s := startBash(t, box.Limits{})
	dir := strings.Repeat("d", 200)
	res := call(t, s, `mkdir -p /workspace/`+dir+` && cd /workspace/`+dir+` && for i in $(seq 10100); do : > "$(printf 'f%0250d' $i)"; done; echo made`, 120*time.Second)
	if res.Status != box.StatusOK || res.Stdout != "made\n" {
		t.Fatalf("make the files: status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
	files, err := s.ListFiles(context.Background(), "")
	if !errors.Is(err, box.ErrListTruncated) {
		t.Fatalf("list: %v, want box.ErrListTruncated", err)
	}
	cost := 0
	for _, f := range files {
		cost += box.ListCost(f.Path)
	}
	if len(files) < 1000 || len(files) >= box.MaxListEntries || cost > box.MaxListBytes {
		t.Fatalf("listed %d entries costing %d bytes: want a listing cut by MaxListBytes (%d)", len(files), cost, box.MaxListBytes)
	}
	if res := call(t, s, "echo still here", 10*time.Second); res.Stdout != "still here\n" {
		t.Fatalf("after the listing: status %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
}
