package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
	"github.com/moat-sandbox/moat/internal/session"
)

// instructions are sent to clients at initialization: how the tools fit together.
const instructions = `moat runs code in isolated sandboxes: no network unless the profile allows some, no access to the host's files, bounded CPU, memory, processes, disk and time. ` +
	`Use execute_python or execute_shell for self-contained code (a fresh sandbox each time; nothing is kept). ` +
	`For work in several steps — load data once, then explore it — use session_create, then session_execute as often as needed: variables and files persist in the session, like a notebook. ` +
	`Move files in and out of a session's /workspace with file_upload, file_list and file_download. Destroy sessions you are done with (session_destroy). ` +
	`A refused run names the policy rule that blocked it: rewrite the code without it; there is no way around the policy.`

// The tools' arguments. Their JSON schemas come from these types (jsonschema tags
// are the descriptions) and are then bounded per principal (inputSchema).
type (
	executePythonArgs struct {
		Code           string `json:"code" jsonschema:"the Python 3 program to run"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds (default: the server's)"`
		Profile        string `json:"profile,omitempty" jsonschema:"policy profile to run under (default: yours)"`
		Network        string `json:"network,omitempty" jsonschema:"narrow the profile's network: none, or allow:HOST[:PORT],... naming only destinations the profile allows (default: the profile's)"`
	}
	executeShellArgs struct {
		Command        string `json:"command" jsonschema:"the bash script to run (one or more lines)"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds (default: the server's)"`
		Profile        string `json:"profile,omitempty" jsonschema:"policy profile to run under (default: yours)"`
		Network        string `json:"network,omitempty" jsonschema:"narrow the profile's network: none, or allow:HOST[:PORT],... naming only destinations the profile allows (default: the profile's)"`
	}
	sessionCreateArgs struct {
		Language           string `json:"language,omitempty" jsonschema:"python (a persistent interpreter; the default) or bash (a persistent shell)"`
		TimeoutSeconds     int    `json:"timeout_seconds,omitempty" jsonschema:"default wall-clock limit of each call, in seconds"`
		IdleTimeoutSeconds int    `json:"idle_timeout_seconds,omitempty" jsonschema:"destroy the session after this many seconds without use (default and maximum: the server's)"`
		Profile            string `json:"profile,omitempty" jsonschema:"policy profile of the session (default: yours)"`
		Network            string `json:"network,omitempty" jsonschema:"narrow the profile's network: none, or allow:HOST[:PORT],... naming only destinations the profile allows (default: the profile's)"`
	}
	sessionExecuteArgs struct {
		SessionID      string `json:"session_id" jsonschema:"the id session_create returned"`
		Code           string `json:"code" jsonschema:"Python code for a python session, a bash script for a bash session"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit of this call in seconds (default: the session's)"`
	}
	sessionArgs struct {
		SessionID string `json:"session_id" jsonschema:"the id session_create returned"`
	}
	noArgs         struct{}
	fileUploadArgs struct {
		SessionID string `json:"session_id" jsonschema:"the id session_create returned"`
		Path      string `json:"path" jsonschema:"where to write the file, relative to /workspace (e.g. data.csv or in/data.csv)"`
		Content   string `json:"content" jsonschema:"the file's content: text, or base64 when encoding is base64"`
		Encoding  string `json:"encoding,omitempty" jsonschema:"text (the default) or base64 (for binary files)"`
	}
	fileDownloadArgs struct {
		SessionID string `json:"session_id" jsonschema:"the id session_create returned"`
		Path      string `json:"path" jsonschema:"the file to read, relative to /workspace"`
	}
	fileListArgs struct {
		SessionID string `json:"session_id" jsonschema:"the id session_create returned"`
		Dir       string `json:"dir,omitempty" jsonschema:"list only below this directory, relative to /workspace (default: all of it)"`
	}
)

// sessionID lets the error mapping name the session a call was about.
func (a executePythonArgs) sessionID() string  { return "" }
func (a executeShellArgs) sessionID() string   { return "" }
func (a sessionCreateArgs) sessionID() string  { return "" }
func (a sessionExecuteArgs) sessionID() string { return a.SessionID }
func (a sessionArgs) sessionID() string        { return a.SessionID }
func (a noArgs) sessionID() string             { return "" }
func (a fileUploadArgs) sessionID() string     { return a.SessionID }
func (a fileDownloadArgs) sessionID() string   { return a.SessionID }
func (a fileListArgs) sessionID() string       { return a.SessionID }

