package box

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// Language describes how to run code of one language inside a box. A language is data:
// adding one means adding an entry to Languages.
type Language struct {
	// Name is what users type: --lang NAME.
	Name string
	// Extensions infer the language from a file name.
	Extensions []string
	// Argv runs the code file; CodePath is appended as the last argument. Argv[0] is an
	// absolute path inside the box (never looked up on PATH).
	Argv []string
	// CodePath is where the code file is placed inside the box (read-only).
	CodePath string
}

// Languages are the languages moat runs.
var Languages = map[string]Language{
	"python": {
		Name:       "python",
		Extensions: []string{".py"},
		// -u: unbuffered, so output printed before a timeout or OOM kill is not lost.
		Argv:     []string{"/usr/bin/python3", "-u"},
		CodePath: "/.moat/main.py",
	},
	"bash": {
		Name:       "bash",
		Extensions: []string{".sh", ".bash"},
		Argv:       []string{"/bin/bash", "--noprofile", "--norc"},
		CodePath:   "/.moat/main.sh",
	},
}

// LanguageNames lists the language names for messages.
func LanguageNames() string { return "python|bash" }

// LookupLanguage returns the language called name.
func LookupLanguage(name string) (Language, error) {
	l, ok := Languages[name]
	if !ok {
		return Language{}, fmt.Errorf("unknown language %q (want %s)", name, LanguageNames())
	}
	return l, nil
}

// LanguageForFile infers the language from a file name's extension.
func LanguageForFile(name string) (Language, error) {
	ext := strings.ToLower(filepath.Ext(name))
	for _, l := range Languages {
		for _, e := range l.Extensions {
			if e == ext {
				return l, nil
			}
		}
	}
	return Language{}, fmt.Errorf("cannot infer the language of %q from its extension; pass --lang %s", name, LanguageNames())
}

// MaxCodeBytes is the largest program moat accepts (documented in the README).
const MaxCodeBytes = 1 << 20

// CheckCode rejects code that cannot be a program: empty, too large, not UTF-8 text,
// or containing NUL bytes.
func CheckCode(code []byte) error {
	if len(strings.TrimSpace(string(code))) == 0 {
		return fmt.Errorf("code is empty")
	}
	if len(code) > MaxCodeBytes {
		return fmt.Errorf("code is %d bytes, over the limit of %d bytes", len(code), MaxCodeBytes)
	}
	if i := strings.IndexByte(string(code), 0); i >= 0 {
		return fmt.Errorf("code is binary, not text (NUL byte at offset %d)", i)
	}
	if !utf8.Valid(code) {
		return fmt.Errorf("code is not valid UTF-8 text")
	}
	return nil
}

// SafeEnv is the whole environment code starts with, before the caller's own pairs.
// Nothing of moat's own environment is passed on.
var SafeEnv = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin",
	"HOME=/workspace",
	"USER=sandbox",
	"LOGNAME=sandbox",
	"SHELL=/bin/bash",
	"LANG=C.UTF-8",
	"LC_ALL=C.UTF-8",
	"TMPDIR=/tmp",
	"PYTHONDONTWRITEBYTECODE=1",
	"MPLCONFIGDIR=/tmp/.matplotlib",
	"MPLBACKEND=Agg", // figures render off-screen; the runner returns them as displays
}

var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// CheckEnv validates one KEY=VALUE pair given by a caller.
func CheckEnv(kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("environment entry %q is not KEY=VALUE", kv)
	}
	if !envName().MatchString(k) {
		return fmt.Errorf("environment name %q is not valid (letters, digits and _, not starting with a digit)", k)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fmt.Errorf("environment value of %s contains a NUL byte", k)
	}
	return nil
}

// MergeEnv returns SafeEnv overridden by extra (later entries win).
func MergeEnv(extra []string) []string {
	idx := map[string]int{}
	out := make([]string, 0, len(SafeEnv)+len(extra))
	for _, kv := range append(append([]string{}, SafeEnv...), extra...) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// CleanDest validates a workspace destination path and returns it cleaned and relative.
// Absolute paths are accepted only under /workspace.
func CleanDest(dest string) (string, error) {
	if dest == "" {
		return "", fmt.Errorf("destination path is empty")
	}
	if strings.IndexByte(dest, 0) >= 0 {
		return "", fmt.Errorf("destination path contains a NUL byte")
	}
	if filepath.IsAbs(dest) {
		rel, err := filepath.Rel(WorkspaceDir, filepath.Clean(dest))
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			return "", fmt.Errorf("destination %q is outside the workspace %s", dest, WorkspaceDir)
		}
		dest = rel
	}
	c := filepath.Clean(dest)
	if c == "." || c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("destination %q is outside the workspace", dest)
	}
	return c, nil
}

// WorkspaceDir is the code's working directory inside every box.
const WorkspaceDir = "/workspace"
