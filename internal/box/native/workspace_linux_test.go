package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/testutil"
)

// Test owners of what a workspace creates: neither root nor the test's user, and
// different from each other so that a swapped uid and gid shows.
const testUID, testGID = 4242, 4343

// testWorkspace is a workspace as the server holds one: an O_PATH fd of a tmpfs.
// outside is a host directory beside it, for escapes.
type testWorkspace struct {
	*workspace
	outside string
}

// newTestWorkspace mounts a fresh tmpfs (nosuid, nodev, size bytes, owned by the box's
// user: as a box's workspace) in a temporary directory and opens it with workspaceAt.
// The mount stays until the test ends, so that ".." from the workspace leads to host
// directories (as from a box's, to the rest of the box). A plain directory would not
// do: workspaceAt insists on a mount of its own, and hard links from the rest of the
// host's filesystem could reach into it.
func newTestWorkspace(t *testing.T, size int64) *testWorkspace {
	t.Helper()
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	mnt := filepath.Join(tmp, "ws")
	outside := filepath.Join(tmp, "outside")
	for _, d := range []string{mnt, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Open to all, so that only the confinement keeps an escaped write out, not
	// the server acting as the box's user.
	for d, mode := range map[string]os.FileMode{filepath.Dir(tmp): 0o755, tmp: 0o755, outside: 0o777} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	opts := fmt.Sprintf("mode=0755,size=%d,uid=%d,gid=%d", size, testUID, testGID)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		testutil.SkipOrFail(t, fmt.Sprintf("mount a tmpfs: %v", err))
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	parent, err := unix.Open(tmp, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(parent)
	ws, err := workspaceAt(parent, "ws", testUID, testGID)
	if err != nil {
		t.Fatalf("workspaceAt: %v", err)
	}
	t.Cleanup(ws.close)
	return &testWorkspace{workspace: ws, outside: outside}
}

// at is the name, below the workspace, as a path the test can use directly.
func (w *testWorkspace) at(name string) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", w.dir, name)
}

func (w *testWorkspace) putString(p, data string) error {
	return w.put(p, strings.NewReader(data), int64(len(data)))
}

func (w *testWorkspace) get(p string, max int64) (string, error) {
	f, size, err := w.openFile(p, max)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var buf bytes.Buffer
	n, err := copyOut(&buf, f, max)
	return buf.String(), received(p, size, n, err)
}

// wantCode fails unless err is classified as code (as init would answer it).
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if err == nil || failCode(err) != code {
		t.Errorf("%s: %v (code %q), want code %q", what, err, failCode(err), code)
	}
}

func wantContent(t *testing.T, path, want string) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("%s: %q, %v; want %q", path, got, err, want)
	}
}

