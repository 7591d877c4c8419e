package config

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a config: where it is and what is wrong.
type Problem struct {
	// File is the name given to Parse or the path given to Load; empty for a Config
	// built in code.
	File string
	// Line is the 1-based line in File, or 0 when unknown (a Config built in code).
	Line int
	// Path names the setting, e.g. "profiles.web.python.mode"; empty for a problem
	// with the file as a whole (a YAML syntax error).
	Path string
	// Msg says what is wrong: lower case, no trailing punctuation.
	Msg string
}

// Error formats p as "FILE:LINE: PATH: MSG", leaving out the parts that are unknown.
func (p Problem) Error() string {
	var b strings.Builder
	switch {
	case p.File != "" && p.Line > 0:
		b.WriteString(p.File + ":" + strconv.Itoa(p.Line) + ": ")
	case p.File != "":
		b.WriteString(p.File + ": ")
	case p.Line > 0:
		b.WriteString("line " + strconv.Itoa(p.Line) + ": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Error is returned by Load, Parse and Validate when a config is invalid. It lists
// every problem found, in file order, so that one run shows all of them. Use
// errors.As to get at the Problems.
type Error struct {
	Problems []Problem
}

// Error prints one problem per line.
func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// problems collects Problems for one file.
type problems struct {
	file  string
	lines map[string]int // setting path -> line, from the parsed file; nil for a Config built in code
	list  []Problem
}

// add records a problem with the setting at path. The line is that of path, or of
// the nearest enclosing setting that the file spells out.
func (ps *problems) add(path, format string, args ...any) {
	ps.list = append(ps.list, Problem{File: ps.file, Line: lineOf(ps.lines, path), Path: path, Msg: cleanMsg(format, args...)})
}

// addLine records a problem at a known line.
func (ps *problems) addLine(line int, path, format string, args ...any) {
	ps.list = append(ps.list, Problem{File: ps.file, Line: line, Path: path, Msg: cleanMsg(format, args...)})
}

// err returns the problems, in file order, as an *Error, or nil if there are none.
func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	list := append([]Problem(nil), ps.list...)
	sortProblems(list)
	return &Error{Problems: list}
}

// sortProblems orders problems by line, keeping the order of problems on one line.
// Problems without a line go last.
func sortProblems(list []Problem) {
	key := func(p Problem) int {
		if p.Line <= 0 {
			return math.MaxInt
		}
		return p.Line
	}
	slices.SortStableFunc(list, func(a, b Problem) int { return cmp.Compare(key(a), key(b)) })
}

// cleanMsg formats a message and keeps it on one line: a value quoted from the file
// cannot break the "FILE:LINE: message" format.
func cleanMsg(format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	msg = strings.ReplaceAll(msg, "\r", `\r`)
	return strings.ReplaceAll(msg, "\n", `\n`)
}

// lineOf returns the line of path, or of its nearest ancestor present in lines.
func lineOf(lines map[string]int, path string) int {
	for lines != nil {
		if l, ok := lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
	return 0
}

// parentPath strips the last segment of a setting path: "a.b[2]" -> "a.b" -> "a" -> "".
// Segments quoted by seg may contain dots; parentPath only ever has to be close, as it
// is used to find a line to point at.
func parentPath(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}