type args interface{ sessionID() string }

// handler is a tool's implementation: c is the calling client. An error becomes a
// tool result with isError set (message).
type handler[In args] func(ctx context.Context, c *client, in In) (*sdk.CallToolResult, error)

// addTool registers a tool on ms for principal p: it finds the calling client,
// maps errors and logs the call (never its arguments).
func addTool[In args](s *Server, ms *sdk.Server, p *gate.Principal, t *sdk.Tool, h handler[In]) {
	sdk.AddTool(ms, t, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, any, error) {
		start := time.Now()
		call := engine.Caller{Principal: p.Name, FrontEnd: audit.FrontEndMCP, RequestID: newRequestID()}
		if req.Extra != nil && req.Extra.Header != nil {
			call.Remote = req.Extra.Header.Get(remoteHeader)
		}
		ctx = context.WithValue(ctx, callerKey{}, call)
		c, err := s.client(req.Session, p)
		var res *sdk.CallToolResult
		if err == nil {
			res, err = h(ctx, c, in)
		}
		if err != nil {
			res = errorResult(s.log, t.Name, err, in.sessionID())
		}
		s.log.Info("mcp: tool call", "tool", t.Name, "principal", p.Name, "session_id", in.sessionID(),
			"is_error", res.IsError, "duration_ms", time.Since(start).Milliseconds(), "request_id", call.RequestID)
		return res, nil, nil
	})
}

type callerKey struct{}

// caller is who asks in a tool call's ctx (addTool), for the engine's audit records.
func caller(ctx context.Context) engine.Caller {
	c, _ := ctx.Value(callerKey{}).(engine.Caller)
	return c
}

// newRequestID names one tool call in the log and the audit trail.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Bounds of the arguments.
const (
	maxPathChars = 4096
	// maxTimeoutSeconds bounds timeout_seconds when the principal's cap is larger.
	maxTimeoutSeconds = 24 * 3600
)

var sessionIDPattern = `^[A-Za-z0-9_-]{1,128}$`

