package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Bounds on a config file. Real configs are a few KiB with a few dozen keys per
// mapping. The bounds also keep the yaml decoder, whose duplicate-key check is
// quadratic in the size of a mapping, fast.
const (
	MaxFileSize    = 1 << 20
	MaxMappingKeys = 1000
	MaxListItems   = 10000
)

// Load reads the YAML config file at path and returns it validated. Unknown keys,
// duplicate keys, wrong types, YAML anchors and aliases, and every Validate problem
// are errors; the *Error lists all of them as "PATH:LINE: setting: message".
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load from bytes; name is used in messages. An empty document (or one of
// only comments) gives Default().
func Parse(name string, data []byte) (*Config, error) {
	ps := &problems{file: name}
	if len(data) > MaxFileSize {
		ps.addLine(0, "", "file is larger than %d bytes", MaxFileSize)
		return nil, ps.err()
	}
	if line, msg := checkText(data); msg != "" {
		ps.addLine(line, "", "%s", msg)
		return nil, ps.err()
	}

	// Pass 1: the node tree, for line numbers and precise messages.
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		c := Default()
		c.file = name
		return c, nil
	} else if err != nil {
		addYAMLError(ps, err)
		return nil, ps.err()
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		ps.addLine(max(extra.Line, 1), "", "more than one yaml document (remove the ---)")
		return nil, ps.err()
	} else if !errors.Is(err, io.EOF) {
		addYAMLError(ps, err)
		return nil, ps.err()
	}
	w := &walker{ps: ps, lines: map[string]int{"": 1}, set: map[string]bool{}}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	if isNull(root) {
		c := Default()
		c.file = name
		return c, nil
	}
	if root.Kind != yaml.MappingNode {
		ps.addLine(root.Line, "", "want a mapping of settings (isolation, limits, profile, profiles, filter, server), got %s", describe(root))
		return nil, ps.err()
	}
	w.walk(root, reflect.TypeFor[Config](), "")
	shape := slices.Clone(ps.list) // problems with keys and types
	if w.large {
		return nil, ps.err()
	}

	// Pass 2: decode. With a sound shape, strictly: this should not fail, and if it
	// does, yaml's own message is still reported with its line. With problems in the
	// shape, leniently, to validate what could be decoded and so report every problem
	// in one go.
	c := new(Config)
	d := yaml.NewDecoder(bytes.NewReader(data))
	d.KnownFields(len(shape) == 0)
	if err := d.Decode(c); err != nil && len(shape) == 0 {
		addYAMLError(ps, err)
		return nil, ps.err()
	}
	c.file, c.lines, c.set = name, w.lines, w.set
	if verr, ok := errors.AsType[*Error](c.Validate()); ok {
		for _, p := range verr.Problems {
			if !covered(p.Path, shape) {
				ps.list = append(ps.list, p)
			}
		}
	}
	if err := ps.err(); err != nil {
		return nil, err
	}
	// Spell out the implied values, as Default does.
	if c.Isolation == "" {
		c.Isolation = IsolationStrict
	}
	if c.Profile == "" {
		c.Profile = ProfileDefault
	}
	return c, nil
}

// covered reports whether the setting at path is, or lies under, a setting with a
// problem in shape, whose value was therefore not decoded.
func covered(path string, shape []Problem) bool {
	for _, p := range shape {
		if p.Path == "" || path == p.Path || strings.HasPrefix(path, p.Path+".") || strings.HasPrefix(path, p.Path+"[") {
			return true
		}
	}
	return false
}

// walker checks a node tree against the Go types of Config, recording the line of
// every setting the file spells out.
type walker struct {
	ps    *problems
	large bool            // a mapping or list is too large to decode
	lines map[string]int  // setting path -> line of its key or list item
	set   map[string]bool // settings with a non-null value
}

// walk checks n as a value of type t at path.
func (w *walker) walk(n *yaml.Node, t reflect.Type, path string) {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		w.ps.addLine(n.Line, path, "yaml anchors and aliases are not supported (use extends to share settings)")
		return
	}
	if isNull(n) {
		return // unset, as if absent
	}
	switch t.Kind() {
	case reflect.Struct:
		if !w.want(n, yaml.MappingNode, path, "a mapping") {
			return
		}
		fields := yamlFields(t)
		w.pairs(n, path, func(key string, k, v *yaml.Node) {
			p := join(path, seg(key))
			ft, ok := fields[key]
			if !ok {
				w.ps.addLine(k.Line, p, "unknown key (want %s)", orList(slices.Sorted(maps.Keys(fields))))
				return
			}
			w.record(p, k.Line, v)
			w.walk(v, ft, p)
		})
	case reflect.Map:
		if !w.want(n, yaml.MappingNode, path, "a mapping") {
			return
		}
		w.pairs(n, path, func(key string, k, v *yaml.Node) {
			p := join(path, seg(key))
			w.record(p, k.Line, v)
			w.walk(v, t.Elem(), p)
		})
	case reflect.Slice:
		if !w.want(n, yaml.SequenceNode, path, "a list") {
			return
		}
		if len(n.Content) > MaxListItems {
			w.ps.addLine(n.Line, path, "list has %d items, more than %d", len(n.Content), MaxListItems)
			w.large = true
			return
		}
		for i, item := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			w.record(p, item.Line, item)
			w.walk(item, t.Elem(), p)
		}
	case reflect.String:
		if !w.want(n, yaml.ScalarNode, path, "a string") {
			return
		}
		if !plainScalar(n) {
			w.ps.addLine(n.Line, path, "want a string, got %s", describe(n))
		}
	case reflect.Bool:
		if !w.want(n, yaml.ScalarNode, path, "true or false") {
			return
		}
		if n.Tag != "!!bool" {
			w.ps.addLine(n.Line, path, "want true or false, got %s", describe(n))
		}
	case reflect.Int, reflect.Int64:
		if !w.want(n, yaml.ScalarNode, path, "a whole number") {
			return
		}
		if n.Tag != "!!int" {
			w.ps.addLine(n.Line, path, "want a whole number, got %s", describe(n))
		} else if _, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err != nil {
			w.ps.addLine(n.Line, path, "number %s is out of range", strconv.Quote(n.Value))
		}
	case reflect.Float64:
		if !w.want(n, yaml.ScalarNode, path, "a number") {
			return
		}
		if n.Tag != "!!int" && n.Tag != "!!float" {
			w.ps.addLine(n.Line, path, "want a number, got %s", describe(n))
		}
	default:
		panic(fmt.Sprintf("config: walker cannot check %v", t)) // a Config field of a new kind
	}
}