func wantOwner(t *testing.T, path string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != testUID || st.Gid != testGID {
		t.Errorf("%s is owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, testUID, testGID)
	}
}

// noUploads fails if an upload left a temporary file in dir.
func noUploads(t *testing.T, w *testWorkspace, dir string) {
	t.Helper()
	ents, err := os.ReadDir(w.at(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".moat-upload-") {
			t.Errorf("temporary file %s/%s left behind", dir, e.Name())
		}
	}
}

func TestWorkspacePut(t *testing.T) {
	w := newTestWorkspace(t, 1<<20)
	if err := w.putString("a/b/c.txt", "hello"); err != nil {
		t.Fatalf("put: %v", err)
	}
	wantContent(t, w.at("a/b/c.txt"), "hello")
	for _, p := range []string{"a", "a/b", "a/b/c.txt"} {
		wantOwner(t, w.at(p))
	}

	// The file is replaced, not rewritten: a reader of the old one keeps it whole.
	old, err := os.Open(w.at("a/b/c.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := w.putString("a/b/c.txt", "replaced"); err != nil {
		t.Fatalf("put over a file: %v", err)
	}
	wantContent(t, w.at("a/b/c.txt"), "replaced")
	wantOwner(t, w.at("a/b/c.txt"))
	if b, err := io.ReadAll(old); err != nil || string(b) != "hello" {
		t.Fatalf("the old file through an open fd: %q, %v; want it unchanged", b, err)
	}

	// A reader that ends early, fails, or yields more than announced changes nothing.
	bad := []struct {
		name string
		r    io.Reader
		size int64
	}{
		{"short", strings.NewReader("xy"), 10},
		{"failing", io.MultiReader(strings.NewReader("xy"), iotest.ErrReader(errors.New("boom"))), 10},
		{"long", strings.NewReader("0123456789"), 5},
	}
	for _, b := range bad {
		if err := w.put("a/b/c.txt", b.r, b.size); err == nil {
			t.Errorf("%s upload succeeded", b.name)
		}
		wantContent(t, w.at("a/b/c.txt"), "replaced")
	}

	// Over the workspace's size: no_space, and nothing left behind.
	big := bytes.Repeat([]byte{'x'}, 2<<20)
	err = w.put("a/b/c.txt", bytes.NewReader(big), int64(len(big)))
	wantCode(t, "put over the size", err, failNoSpace)
	wantContent(t, w.at("a/b/c.txt"), "replaced")

	// A file where a directory must go, a directory where the file must go.
	wantCode(t, "put below a file", w.putString("a/b/c.txt/d", "x"), failBadPath)
	wantCode(t, "put over a directory", w.putString("a/b", "x"), failConflict)
	noUploads(t, w, "a/b")
	noUploads(t, w, "a")
}

func TestWorkspaceGet(t *testing.T) {
	w := newTestWorkspace(t, 1<<20)
	if err := w.putString("f", "0123456789"); err != nil {
		t.Fatal(err)
	}
	if got, err := w.get("f", 10); err != nil || got != "0123456789" {
		t.Fatalf("get: %q, %v", got, err)
	}
	_, err := w.get("f", 9)
	wantCode(t, "get over max", err, failTooLarge)
	if !errors.Is(err, box.ErrFileTooLarge) || !errors.Is(localError(err, "f"), box.ErrFileTooLarge) {
		t.Errorf("get over max: %v", err)
	}
	_, err = w.get("missing", 10)
	wantCode(t, "get a missing file", err, failNotFound)
	if !errors.Is(localError(err, "missing"), box.ErrFileNotFound) {
		t.Errorf("get a missing file: %v", localError(err, "missing"))
	}
	if err := os.Mkdir(w.at("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = w.get("d", 10)
	wantCode(t, "get a directory", err, failNotRegular)

	// A FIFO no one writes to is refused at once, not read.
	if err := unix.Mkfifo(w.at("fifo"), 0o666); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := w.get("fifo", 10); done <- err }()
	select {
	case err := <-done:
		wantCode(t, "get a FIFO", err, failNotRegular)
	case <-time.After(5 * time.Second):
		t.Fatal("get of a FIFO blocks")
	}
}

func TestWorkspaceListRemove(t *testing.T) {
	w := newTestWorkspace(t, 1<<20)
	for _, p := range []string{"a/one", "a/b/two", "three"} {
		if err := w.putString(p, p); err != nil {
			t.Fatal(err)
		}
	}
	list := func(dir string) []string {
		t.Helper()
		files, err := w.list(dir)
		if err != nil {
			t.Fatalf("list %q: %v", dir, err)
		}
		var out []string
		for _, f := range files {
			out = append(out, fmt.Sprintf("%s:%d:%v", f.Path, f.Size, f.Dir))
		}
		slices.Sort(out)
		return out
	}
	want := []string{"a/b/two:7:false", "a/b:0:true", "a/one:5:false", "a:0:true", "three:5:false"}
	if got := list(""); !slices.Equal(got, want) {
		t.Errorf("list: %q, want %q", got, want)
	}
	if got := list("a/b"); !slices.Equal(got, []string{"a/b/two:7:false"}) {
		t.Errorf("list a/b: %q", got)
	}
	_, err := w.list("missing")
	wantCode(t, "list a missing directory", err, failNotFound)

	if err := w.remove("a/b/two"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	wantCode(t, "remove twice", w.remove("a/b/two"), failNotFound)
	wantCode(t, "remove a non-empty directory", w.remove("a"), failConflict)
	if err := w.remove("a/b"); err != nil {
		t.Fatalf("remove an empty directory: %v", err)
	}
	if got := list(""); !slices.Equal(got, []string{"a/one:5:false", "a:0:true", "three:5:false"}) {
		t.Errorf("list after remove: %q", got)
	}
}

// TestWorkspaceEscapes: no path leads out of the workspace, however the code laid out
// its files.
func TestWorkspaceEscapes(t *testing.T) {
	w := newTestWorkspace(t, 1<<20)
	secret := filepath.Join(w.outside, "secret")
	if err := os.WriteFile(secret, []byte("host"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := w.putString("in/f", "data"); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"root":   "/",
		"secret": secret,              // a host file, by its absolute path
		"out":    w.outside,           // a host directory
		"up":     "../../../../../..", // out by "..", to /
		"upout":  "../outside",        // out by "..", to the host directory
		"inlink": "in",                // stays inside
	}
	for name, target := range links {
		if err := os.Symlink(target, w.at(name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"../x", "/etc/passwd", "in/../../x", "root/etc/passwd", "secret", "out/secret", "up/etc/passwd", "upout/secret", "a\x00b"} {
		_, err := w.get(p, 1<<20)
		wantCode(t, "get "+p, err, failBadPath)
		if !errors.Is(localError(err, p), box.ErrBadPath) {
			t.Errorf("get %q: %v, want ErrBadPath", p, localError(err, p))
		}
		if p != "secret" {
			wantCode(t, "put "+p, w.putString(p, "evil"), failBadPath)
		}
		wantCode(t, "remove "+p+"/x", w.remove(p+"/x"), failBadPath)
		_, err = w.list(p)
		wantCode(t, "list "+p, err, failBadPath)
	}
	// A symlink that stays inside is followed.
	if got, err := w.get("inlink/f", 10); err != nil || got != "data" {
		t.Errorf("get through a symlink inside: %q, %v", got, err)
	}
	// Uploading to a symlink's name replaces the link, never writes its target.
	if err := w.putString("secret", "evil"); err != nil {
		t.Fatalf("put over a symlink: %v", err)
	}
	wantContent(t, w.at("secret"), "evil")
	if fi, err := os.Lstat(w.at("secret")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("secret after the upload: %v, %v", fi, err)
	}
	// Removing a symlink removes the link.
	if err := w.remove("root"); err != nil {
		t.Fatalf("remove a symlink: %v", err)
	}
	if err := w.remove("out"); err != nil {
		t.Fatalf("remove a symlink: %v", err)
	}
	wantContent(t, secret, "host")
	if ents, _ := os.ReadDir(w.outside); len(ents) != 1 {
		t.Errorf("the host directory holds %v", ents)
	}
}

// TestWorkspaceSwappedDirectory: a directory the code swaps for a symlink is not
// followed, whether it was swapped before the operation or while it runs.
func TestWorkspaceSwappedDirectory(t *testing.T) {
	w := newTestWorkspace(t, 16<<20)
	if err := os.WriteFile(filepath.Join(w.outside, "f"), []byte("host"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := w.putString("d/f", "box"); err != nil {
		t.Fatal(err)
	}
	// Before: d is now a symlink to a host directory.
	if err := os.Rename(w.at("d"), w.at("d.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(w.outside, w.at("d")); err != nil {
		t.Fatal(err)
	}
	_, err := w.get("d/f", 10)
	wantCode(t, "get through the swapped directory", err, failBadPath)
	wantCode(t, "put through the swapped directory", w.putString("d/g", "evil"), failBadPath)
	wantCode(t, "put below the swapped directory", w.putString("d/new/g", "evil"), failBadPath)
	wantCode(t, "remove through the swapped directory", w.remove("d/f"), failBadPath)
	_, err = w.list("d")
	wantCode(t, "list the swapped directory", err, failBadPath)

	// While: d and d.old trade places as fast as the kernel can (RENAME_EXCHANGE, so d
	// is always one of the two).
	stop := make(chan struct{})
	swapped := make(chan error, 1)
	go func() {
		dir, err := unix.Open(w.at("."), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			swapped <- err
			return
		}
		defer unix.Close(dir)
		for {
			select {
			case <-stop:
				swapped <- nil
				return
			default:
			}
			if err := unix.Renameat2(dir, "d", dir, "d.old", unix.RENAME_EXCHANGE); err != nil {
				swapped <- err
				return
			}
		}
	}()
	deadline := time.Now().Add(500 * time.Millisecond)
	for i := 0; time.Now().Before(deadline); i++ {
		if got, err := w.get("d/f", 10); err == nil && got != "box" {
			t.Errorf("get read %q through the swapped directory", got)
		}
		_ = w.putString(fmt.Sprintf("d/up%d", i), "evil")
		_ = w.remove("d/f")
		_ = w.putString("d/f", "box")
	}
	close(stop)
	if err := <-swapped; err != nil {
		t.Fatalf("swap: %v", err)
	}
	ents, err := os.ReadDir(w.outside)
	if err != nil || len(ents) != 1 {
		t.Fatalf("the host directory holds %d entries (%v), want only f", len(ents), err)
	}
	wantContent(t, filepath.Join(w.outside, "f"), "host")
}

// TestWorkspaceAtRefuses: the server only holds a directory that is a mount of its own,
// reached without following a symlink.
func TestWorkspaceAtRefuses(t *testing.T) {
	testutil.RequireRoot(t)
	tmp := t.TempDir()
	if err := os.Mkdir(filepath.Join(tmp, "plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/tmp", filepath.Join(tmp, "link")); err != nil {
		t.Fatal(err)
	}
	root, err := unix.Open(tmp, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	for _, name := range []string{"plain", "link", "missing", "../" + filepath.Base(tmp)} {
		if ws, err := workspaceAt(root, name, testUID, testGID); err == nil {
			ws.close()
			t.Errorf("workspaceAt %q succeeded", name)
		}
	}
}

// TestSessionFilesServedByServer runs the same file operations on two sessions: one
// whose init serves them (over the sync socket) and one whose workspace the server
// holds (through /proc/<init>/root) and serves them from. Results and errors must be
// the same, word for word.
func TestSessionFilesServedByServer(t *testing.T) {
	remote := startBash(t, box.Limits{})
	local := startBash(t, box.Limits{})
	ls := local.(*session)
	// init is this process's child, not reaped while the session lives: its pid is
	// its own.
	root, err := unix.Open(fmt.Sprintf("/proc/%d/root", ls.bp.proc.(*nsProc).cmd.Pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspaceAt(root, strings.TrimPrefix(box.WorkspaceDir, "/"), HostBoxUID, HostBoxUID)
	unix.Close(root)
	if err != nil {
		t.Fatalf("workspaceAt: %v", err)
	}
	ls.mu.Lock()
	ls.bp.ws = ws
	ls.mu.Unlock()

	setup := "mkdir -p /workspace/in && echo data > /workspace/in/f && mkfifo /workspace/fifo && ln -s /etc/shadow /workspace/shadow && ln -s ../../../etc /workspace/up && ln -s in /workspace/inlink"
	for _, s := range []box.Session{remote, local} {
		if res := call(t, s, setup, 5*time.Second); res.ExitCode != 0 {
			t.Fatalf("setup: %+v", res)
		}
	}
	ctx := context.Background()
	get := func(p string, max int64) func(box.Session) (string, error) {
		return func(s box.Session) (string, error) {
			var buf bytes.Buffer
			n, err := s.GetFile(ctx, p, &buf, max)
			return fmt.Sprintf("%d %q", n, buf.String()), err
		}
	}
	put := func(p string, r func() io.Reader, size int64) func(box.Session) (string, error) {
		return func(s box.Session) (string, error) { return "", s.PutFile(ctx, p, r(), size) }
	}
	text := func(s string) func() io.Reader { return func() io.Reader { return strings.NewReader(s) } }
	list := func(dir string) func(box.Session) (string, error) {
		return func(s box.Session) (string, error) {
			files, err := s.ListFiles(ctx, dir)
			var out []string
			for _, f := range files {
				out = append(out, fmt.Sprintf("%s:%d:%s", f.Path, f.Size, f.Mode))
			}
			slices.Sort(out)
			return strings.Join(out, " "), err
		}
	}
	remove := func(p string) func(box.Session) (string, error) {
		return func(s box.Session) (string, error) { return "", s.RemoveFile(ctx, p) }
	}
	boxSees := func(cmd string) func(box.Session) (string, error) {
		return func(s box.Session) (string, error) {
			res := call(t, s, cmd, 5*time.Second)
			return res.Stdout + res.Stderr, nil
		}
	}
	steps := []struct {
		name string
		do   func(box.Session) (string, error)
		want error // the error the step must fail with; errFails: any error
	}{
		{"put", put("new/sub/f.txt", text("hello"), 5), nil},
		{"box sees owners", boxSees("stat -c '%n %u:%g %a' /workspace/new /workspace/new/sub /workspace/new/sub/f.txt; cat /workspace/new/sub/f.txt"), nil},
		{"put over", put("new/sub/f.txt", text("again!"), 6), nil},
		{"get", get("new/sub/f.txt", 100), nil},
		{"get by a symlink inside", get("inlink/f", 100), nil},
		{"get from the box", get("in/f", 5), nil},
		{"get over max", get("new/sub/f.txt", 2), box.ErrFileTooLarge},
		{"get missing", get("missing", 100), box.ErrFileNotFound},
		{"get ..", get("../../etc/passwd", 100), box.ErrBadPath},
		{"get absolute", get("/etc/passwd", 100), box.ErrBadPath},
		{"get symlink out", get("shadow", 100), box.ErrBadPath},
		{"get through symlink out", get("up/passwd", 100), box.ErrBadPath},
		{"get fifo", get("fifo", 100), box.ErrNotRegular},
		{"get dir", get("in", 100), box.ErrNotRegular},
		{"get nul", get("a\x00b", 100), box.ErrBadPath},
		{"put through symlink out", put("up/evil", text("x"), 1), box.ErrBadPath},
		{"put over a dir", put("in", text("x"), 1), box.ErrFileConflict},
		{"put short", put("new/sub/f.txt", text("short"), 100), errFails},
		{"put failing", put("new/sub/f.txt", func() io.Reader { return iotest.ErrReader(errors.New("boom")) }, 100), errFails},
		{"put unchanged", get("new/sub/f.txt", 100), nil},
		{"list", list(""), nil},
		{"list in", list("in"), nil},
		{"list symlink out", list("shadow"), box.ErrBadPath},
		{"list missing", list("missing"), box.ErrFileNotFound},
		{"remove", remove("new/sub/f.txt"), nil},
		{"remove twice", remove("new/sub/f.txt"), box.ErrFileNotFound},
		{"remove non-empty", remove("in"), box.ErrFileConflict},
		{"remove through symlink out", remove("up/passwd"), box.ErrBadPath},
		{"remove symlink", remove("shadow"), nil},
		{"box sees", boxSees("ls -A /workspace | sort | tr '\\n' ' '"), nil},
	}
	for _, st := range steps {
		rOut, rErr := st.do(remote)
		lOut, lErr := st.do(local)
		if rOut != lOut || fmt.Sprint(rErr) != fmt.Sprint(lErr) {
			t.Errorf("%s: init served %q, %v; the server served %q, %v", st.name, rOut, rErr, lOut, lErr)
		}
		switch {
		case st.want == nil && lErr != nil:
			t.Errorf("%s: %v", st.name, lErr)
		case errors.Is(st.want, errFails):
			if lErr == nil {
				t.Errorf("%s succeeded, want an error", st.name)
			}
		case st.want != nil && !errors.Is(lErr, st.want):
			t.Errorf("%s: %v, want %v", st.name, lErr, st.want)
		}
		if st.name == "box sees owners" && lOut != "/workspace/new 65534:65534 755\n/workspace/new/sub 65534:65534 755\n/workspace/new/sub/f.txt 65534:65534 644\nhello" {
			t.Errorf("the box sees %q", lOut)
		}
	}
	if err := local.Err(); err != nil {
		t.Fatalf("the session ended: %v", err)
	}
	// The server served them, not init: without its fd they fail.
	ls.mu.Lock()
	ws.close()
	ls.mu.Unlock()
	if _, err := local.ListFiles(ctx, ""); err == nil {
		t.Error("the server's workspace is closed, yet ListFiles succeeded")
	}
}

// errFails: the step must fail, with whatever error.
var errFails = errors.New("any error")