// addTools registers the tools for principal p: their descriptions and schemas
// state p's limits and profiles.
func (s *Server) addTools(ms *sdk.Server, p *gate.Principal) {
	capSecs := int(min(p.MaxLimits.Timeout/time.Second, maxTimeoutSeconds))
	limits := fmt.Sprintf("Limits: %s; %s of memory, %s of disk in /workspace, %d processes; a run may take at most %s (timeout_seconds), output beyond %s per stream is cut to its head and tail.",
		s.eng.NetworkSummary(p.Profile), size(p.MaxLimits.Memory), size(p.MaxLimits.Disk), p.MaxLimits.Pids, human(time.Duration(capSecs)*time.Second), size(p.MaxLimits.Output))
	profiles := fmt.Sprintf("Code runs under the policy profile %q", p.Profile)
	if len(p.Profiles) > 0 {
		profiles += fmt.Sprintf(" (or the one named in profile: %s)", strings.Join(p.Profiles, ", "))
	}
	profiles += ", which refuses some modules, calls and commands before anything runs; a refused run says what was blocked and why."
	closed := "when this MCP connection closes"
	if s.grace > 0 {
		closed = fmt.Sprintf("%s after this MCP connection closes (a client that reconnects within that time can go on using its session ids)", human(s.grace))
	}
	quota := p.Quotas.Sessions
	if quota <= 0 {
		quota = engine.DefaultMaxSessions
	}

	adjust := func(sc *jsonschema.Schema) {
		for name, prop := range sc.Properties {
			switch name {
			case "timeout_seconds", "idle_timeout_seconds":
				prop.Minimum = ptr(1.0)
				prop.Maximum = ptr(float64(capSecs))
				if name == "idle_timeout_seconds" {
					prop.Maximum = ptr(math.Floor(s.idleTTL.Seconds()))
				}
			case "code", "command":
				prop.MinLength, prop.MaxLength = ptr(1), ptr(box.MaxCodeBytes)
			case "session_id":
				prop.Pattern = sessionIDPattern
			case "path":
				prop.MinLength, prop.MaxLength = ptr(1), ptr(maxPathChars)
			case "dir":
				prop.MaxLength = ptr(maxPathChars)
			// No "default" keywords: the SDK (v1.8.0) panics applying a default to
			// "arguments": null. The descriptions say what an omitted value means.
			case "language":
				prop.Enum = []any{"python", "bash"}
			case "encoding":
				prop.Enum = []any{"text", "base64"}
			case "content":
				prop.MaxLength = ptr(int(base64.StdEncoding.EncodedLen(int(s.maxUpload))))
			case "profile":
				prop.Enum = []any{p.Profile}
				for _, name := range p.Profiles {
					prop.Enum = append(prop.Enum, name)
				}
			}
		}
		if len(p.Profiles) == 0 {
			removeProperty(sc, "profile")
		}
	}
	readOnly := &sdk.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)}
	runs := &sdk.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(false)}

	addTool(s, ms, p, &sdk.Tool{
		Name:  "execute_python",
		Title: "Run Python in a fresh sandbox",
		Description: "Run a Python 3 program in a fresh, isolated sandbox and return its output. Nothing is kept: the sandbox, its variables and its files are destroyed when the program ends, so for work in several steps use session_create and session_execute, and to get files back use a session and file_download. " +
			"Returns stdout, stderr, the value of a trailing expression (as a notebook shows it) and matplotlib figures as PNG images. The working directory is /workspace; /tmp is writable too; numpy, pandas and matplotlib can be imported when the host has them. " +
			profiles + " " + limits,
		InputSchema: inputSchema[executePythonArgs](adjust),
		Annotations: runs,
	}, func(ctx context.Context, c *client, in executePythonArgs) (*sdk.CallToolResult, error) {
		return s.execute(ctx, c, "python", in.Code, in.TimeoutSeconds, in.Profile, in.Network)
	})

	addTool(s, ms, p, &sdk.Tool{
		Name:  "execute_shell",
		Title: "Run a bash script in a fresh sandbox",
		Description: "Run a bash script in a fresh, isolated sandbox and return its stdout, stderr and exit code. Nothing is kept: the sandbox and its files are destroyed when the script ends; for work in several steps use session_create with language bash. " +
			"The working directory is /workspace; the usual command-line tools of the host are there. Every command, in pipelines, substitutions and functions too, is checked before anything runs. " +
			profiles + " " + limits,
		InputSchema: inputSchema[executeShellArgs](adjust),
		Annotations: runs,
	}, func(ctx context.Context, c *client, in executeShellArgs) (*sdk.CallToolResult, error) {
		return s.execute(ctx, c, "bash", in.Command, in.TimeoutSeconds, in.Profile, in.Network)
	})

	addTool(s, ms, p, &sdk.Tool{
		Name:  "session_create",
		Title: "Start a persistent sandbox session",
		Description: "Start a sandbox session that keeps its state between calls, and return its session_id. In a python session, variables, imports, functions and loaded data persist across session_execute calls, as in a notebook; in a bash session the working directory, variables and functions persist. Files in /workspace persist in both: put them there with file_upload, get them back with file_download. " +
			fmt.Sprintf("A session ends with session_destroy, after %s without use (idle_timeout_seconds may shorten it), %s after it was created, or %s; its state is then gone. ", human(s.idleTTL), human(s.maxLifetime), closed) +
			fmt.Sprintf("You may hold at most %d sessions at once: destroy those you are done with. ", quota) +
			profiles + " " + limits,
		InputSchema: inputSchema[sessionCreateArgs](adjust),
		Annotations: runs,
	}, s.sessionCreate)

	addTool(s, ms, p, &sdk.Tool{
		Name:  "session_execute",
		Title: "Run code in a session",
		Description: "Run code in a session started by session_create: Python code in a python session, a bash script in a bash session. What earlier calls defined is still there. " +
			"Returns stdout, stderr, the value of a trailing expression (its repr, as a notebook shows it: end with df.head() to see a table) and matplotlib figures as PNG images. " +
			"A call that runs past its timeout is interrupted (KeyboardInterrupt, or SIGINT for bash) and the session lives on with its state; a session runs one call at a time.",
		InputSchema: inputSchema[sessionExecuteArgs](adjust),
		Annotations: runs,
	}, s.sessionExecute)

	addTool(s, ms, p, &sdk.Tool{
		Name:        "session_destroy",
		Title:       "Destroy a session",
		Description: "Destroy a session and its sandbox: its variables and files are gone for good. Download the files you need first (file_download).",
		InputSchema: inputSchema[sessionArgs](adjust),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.sessionDestroy)

	addTool(s, ms, p, &sdk.Tool{
		Name:        "session_list",
		Title:       "List your sessions",
		Description: "List this connection's live sessions: id, language, profile, state (idle or busy), number of calls and when each expires if left idle.",
		InputSchema: inputSchema[noArgs](adjust),
		Annotations: readOnly,
	}, s.sessionList)

	addTool(s, ms, p, &sdk.Tool{
		Name:  "file_upload",
		Title: "Write a file into a session",
		Description: "Write a file into a session's workspace, /workspace, the code's working directory: the session's code then opens it by its relative path (open('data.csv'), pd.read_csv('data.csv'), cat data.csv). " +
			fmt.Sprintf("content is the file's text (encoding text, the default) or its bytes in base64 (encoding base64, for binary files); at most %s. An existing file is replaced; missing parent directories are created.", size(s.maxUpload)),
		InputSchema: inputSchema[fileUploadArgs](adjust),
		Annotations: &sdk.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, s.fileUpload)

	addTool(s, ms, p, &sdk.Tool{
		Name:  "file_download",
		Title: "Read a file from a session",
		Description: "Read a file from a session's workspace (/workspace). " +
			fmt.Sprintf("A text file of up to %s comes back as text, an image (PNG, JPEG, GIF, WebP) of up to %s as an image, another file of up to %s as an embedded resource (base64). ", size(MaxInlineText), size(MaxInlineImage), size(MaxInlineBlob)) +
			"A larger file comes back as a resource link with its size (and the start of it, if it is text): to look inside, use session_execute (head, wc, grep, pandas...) rather than downloading it.",
		InputSchema: inputSchema[fileDownloadArgs](adjust),
		Annotations: readOnly,
	}, s.fileDownload)

	addTool(s, ms, p, &sdk.Tool{
		Name:        "file_list",
		Title:       "List a session's files",
		Description: "List the files in a session's workspace (/workspace), recursively, with their sizes; dir limits the listing to one directory.",
		InputSchema: inputSchema[fileListArgs](adjust),
		Annotations: readOnly,
	}, s.fileList)
}

// inputSchema derives T's JSON schema and lets adjust bound it.
func inputSchema[T any](adjust func(*jsonschema.Schema)) *jsonschema.Schema {
	sc, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: the schema of %T: %v", *new(T), err)) // a bug in the types above
	}
	adjust(sc)
	return sc
}

