package api

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/engine"
)

// ExecuteRequest is the body of POST /v1/execute: one execution in a fresh box.
type ExecuteRequest struct {
	// Language is "python" or "bash".
	Language string `json:"language"`
	Code     string `json:"code"`
	// Profile names the policy profile; empty means the principal's default.
	Profile string `json:"profile,omitempty"`
	// Timeout is the wall-clock limit ("30s"), the same as Limits.Timeout; give one
	// or the other.
	Timeout string  `json:"timeout,omitempty"`
	Limits  *Limits `json:"limits,omitempty"`
	// Env adds variables to the code's environment.
	Env map[string]string `json:"env,omitempty"`
	// Files are placed in the workspace before the code starts.
	Files []InputFile `json:"files,omitempty"`
	// OutputFiles name workspace files to return in the result's "files".
	OutputFiles []string `json:"output_files,omitempty"`
	// Network narrows the profile's network: "none" or "allow:HOST[:PORT],...",
	// each destination one the profile allows; "open" where the profile is open.
	// Empty means the profile's.
	Network string `json:"network,omitempty"`
}

// InputFile is a file to place in the workspace.
type InputFile struct {
	// Path is relative to the workspace (or absolute under /workspace).
	Path string `json:"path"`
	// Content is the file's bytes, base64 encoded (standard alphabet, padded).
	Content string `json:"content"`
}

// Limits are the limits a request asks for; every field is optional and an absent
// one takes the profile's and the server's value. Sizes are strings such as "256MiB",
// durations strings such as "30s".
type Limits struct {
	Timeout     string   `json:"timeout,omitempty"`
	Memory      string   `json:"memory,omitempty"`
	CPUs        *float64 `json:"cpus,omitempty"`
	Pids        *int64   `json:"pids,omitempty"`
	Disk        string   `json:"disk,omitempty"`
	Tmp         string   `json:"tmp,omitempty"`
	OutputLimit string   `json:"output_limit,omitempty"`
}

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	Language string `json:"language"`
	Profile  string `json:"profile,omitempty"`
	// Limits bound the session's box; limits.timeout is the default per-call timeout.
	Limits *Limits           `json:"limits,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	// Network narrows the profile's network, as ExecuteRequest.Network.
	Network string `json:"network,omitempty"`
	// IdleTTL and MaxLifetime ("10m", "1h") shorten the server's defaults.
	IdleTTL     string `json:"idle_ttl,omitempty"`
	MaxLifetime string `json:"max_lifetime,omitempty"`
}

// CallRequest is the body of POST /v1/sessions/{id}/execute.
type CallRequest struct {
	Code string `json:"code"`
	// Timeout bounds this call ("30s"); empty means the session's default.
	Timeout string `json:"timeout,omitempty"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []engine.SessionInfo `json:"sessions"`
}

// FileList is the body of GET /v1/sessions/{id}/files.
type FileList struct {
	Files []box.FileInfo `json:"files"`
	// Truncated: the listing was cut (box.MaxListEntries, box.MaxListBytes); list a
	// directory below (?dir=) for the rest.
	Truncated bool `json:"truncated,omitempty"`
}

// PutFileResponse is the body of a 201 answer to PUT /v1/sessions/{id}/files/{path}.
type PutFileResponse struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

// Health is the body of GET /healthz.
type Health struct {
	Status string `json:"status"`
}

// decodeJSON reads r's body, at most max bytes, as exactly one JSON object into dst:
// unknown fields, trailing data and other content types are errors.
func decodeJSON(w http.ResponseWriter, r *http.Request, max int64, dst any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errorf(CodeUnsupportedMedia, "content type %q is not supported; send application/json", ct)
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return jsonError(err)
		}
		return badRequest("request body has data after the JSON object")
	}
	return nil
}