// want checks n's kind, reporting a problem if it differs.
func (w *walker) want(n *yaml.Node, kind yaml.Kind, path, what string) bool {
	if n.Kind == kind {
		return true
	}
	w.ps.addLine(n.Line, path, "want %s, got %s", what, describe(n))
	return false
}

// pairs calls f for every key and value of the mapping n, after checking that the
// key is a plain scalar and not a duplicate.
func (w *walker) pairs(n *yaml.Node, path string, f func(key string, k, v *yaml.Node)) {
	if len(n.Content)/2 > MaxMappingKeys {
		w.ps.addLine(n.Line, path, "mapping has %d keys, more than %d", len(n.Content)/2, MaxMappingKeys)
		w.large = true
		return
	}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Anchor != "" || !plainScalar(k) {
			if k.Tag == "!!merge" {
				w.ps.addLine(k.Line, path, "yaml merge keys (<<) are not supported (use extends to share settings)")
			} else {
				w.ps.addLine(k.Line, path, "want a plain key, got %s", describe(k))
			}
			continue
		}
		if line, dup := first[k.Value]; dup {
			w.ps.addLine(k.Line, join(path, seg(k.Value)), "duplicate key (first at line %d)", line)
			continue
		}
		first[k.Value] = k.Line
		f(k.Value, k, v)
	}
}

// record notes the line of the setting at path, so that Validate can point at it,
// and whether its value is not null, so that Validate can tell an explicit value
// from an absent one (a null value counts as absent).
func (w *walker) record(path string, line int, v *yaml.Node) {
	w.lines[path] = line
	if !isNull(v) {
		w.set[path] = true
	}
}

// plainScalar reports whether n is a scalar that reads as a string: a string, or a
// number or boolean, read as written (deny: [true] denies the command "true").
// Null, binary, timestamps, merge keys and custom tags do not.
func plainScalar(n *yaml.Node) bool {
	switch n.Tag {
	case "!!str", "!!int", "!!float", "!!bool":
		return n.Kind == yaml.ScalarNode
	}
	return false
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" || n.Kind == 0
}

// describe names what a node is, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!str":
			return "string " + strconv.Quote(v)
		}
		return strings.TrimPrefix(n.Tag, "!!") + " " + strconv.Quote(v)
	}
	return "nothing"
}

// yamlFields maps the yaml keys of struct type t to their field types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.IsExported() && name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	return fields
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

var plainSegRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]+$`) })

// seg spells a map key or unknown key as a segment of a setting path: as is when
// plain, quoted otherwise.
func seg(key string) string {
	if plainSegRE().MatchString(key) {
		return key
	}
	return strconv.Quote(key)
}

var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`) })

// addYAMLError turns an error of the yaml package into problems with lines.
func addYAMLError(ps *problems, err error) {
	var lines []string
	if te, ok := errors.AsType[*yaml.TypeError](err); ok {
		lines = te.Errors
	} else {
		lines = []string{err.Error()}
	}
	for _, l := range lines {
		if m := yamlLineRE().FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			ps.addLine(max(n, 1), "", "%s", m[2])
			continue
		}
		// The yaml package leaves out "line 1" (its lines are 0-based internally).
		ps.addLine(1, "", "%s", strings.TrimPrefix(l, "yaml: "))
	}
}

// checkText finds bytes YAML does not allow, which the yaml package reports without
// a line: invalid UTF-8 and control characters other than tab, CR and LF. Lines
// are counted as YAML counts them.
func checkText(data []byte) (line int, msg string) {
	line = 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return line, "file is not valid utf-8"
		case isBreak(r):
			if r != '\r' || i+1 >= len(data) || data[i+1] != '\n' {
				line++ // CRLF counts once, at its LF
			}
		case r == '\t' || r == 0xFEFF:
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0xfffe || r == 0xffff:
			return line, fmt.Sprintf("control character %U is not allowed", r)
		}
		i += size
	}
	return 0, ""
}

// isBreak reports whether YAML counts r as a line break.
func isBreak(r rune) bool {
	return r == '\n' || r == '\r' || r == 0x85 || r == 0x2028 || r == 0x2029
}