func removeProperty(sc *jsonschema.Schema, name string) {
	delete(sc.Properties, name)
	sc.PropertyOrder = slices.DeleteFunc(sc.PropertyOrder, func(n string) bool { return n == name })
	sc.Required = slices.DeleteFunc(sc.Required, func(n string) bool { return n == name })
}

func ptr[T any](v T) *T { return &v }

// timeout turns timeout_seconds into a duration and checks it against the
// principal's cap.
func timeout(p *gate.Principal, seconds int) (time.Duration, error) {
	if seconds < 0 {
		return 0, errorf("timeout_seconds must be positive")
	}
	d := time.Duration(seconds) * time.Second
	if err := p.CheckLimits(box.Limits{Timeout: d}); err != nil {
		return 0, err
	}
	return d, nil
}

// begin takes an execution slot of the principal's quotas (none on stdio).
func (s *Server) begin(p *gate.Principal) (func(), error) {
	if s.gate == nil {
		return func() {}, nil
	}
	return s.gate.Begin(p)
}

// execute runs one-shot code in a fresh box.
func (s *Server) execute(ctx context.Context, c *client, lang, code string, seconds int, profile, network string) (*sdk.CallToolResult, error) {
	prof, err := c.p.PickProfile(profile)
	if err != nil {
		return nil, err
	}
	d, err := timeout(c.p, seconds)
	if err != nil {
		return nil, err
	}
	release, err := s.begin(c.p)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := s.eng.Execute(ctx, &engine.Request{Language: lang, Code: []byte(code), Profile: prof, Limits: box.Limits{Timeout: d}, Network: network, Caller: caller(ctx)})
	if err != nil {
		return nil, err
	}
	return resultContent(res, &c.out, false), nil
}

