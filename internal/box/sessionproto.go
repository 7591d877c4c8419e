package box

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"sync"
)

// The session protocol between a backend and the interpreter in a session's box.
//
// The backend writes calls to the interpreter's request channel and reads JSON lines
// from its report channel (fd 3). The interpreter writes {"kind":"ready"} once it can
// take calls, and {"kind":"done","id":ID,"exit":N} when call ID has finished with
// exit status N (0 ok, 1 exception, 77 policy violation, 130 interrupted). Other lines
// (violations, the trailing expression's value, displays) are the call's report.
//
// Python: the policy runner in session mode reads requests from fd 4: a header line
// {"id":ID,"bytes":L} then L bytes of code. SIGINT raises KeyboardInterrupt in the
// call.
//
// Bash: an interactive shell (so SIGINT abandons the running command line, as at a
// terminal, and the shell lives on) reads its commands from stdin. Each call is the
// code in a here-document with a random delimiter, read into a variable and eval'd at
// top level (so cd, exports, functions and declare persist), with stdin from /dev/null
// and fd 3 closed; then a helper reports the exit status on fd 3. An interrupted
// command line never reaches the helper, so the backend writes the helper's call with
// status 130 after the signal.
//
// Neither channel is trusted: the code runs in the process that reports on it and can
// write to fd 3 by other ways. Call ids are random, so a line the code forges without
// reading the interpreter's memory matches no call; what the code can do by reading
// it confuses only its own session's bookkeeping. Nothing the code prints on stdout or
// stderr is ever read as a marker.

// SessionLine is a protocol line of the report channel.
type SessionLine struct {
	Kind string // "ready" or "done"
	ID   int64
	Exit int
}

// doneLine is a done line, exactly as the Python runner and the shell write it.
var doneLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\{"kind":"done","id":(0|[1-9][0-9]{0,18}),"exit":(0|[1-9][0-9]{0,2})\}$`)
})

// ParseSessionLine recognises a "ready" or "done" line; ok is false for anything else
// (the call's report lines, garbage). It is strict: the line (without its newline;
// surrounding spaces and a carriage return are ignored) must be exactly what the
// interpreter writes — {"kind":"ready"}, or {"kind":"done","id":N,"exit":E} with
// 0 <= N < 2^63 and 0 <= E <= 255 — and at most 64 bytes. The Python runner writes an
// empty line before a done line (so that a line the code left unterminated cannot
// swallow it); empty lines are not protocol lines.
func ParseSessionLine(line []byte) (SessionLine, bool) {
	line = bytes.TrimSpace(line)
	if len(line) > 64 {
		return SessionLine{}, false
	}
	if bytes.Equal(line, []byte(`{"kind":"ready"}`)) {
		return SessionLine{Kind: "ready"}, true
	}
	m := doneLine().FindSubmatch(line)
	if m == nil {
		return SessionLine{}, false
	}
	id, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		return SessionLine{}, false
	}
	exit, _ := strconv.Atoi(string(m[2])) // at most three digits
	if exit > 255 {
		return SessionLine{}, false
	}
	return SessionLine{Kind: "done", ID: id, Exit: exit}, true
}

// NewCallID returns a random call id that JSON carries exactly (below 2^53).
func NewCallID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return int64(binary.BigEndian.Uint64(b[:])>>11) | 1
}

// SessionArgv is how a language's session interpreter starts when the engine gives
// none, and whether its request channel is its stdin.
func SessionArgv(lang string) (argv []string, onStdin bool, err error) {
	switch lang {
	case "bash":
		return []string{"/bin/bash", "--noprofile", "--norc", "--noediting", "-i"}, true, nil
	case "python":
		return nil, false, fmt.Errorf("a python session needs the policy runner (SessionSpec.Interpreter)")
	}
	return nil, false, fmt.Errorf("unknown language %q", lang)
}

// bashBootstrap sets the session shell up: no prompts, no history, the done helper,
// then the ready line.
const bashBootstrap = `set +H +o history; PS1=''; PS2=''; PS0=''; PROMPT_COMMAND=''; unset HISTFILE; ` +
	`__moat_done() { printf '{"kind":"done","id":%s,"exit":%s}\n' "$1" "$2" >&3; }; ` +
	`printf '{"kind":"ready"}\n' >&3` + "\n"

// SessionBootstrap is what the backend writes to the request channel once, right after
// the interpreter starts (nil when nothing).
func SessionBootstrap(lang string) []byte {
	if lang == "bash" {
		return []byte(bashBootstrap)
	}
	return nil
}

// EncodeCall encodes one call for the request channel.
func EncodeCall(lang string, id int64, code []byte) []byte {
	if lang != "bash" {
		hdr := fmt.Sprintf("{\"id\":%d,\"bytes\":%d}\n", id, len(code))
		return append([]byte(hdr), code...)
	}
	delim := heredocDelimiter(code)
	var b bytes.Buffer
	b.WriteString("IFS= read -r -d '' __moat_code <<'" + delim + "'\n")
	b.Write(code)
	if len(code) == 0 || code[len(code)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString(delim + "\n")
	b.WriteString("eval \"$__moat_code\" </dev/null 3>&-; __moat_done " + strconv.FormatInt(id, 10) + " $?\n")
	return b.Bytes()
}

// EncodeInterrupt is what the backend writes after interrupting call id (nil when
// nothing): the shell's abandoned command line never reported.
func EncodeInterrupt(lang string, id int64) []byte {
	if lang != "bash" {
		return nil
	}
	return []byte("__moat_done " + strconv.FormatInt(id, 10) + " 130\n")
}

// heredocDelimiter returns a random delimiter that is no line of code.
func heredocDelimiter(code []byte) string {
	for {
		var b [12]byte
		_, _ = rand.Read(b[:])
		d := "__MOAT_EOF_" + hex.EncodeToString(b[:])
		if !bytes.Contains(code, []byte(d)) {
			return d
		}
	}
}