// jsonError explains a decoding error, naming the field where it can.
func jsonError(err error) error {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return errorf(CodeTooLarge, "request body is over the limit of %d bytes", mbe.Limit)
	case errors.Is(err, io.EOF):
		return badRequest("request body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &se):
		return badRequest("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te):
		if te.Field == "" {
			return badRequest("the body must be a JSON object, not %s", te.Value)
		}
		return badRequest("field %s: want %s, got %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return badRequest("unknown field %s", f)
	}
	return badRequest("malformed JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names a Go kind as a JSON type.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "float64", "float32", "int", "int64", "int32", "uint", "uint64":
		return "a number"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "map", "struct", "ptr":
		return "an object"
	}
	return k
}

// resolve checks l and returns it as box limits; prefix names l's field in messages.
func (l *Limits) resolve(prefix string) (box.Limits, error) {
	var out box.Limits
	if l == nil {
		return out, nil
	}
	var err error
	if l.Timeout != "" {
		if out.Timeout, err = config.ParseDuration(l.Timeout); err != nil {
			return out, badRequest("%stimeout: %v", prefix, err)
		}
	}
	for _, s := range []struct {
		name, val string
		dst       *int64
	}{
		{"memory", l.Memory, &out.Memory}, {"disk", l.Disk, &out.Disk},
		{"tmp", l.Tmp, &out.Tmp}, {"output_limit", l.OutputLimit, &out.Output},
	} {
		if s.val == "" {
			continue
		}
		if *s.dst, err = config.ParseSize(s.val); err != nil {
			return out, badRequest("%s%s: %v", prefix, s.name, err)
		}
	}
	if out.Memory != 0 && out.Memory < config.MinMemory {
		return out, badRequest("%smemory: %s is below the minimum of 16MiB", prefix, l.Memory)
	}
	if l.CPUs != nil {
		c := *l.CPUs
		if math.IsNaN(c) || c < config.MinCPUs || c > config.MaxCPUs {
			return out, badRequest("%scpus: invalid value %v (want a number of cores from 0.01 to 1024)", prefix, c)
		}
		out.CPUs = c
	}
	if l.Pids != nil {
		p := *l.Pids
		if p < 1 || p > config.MaxPids {
			return out, badRequest("%spids: invalid value %d (want a whole number from 1 to %d)", prefix, p, config.MaxPids)
		}
		out.Pids = p
	}
	return out, nil
}

// envList checks env and returns it as KEY=VALUE pairs sorted by name.
func envList(env map[string]string) ([]string, error) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		kv := k + "=" + env[k]
		if err := box.CheckEnv(kv); err != nil {
			return nil, badRequest("env: %v", err)
		}
		out = append(out, kv)
	}
	return out, nil
}

// checkCode validates the code of a request.
func checkCode(code string) error {
	if code == "" {
		return badRequest("code: missing; give the program text")
	}
	if err := box.CheckCode([]byte(code)); err != nil {
		if len(code) > box.MaxCodeBytes {
			return errorf(CodeTooLarge, "code: %v", err)
		}
		return badRequest("code: %v", err)
	}
	return nil
}

// checkLanguage validates a request's language.
func checkLanguage(name string) error {
	if name == "" {
		return badRequest("language: missing; want %s", box.LanguageNames())
	}
	if _, err := box.LookupLanguage(name); err != nil {
		return badRequest("language: %v", err)
	}
	return nil
}

// parseDuration parses an optional duration field.
func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := config.ParseDuration(s)
	if err != nil {
		return 0, badRequest("%s: %v", field, err)
	}
	return d, nil
}

// MaxPathBytes bounds a workspace path.
const MaxPathBytes = 4096

// cleanPath checks a workspace path chosen by a caller and returns it relative to the
// workspace. It refuses, with bad_path, what can only be a mistake or an attack:
// empty, NUL and other control characters, backslashes, invalid UTF-8, "." or ".."
// segments, empty segments ("a//b", "a/"), and absolute paths outside /workspace.
//
// This is an early, clear refusal, not the guard: the box resolves every path again
// inside the workspace (box.ErrBadPath), symlinks included, and no path is ever
// followed on the host.
func cleanPath(field, p string) (string, error) {
	bad := func(why string) error {
		return errorf(CodeBadPath, "%s: %s", field, why)
	}
	switch {
	case p == "":
		return "", bad("path is empty")
	case len(p) > MaxPathBytes:
		return "", bad(fmt.Sprintf("path is longer than %d bytes", MaxPathBytes))
	case !utf8.ValidString(p):
		return "", bad("path is not valid UTF-8")
	case strings.ContainsRune(p, '\\'):
		return "", bad("path contains a backslash; separate directories with /")
	}
	for _, c := range p {
		if c < 0x20 || c == 0x7f {
			return "", bad(fmt.Sprintf("path contains the control character %U", c))
		}
	}
	if strings.HasPrefix(p, "/") {
		rest, ok := strings.CutPrefix(p, box.WorkspaceDir+"/")
		if !ok {
			return "", bad("absolute paths must be under " + box.WorkspaceDir + "; give a path relative to the workspace")
		}
		p = rest
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			return "", bad("path has an empty segment (// or a trailing /)")
		case ".", "..":
			return "", bad(fmt.Sprintf("path has a %q segment; give a plain path inside the workspace", seg))
		}
	}
	return p, nil
}

// decodeBase64 decodes a file's content.
func decodeBase64(field, s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, badRequest("%s: not valid base64 (standard alphabet, padded): %v", field, err)
	}
	return b, nil
}