func (s *Server) sessionCreate(ctx context.Context, c *client, in sessionCreateArgs) (*sdk.CallToolResult, error) {
	lang := in.Language
	if lang == "" {
		lang = "python"
	}
	prof, err := c.p.PickProfile(in.Profile)
	if err != nil {
		return nil, err
	}
	d, err := timeout(c.p, in.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	if in.IdleTimeoutSeconds < 0 {
		return nil, errorf("idle_timeout_seconds must be positive")
	}
	max, unlock, err := s.sessionSlots(c)
	if err != nil {
		return nil, err
	}
	defer unlock()
	release, err := s.begin(c.p)
	if err != nil {
		return nil, err
	}
	defer release()
	info, err := s.eng.CreateSession(ctx, &engine.SessionRequest{
		Owner: c.owner, Language: lang, Profile: prof, Limits: box.Limits{Timeout: d}, Network: in.Network,
		IdleTTL: time.Duration(in.IdleTimeoutSeconds) * time.Second, MaxSessions: max, Caller: caller(ctx),
	})
	if err != nil {
		return nil, err
	}
	if !s.track(c, info.ID, c.owner) {
		return nil, errNoSession
	}
	var what string
	if lang == "python" {
		what = "Variables, imports and functions persist across session_execute calls; a trailing expression's value is returned."
	} else {
		what = "The working directory, variables and functions persist across session_execute calls."
	}
	text := fmt.Sprintf("Started %s session %s (profile %s). %s Files in /workspace persist; move them with file_upload and file_download. It expires at %s if left idle; destroy it with session_destroy when done.",
		lang, info.ID, info.Profile, what, info.ExpiresAt.UTC().Format(time.RFC3339))
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: info}, nil
}

func (s *Server) sessionExecute(ctx context.Context, c *client, in sessionExecuteArgs) (*sdk.CallToolResult, error) {
	owner, err := s.owned(c, in.SessionID)
	if err != nil {
		return nil, err
	}
	d, err := timeout(c.p, in.TimeoutSeconds)
	if err != nil {
		return nil, err
	}
	release, err := s.begin(c.p)
	if err != nil {
		return nil, err
	}
	defer release()
	res, err := s.eng.SessionExecute(ctx, owner, in.SessionID, &engine.CallRequest{Code: []byte(in.Code), Timeout: d, Caller: caller(ctx)})
	if err != nil {
		return nil, err
	}
	return resultContent(res, &c.out, true), nil
}

func (s *Server) sessionDestroy(ctx context.Context, c *client, in sessionArgs) (*sdk.CallToolResult, error) {
	owner, err := s.owned(c, in.SessionID)
	if err != nil {
		return nil, err
	}
	err = s.eng.DeleteSessionAs(caller(ctx), owner, in.SessionID)
	if err != nil && !errors.Is(err, session.ErrNotFound) {
		return nil, err
	}
	s.forget(c, in.SessionID)
	return text("Destroyed session %s: its sandbox, variables and files are gone.", in.SessionID), nil
}

func (s *Server) sessionList(_ context.Context, c *client, _ noArgs) (*sdk.CallToolResult, error) {
	list := []engine.SessionInfo{}
	var lost []string
	for id, owner := range s.sessionsOf(c) {
		info, err := s.eng.Session(owner, id)
		var le *session.LostError
		switch {
		case err == nil:
			list = append(list, info)
		case errors.As(err, &le):
			lost = append(lost, fmt.Sprintf("%s: lost (%s)", id, le.Reason))
		case errors.Is(err, session.ErrNotFound):
			s.forget(c, id)
		default:
			return nil, err
		}
	}
	slices.SortFunc(list, func(a, b engine.SessionInfo) int { return a.CreatedAt.Compare(b.CreatedAt) })
	slices.Sort(lost)
	var b strings.Builder
	if len(list) == 0 {
		b.WriteString("No live sessions. Start one with session_create.")
	}
	now := time.Now()
	for _, in := range list {
		fmt.Fprintf(&b, "%s  %s  profile %s  %s  %d calls  expires in %s if idle\n",
			in.ID, in.Language, in.Profile, in.State, in.Calls, human(in.ExpiresAt.Sub(now).Round(time.Second)))
	}
	for _, l := range lost {
		b.WriteString("\n" + l)
	}
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: strings.TrimSpace(b.String())}},
		StructuredContent: map[string]any{"sessions": list},
	}, nil
}

