package gate

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/config"
)

var discard = slog.New(slog.DiscardHandler)

// tokenServer returns server settings without keys, keeping state in dir.
func tokenServer(t *testing.T, dir string) config.ResolvedServer {
	t.Helper()
	c, err := config.Parse("m.yaml", []byte("server: {data_dir: '"+dir+"'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := c.ResolveServer(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func TestGeneratedToken(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "data")
	g, err := New(tokenServer(t, dir), discard)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "token")
	if !g.Generated() || g.TokenPath() != path {
		t.Fatalf("Generated() = %v, TokenPath() = %q; want true, %s", g.Generated(), g.TokenPath(), path)
	}
	if p, ok := g.Lookup(DefaultPrincipal); !ok || !p.Admin {
		t.Errorf("the generated token's principal is not an admin: %+v", p)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, dir: 0o700 | fs.ModeDir} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".token-*")); len(left) != 0 {
		t.Errorf("temporary files left: %q", left)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSuffix(string(data), "\n")
	if !strings.HasPrefix(token, "moat_") || len(token) != len("moat_")+43 || !validToken(token) {
		t.Fatalf("token %q: want moat_ and 43 base64url characters", token)
	}
	p, err := g.Authenticate(request("Bearer " + token))
	if err != nil || p.Name != "default" || p.Profile != "default" || len(p.Profiles) != 0 {
		t.Fatalf("Authenticate(token) = %+v, %v; want principal default", p, err)
	}

	// A second start reuses the token.
	g2, err := New(tokenServer(t, dir), discard)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Generated() || g2.TokenPath() != path {
		t.Errorf("second New: Generated() = %v, TokenPath() = %q", g2.Generated(), g2.TokenPath())
	}
	if _, err := g2.Authenticate(request("Bearer " + token)); err != nil {
		t.Errorf("second gate refuses the token: %v", err)
	}
	// Each data directory gets its own token.
	other, err := New(tokenServer(t, t.TempDir()), discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Authenticate(request("Bearer " + token)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("another data directory accepts the token: %v", err)
	}
}

func TestTokenFileRefused(t *testing.T) {
	const good = "moat_0123456789abcdefghij"
	tests := []struct {
		name  string
		setup func(t *testing.T, dir, path string)
		want  string
	}{
		{"world readable", func(t *testing.T, dir, path string) { writeFile(t, path, good, 0o644) },
			"is accessible to group or others (mode 0644): run chmod 600"},
		{"group readable", func(t *testing.T, dir, path string) { writeFile(t, path, good, 0o640) },
			"is accessible to group or others (mode 0640)"},
		{"world writable", func(t *testing.T, dir, path string) { writeFile(t, path, good, 0o602) },
			"is accessible to group or others (mode 0602)"},
		{"symbolic link", func(t *testing.T, dir, path string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			writeFile(t, target, good, 0o600)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link, not a regular file"},
		{"dangling symbolic link", func(t *testing.T, dir, path string) {
			if err := os.Symlink(filepath.Join(dir, "nowhere"), path); err != nil {
				t.Fatal(err)
			}
		}, "is a symbolic link, not a regular file"},
		{"directory", func(t *testing.T, dir, path string) {
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "is not a regular file"},
		{"empty", func(t *testing.T, dir, path string) { writeFile(t, path, "\n", 0o600) }, "does not hold a token"},
		{"short", func(t *testing.T, dir, path string) { writeFile(t, path, "moat_x", 0o600) }, "does not hold a token"},
		{"two words", func(t *testing.T, dir, path string) { writeFile(t, path, good+" "+good, 0o600) }, "does not hold a token"},
		{"data directory writable by others", func(t *testing.T, dir, path string) {
			writeFile(t, path, good, 0o600)
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		}, "is writable by group or others (mode 0777)"},
		{"owned by another user", func(t *testing.T, dir, path string) {
			if os.Geteuid() != 0 {
				t.Skip("needs root to give the file away")
			}
			writeFile(t, path, good, 0o600)
			if err := os.Chown(path, 12345, 12345); err != nil {
				t.Fatal(err)
			}
		}, "is owned by uid 12345, not by you (uid 0)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "token")
			tc.setup(t, dir, path)
			before, _ := os.Lstat(path)
			g, err := New(tokenServer(t, dir), discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error containing %q", g, err, tc.want)
			}
			if strings.Contains(err.Error(), good) {
				t.Errorf("error shows the token: %v", err)
			}
			after, _ := os.Lstat(path)
			if before != nil && (after == nil || !os.SameFile(before, after) || after.Mode() != before.Mode()) {
				t.Error("New changed the refused token file")
			}
			// Clients refuse it too (the data directory is not theirs to check).
			if tc.name != "data directory writable by others" {
				if _, err := ReadToken(dir, func(string) string { return "" }); err == nil {
					t.Error("ReadToken accepted the file")
				}
			}
		})
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // despite the umask
		t.Fatal(err)
	}
}

func TestReadToken(t *testing.T) {
	const fileToken = "moat_from-the-file-0123"
	withFile := t.TempDir()
	writeFile(t, filepath.Join(withFile, "token"), fileToken+"\n", 0o600)
	loose := t.TempDir()
	writeFile(t, filepath.Join(loose, "token"), fileToken, 0o644)
	empty := t.TempDir()

	tests := []struct {
		name    string
		dir     string
		env     string
		want    string
		wantErr string
	}{
		{"file", withFile, "", fileToken, ""},
		{"env wins over the file", withFile, "moat_from-env", "moat_from-env", ""},
		{"env without a file", empty, "moat_from-env", "moat_from-env", ""},
		{"env is trimmed", empty, " moat_from-env\n", "moat_from-env", ""},
		{"blank env means unset", withFile, "  ", fileToken, ""},
		{"env with a space", empty, "moat from env", "", "$MOAT_TOKEN holds spaces"},
		{"neither", empty, "", "", "no API token: set $MOAT_TOKEN, or start moat serve, which writes one to " + filepath.Join(empty, "token")},
		{"loose file", loose, "", "", "is accessible to group or others (mode 0644)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(name string) string {
				if name == "MOAT_TOKEN" {
					return tc.env
				}
				return ""
			}
			got, err := ReadToken(tc.dir, getenv)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadToken = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ReadToken = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := ReadToken(empty, func(string) string { return "" }); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadToken without a file = %v, want fs.ErrNotExist", err)
	}
}

func TestCreateTokenRace(t *testing.T) {
	// A token that appears between the read and the link is not replaced.
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	writeFile(t, path, "moat_first-one-0123456789", 0o600)
	if _, err := createToken(dir, path); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("createToken over an existing file = %v, want fs.ErrExist", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "moat_first-one-0123456789" {
		t.Errorf("token file now holds %q", data)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".token-*")); len(left) != 0 {
		t.Errorf("temporary files left: %q", left)
	}
}
