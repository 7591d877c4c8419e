package filter

import (
	"path"
	"regexp"
	"strings"
	"sync"
)

var (
	// traceHeader starts a goroutine's stack in a Go panic or runtime.Stack dump.
	traceHeader = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^goroutine \d+ \[`) })
	// goSource is a Go source location, as in stack frames and log.Lshortfile.
	goSource = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\.go:\d+`) })
	// traceFunc is a frame's function line: "main.main()", "pkg.(*T).M(0xc0, {0x1})".
	traceFunc = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[^\s(]+\(.*\)$`) })
	// ipPort is an IPv4 or bracketed IPv6 address, or localhost, with a port.
	ipPort = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}|\[[0-9A-Fa-f:.]+(?:%[0-9A-Za-z._-]+)?\]|\blocalhost):[0-9]{1,5}\b`)
	})
	// absPath is a candidate absolute path; absPathStart decides whether it is one.
	absPath = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`/[A-Za-z0-9._~@%+=,-]+(?:/[A-Za-z0-9._~@%+=,-]*)*`) })
)

// boxRoots are the directories of the box that error texts may name: the workspace,
// the box's /tmp and moat's support files.
var boxRoots = []string{"/workspace", "/tmp", "/.moat"}

// SanitizeError prepares one of moat's own error texts for an API user. It:
//
//   - drops Go stack traces: from a "goroutine N [" line, the frames that follow
//     (function lines, indented lines, "created by" lines, blank lines), and any
//     other line with a Go source location ("file.go:NN");
//   - replaces IP:port addresses ("10.0.0.5:8080", "[fd00::1]:443",
//     "localhost:6379") with "<addr>";
//   - replaces absolute paths outside /workspace, /tmp and /.moat with "<path>"
//     ("/workspace/../etc/passwd" counts as /etc/passwd). A path inside a URL
//     ("http://host/a/b") is not a host path and is kept, except after file://.
//
// Errors must not tell a caller where moat keeps its files, which addresses its
// network uses, or which code paths it took: that is a map for whoever probes it.
func SanitizeError(msg string) string {
	lines := strings.Split(msg, "\n")
	kept := lines[:0]
	inTrace := false
	for _, ln := range lines {
		if traceHeader().MatchString(ln) {
			for len(kept) > 0 && strings.TrimSpace(kept[len(kept)-1]) == "" {
				kept = kept[:len(kept)-1] // the blank line that separates a trace
			}
			inTrace = true
			continue
		}
		if inTrace {
			if isTraceLine(ln) {
				continue
			}
			inTrace = false
		}
		if goSource().MatchString(ln) {
			continue
		}
		kept = append(kept, ln)
	}
	out := strings.TrimRight(strings.Join(kept, "\n"), " \t\r\n")
	out = ipPort().ReplaceAllString(out, "<addr>")
	return sanitizePaths(out)
}

func isTraceLine(ln string) bool {
	t := strings.TrimSpace(ln)
	return t == "" || ln[0] == ' ' || ln[0] == '\t' ||
		strings.HasPrefix(ln, "created by ") ||
		strings.HasPrefix(t, "...") || // "...additional frames elided..."
		traceFunc().MatchString(ln) || goSource().MatchString(ln)
}

func sanitizePaths(s string) string {
	locs := absPath().FindAllStringIndex(s, -1)
	if locs == nil {
		return s
	}
	var b strings.Builder
	pos := 0
	for _, loc := range locs {
		a, e := loc[0], loc[1]
		if !absPathStart(s, a) {
			continue
		}
		// Trailing punctuation belongs to the sentence.
		for e > a+1 && (s[e-1] == '.' || s[e-1] == ',') {
			e--
		}
		if inBox(s[a:e]) {
			continue
		}
		b.WriteString(s[pos:a])
		b.WriteString("<path>")
		pos = e
	}
	b.WriteString(s[pos:])
	return b.String()
}

// absPathStart reports whether the '/' at s[a] starts an absolute path: it begins the
// text or follows a separator, not a host name or another path ("http://h/x", "a/b").
// The path of a file:// URL ("file:///etc/passwd") counts.
func absPathStart(s string, a int) bool {
	if a == 0 || strings.HasSuffix(s[:a], "file://") {
		return true
	}
	return strings.IndexByte(" \t\r\n\"'`=([{<,;:|", s[a-1]) >= 0
}

func inBox(p string) bool {
	p = path.Clean(p)
	for _, root := range boxRoots {
		if p == root || strings.HasPrefix(p, root+"/") {
			return true
		}
	}
	return false
}