func (s *Server) fileUpload(ctx context.Context, c *client, in fileUploadArgs) (*sdk.CallToolResult, error) {
	owner, err := s.owned(c, in.SessionID)
	if err != nil {
		return nil, err
	}
	p, err := workspacePath("path", in.Path)
	if err != nil {
		return nil, err
	}
	var data []byte
	switch in.Encoding {
	case "", "text":
		data = []byte(in.Content)
	case "base64":
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			if data, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(in.Content, "=")); err != nil {
				return nil, errorf("content is not valid base64 (standard alphabet); with encoding text, give the text itself")
			}
		}
	default:
		return nil, errorf("encoding must be text or base64, not %q", in.Encoding)
	}
	if int64(len(data)) > s.maxUpload {
		return nil, errorf("the file is %s, over the upload limit of %s; create large data inside the session instead", size(int64(len(data))), size(s.maxUpload))
	}
	if err := s.eng.PutFile(ctx, owner, in.SessionID, p, bytes.NewReader(data), int64(len(data))); err != nil {
		return nil, err
	}
	return text("Wrote %s (%d bytes) to /workspace/%s in session %s; the session's code opens it as %q.", p, len(data), p, in.SessionID, p), nil
}

func (s *Server) fileDownload(ctx context.Context, c *client, in fileDownloadArgs) (*sdk.CallToolResult, error) {
	owner, err := s.owned(c, in.SessionID)
	if err != nil {
		return nil, err
	}
	p, err := workspacePath("path", in.Path)
	if err != nil {
		return nil, err
	}
	buf := &capWriter{max: MaxInlineImage}
	n, err := s.eng.GetFile(ctx, owner, in.SessionID, p, buf)
	if err != nil && !errors.Is(err, errCapped) {
		return nil, err
	}
	return fileContent(in.SessionID, p, buf.b.Bytes(), n), nil
}

// fileContent is what file_download returns for a file of n bytes whose first
// bytes are data (all of it when n == len(data)).
func fileContent(id, p string, data []byte, n int64) *sdk.CallToolResult {
	uri := fileURI(id, p)
	whole := int64(len(data)) == n
	mime := http.DetectContentType(data)
	prefix := data
	if !whole {
		prefix = trimPartialRune(data)
	}
	isText := utf8.Valid(prefix) && bytes.IndexByte(prefix, 0) < 0
	switch {
	case whole && isText && n <= MaxInlineText:
		return text("[file %s, %d bytes]\n%s", p, n, data)
	case whole && strings.HasPrefix(mime, "image/") && inlineImage(mime):
		return &sdk.CallToolResult{Content: []sdk.Content{
			&sdk.TextContent{Text: fmt.Sprintf("[file %s, %d bytes, %s]", p, n, mime)},
			&sdk.ImageContent{MIMEType: mime, Data: data},
		}}
	case whole && !isText && n <= MaxInlineBlob:
		return &sdk.CallToolResult{Content: []sdk.Content{
			&sdk.TextContent{Text: fmt.Sprintf("[file %s, %d bytes, %s: embedded as a resource, base64]", p, n, mime)},
			&sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: uri, MIMEType: mime, Blob: data}},
		}}
	}
	var b strings.Builder
	if isText {
		mime = "text/plain; charset=utf-8"
		head := trimPartialRune(data[:min(len(data), 4096)])
		fmt.Fprintf(&b, "[file %s, %s, text: too large to return whole; its start follows]\n%s\n[...]\n", p, size(n), head)
	} else {
		fmt.Fprintf(&b, "[file %s, %s, %s: too large to return whole]\n", p, size(n), mime)
	}
	fmt.Fprintf(&b, "The agent host can read the whole file as the resource %s (up to %s). To look inside it yourself, use session_execute (head, tail, wc, grep, pandas...) in session %s.", uri, size(MaxResource), id)
	return &sdk.CallToolResult{Content: []sdk.Content{
		&sdk.TextContent{Text: b.String()},
		&sdk.ResourceLink{URI: uri, Name: p, MIMEType: mime, Size: &n},
	}}
}

// inlineImage reports whether an image of type mime is returned as image content.
func inlineImage(mime string) bool {
	switch mime {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return true
	}
	return false
}

// trimPartialRune drops an incomplete UTF-8 sequence cut off at the end of b.
func trimPartialRune(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if r, n := utf8.DecodeLastRune(b); r != utf8.RuneError || n != 1 {
			return b
		}
		b = b[:len(b)-1]
	}
	return b
}

func (s *Server) fileList(ctx context.Context, c *client, in fileListArgs) (*sdk.CallToolResult, error) {
	owner, err := s.owned(c, in.SessionID)
	if err != nil {
		return nil, err
	}
	dir := ""
	if d := strings.TrimSuffix(in.Dir, "/"); d != "" && d != "." && d != box.WorkspaceDir {
		if dir, err = workspacePath("dir", d); err != nil {
			return nil, err
		}
	}
	files, err := s.eng.ListFiles(ctx, owner, in.SessionID, dir)
	cut := errors.Is(err, box.ErrListTruncated)
	if err != nil && !cut {
		return nil, err
	}
	const maxLines = 500
	var b strings.Builder
	if len(files) == 0 {
		b.WriteString("The workspace is empty")
		if dir != "" {
			b.WriteString(" below " + dir)
		}
		b.WriteString(".")
	}
	for i, f := range files {
		if i == maxLines {
			fmt.Fprintf(&b, "[... %d more entries; give dir to list a part]\n", len(files)-maxLines)
			break
		}
		if f.Dir {
			fmt.Fprintf(&b, "%s/\n", f.Path)
		} else {
			fmt.Fprintf(&b, "%s  %d bytes\n", f.Path, f.Size)
		}
	}
	if cut {
		fmt.Fprintf(&b, "[the listing was cut after %d entries; give dir to list a directory below]\n", len(files))
	}
	if files == nil {
		files = []box.FileInfo{}
	}
	return &sdk.CallToolResult{
		Content:           []sdk.Content{&sdk.TextContent{Text: strings.TrimSpace(b.String())}},
		StructuredContent: map[string]any{"files": files, "truncated": cut},
	}, nil
}

// workspacePath checks a path a model gave and returns it relative to /workspace
// (absolute paths under /workspace are accepted). It is an early, clear refusal: the
// box resolves the path again, inside the workspace, and no path is ever followed
// on the host.
func workspacePath(field, p string) (string, error) {
	if strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", errorf("%s: the path contains a control character", field)
	}
	rel, err := box.CleanDest(p)
	if err != nil {
		return "", errorf("%s: %v; give a path relative to /workspace", field, err)
	}
	return rel, nil
}

// errCapped stops a download at the bytes it can use.
var errCapped = errors.New("mcp: more than the bytes wanted")

// capWriter keeps the first max bytes written to it; past them it fails, and the
// box reads the rest of the file out without sending it anywhere.
type capWriter struct {
	b   bytes.Buffer
	max int
}

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.max - w.b.Len()
	if len(p) > room {
		w.b.Write(p[:max(room, 0)])
		return max(room, 0), errCapped
	}
	return w.b.Write(p)
}

func text(format string, args ...any) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// human spells a duration for a model: "30 s", "10 min", "1 h 30 min".
func human(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 s"
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	case d < time.Hour:
		if d%time.Minute == 0 {
			return fmt.Sprintf("%d min", int(d/time.Minute))
		}
		return fmt.Sprintf("%d min %d s", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	if m == 0 {
		return fmt.Sprintf("%d h", h)
	}
	return fmt.Sprintf("%d h %d min", h, m)
}

// size spells a byte count: "256 MiB", "1.5 KiB", "29 bytes".
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return trimZero(float64(n)/(1<<30)) + " GiB"
	case n >= 1<<20:
		return trimZero(float64(n)/(1<<20)) + " MiB"
	case n >= 1<<10:
		return trimZero(float64(n)/(1<<10)) + " KiB"
	}
	return fmt.Sprintf("%d bytes", n)
}

func trimZero(f float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", f), "0"), ".")
}
