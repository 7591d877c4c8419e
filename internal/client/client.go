// Package client is a Go client of moat's HTTP API (package api), used by the CLI's
// server commands and by the tests.
//
//	c := client.New("http://127.0.0.1:7420", token)
//	s, err := c.CreateSession(ctx, &api.SessionRequest{Language: "python"})
//	res, err := c.SessionExecute(ctx, s.ID, &api.CallRequest{Code: "1 + 1"}, nil)
//
// Errors the server answers are *Error (use errors.As); a server that cannot be
// reached is an error that says so, naming the URL.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
)

// Client calls one moat server. It is safe for concurrent use.
type Client struct {
	base  string // without a trailing slash
	token string
	hc    *http.Client
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc (default:
// http.DefaultClient). The Client sets no timeout of its own: executions last as
// long as their limits allow; bound a call with its context.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client of the server at baseURL ("http://127.0.0.1:7420") that
// authenticates with token.
func New(baseURL, token string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: http.DefaultClient}
	for _, o := range opts {
		o(c)
	}
	return c
}

// BaseURL returns the server's URL as given to New, without a trailing slash.
func (c *Client) BaseURL() string { return c.base }

// Token returns the token a client on this host sends: $MOAT_TOKEN if set, else the
// token that moat serve generated in dataDir.
func Token(dataDir string) (string, error) { return gate.ReadToken(dataDir, nil) }

// Error is an error answered by the server.
type Error struct {
	// Status is the HTTP status, e.g. 404.
	Status int
	// Code is the API's error code, e.g. "not_found" (see package api).
	Code    string
	Message string
	// RetryAfter is the server's Retry-After (429), zero when absent.
	RetryAfter time.Duration
	// RequestID identifies the request in the server's log.
	RequestID string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// UnreachableError means no answer came from the server: it is down, the address
// is wrong, or the connection broke.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach moat server at %s: %v", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Streams receive an execution's output as the server streams it. A nil Streams, or
// one with both writers nil, asks for the result only.
type Streams struct {
	Stdout, Stderr io.Writer
}

// Health checks that the server is up.
func (c *Client) Health(ctx context.Context) error {
	var h api.Health
	if err := c.do(ctx, "GET", "/healthz", nil, &h); err != nil {
		return err
	}
	if h.Status != "ok" {
		return fmt.Errorf("moat server at %s is not healthy: %q", c.base, h.Status)
	}
	return nil
}

// Execute runs code once in a fresh box.
func (c *Client) Execute(ctx context.Context, req *api.ExecuteRequest, out *Streams) (*box.Result, error) {
	return c.execute(ctx, "/v1/execute", req, out)
}

// CreateSession starts a session.
func (c *Client) CreateSession(ctx context.Context, req *api.SessionRequest) (engine.SessionInfo, error) {
	var info engine.SessionInfo
	err := c.do(ctx, "POST", "/v1/sessions", req, &info)
	return info, err
}

// ListSessions lists the caller's sessions.
func (c *Client) ListSessions(ctx context.Context) ([]engine.SessionInfo, error) {
	var l api.SessionList
	err := c.do(ctx, "GET", "/v1/sessions", nil, &l)
	return l.Sessions, err
}

// GetSession describes one session.
func (c *Client) GetSession(ctx context.Context, id string) (engine.SessionInfo, error) {
	var info engine.SessionInfo
	err := c.do(ctx, "GET", "/v1/sessions/"+url.PathEscape(id), nil, &info)
	return info, err
}

// DeleteSession destroys a session.
func (c *Client) DeleteSession(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/sessions/"+url.PathEscape(id), nil, nil)
}

// SessionExecute runs one call in a session.
func (c *Client) SessionExecute(ctx context.Context, id string, req *api.CallRequest, out *Streams) (*box.Result, error) {
	return c.execute(ctx, "/v1/sessions/"+url.PathEscape(id)+"/execute", req, out)
}

// PutFile uploads size bytes from r to path in the session's workspace; a negative
// size sends the body chunked, of unknown length.
func (c *Client) PutFile(ctx context.Context, id, path string, r io.Reader, size int64) (api.PutFileResponse, error) {
	var out api.PutFileResponse
	req, err := c.newRequest(ctx, "PUT", filesPath(id, path), r)
	if err != nil {
		return out, err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	if size < 0 {
		req.ContentLength = -1
	}
	resp, err := c.send(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	return out, decodeResponse(resp, &out)
}

// GetFile downloads the file at path in the session's workspace to w and returns its
// size.
func (c *Client) GetFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	req, err := c.newRequest(ctx, "GET", filesPath(id, path), nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.send(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, responseError(resp)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("download %s: %w", path, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("download %s: got %d of %d bytes", path, n, resp.ContentLength)
	}
	return n, nil
}

// ListFiles lists the session's workspace below dir ("" for all of it). A listing
// the server cut (api.FileList.Truncated) comes with box.ErrListTruncated.
func (c *Client) ListFiles(ctx context.Context, id, dir string) ([]box.FileInfo, error) {
	p := "/v1/sessions/" + url.PathEscape(id) + "/files"
	if dir != "" {
		p += "?dir=" + url.QueryEscape(dir)
	}
	var l api.FileList
	if err := c.do(ctx, "GET", p, nil, &l); err != nil {
		return nil, err
	}
	if l.Truncated {
		return l.Files, box.ErrListTruncated
	}
	return l.Files, nil
}

// RemoveFile removes a file or an empty directory from the session's workspace.
func (c *Client) RemoveFile(ctx context.Context, id, path string) error {
	return c.do(ctx, "DELETE", filesPath(id, path), nil, nil)
}

// filesPath is the URL path of a workspace file: each segment escaped, the slashes
// kept.
func filesPath(id, path string) string {
	segs := strings.Split(path, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/v1/sessions/" + url.PathEscape(id) + "/files/" + strings.Join(segs, "/")
}

// do sends a JSON request (in may be nil) and decodes a JSON answer into out (nil:
// none expected).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return decodeResponse(resp, out)
}

func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("moat server URL %q: %w", c.base, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", "moat-client")
	return req, nil
}

// send sends req; a failure to get any answer names the server.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &UnreachableError{URL: c.base, Err: err}
	}
	return resp, nil
}

// decodeResponse turns a 2xx answer into out and anything else into an *Error.
func decodeResponse(resp *http.Response, out any) error {
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return responseError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("moat server answered %s with an unreadable body: %w", resp.Status, err)
	}
	return nil
}

// maxErrorBody bounds the body of an error answer that the client reads.
const maxErrorBody = 1 << 20

// responseError reads an error answer.
func responseError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			e.RetryAfter = time.Duration(n) * time.Second
		}
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body struct {
		Error struct {
			Code, Message, RequestID string
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e
	}
	// Not moat's answer (a proxy's, perhaps): keep its first line.
	e.Code = "http_" + strconv.Itoa(resp.StatusCode)
	e.Message = strings.TrimSpace(firstLine(string(b)))
	if e.Message == "" {
		e.Message = resp.Status
	}
	return e
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 200 {
		l = l[:200]
	}
	return l
}

// execute posts an execution and returns its result; with out, it asks for an event
// stream and writes the output to out as it comes.
func (c *Client) execute(ctx context.Context, path string, in any, out *Streams) (*box.Result, error) {
	if out == nil || (out.Stdout == nil && out.Stderr == nil) {
		var res box.Result
		if err := c.do(ctx, "POST", path, in, &res); err != nil {
			return nil, err
		}
		return &res, nil
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	req, err := c.newRequest(ctx, "POST", path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, responseError(resp)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		// A server that does not stream answers with the plain result.
		var res box.Result
		if err := decodeResponse(resp, &res); err != nil {
			return nil, err
		}
		return &res, nil
	}
	return readEvents(resp, out)
}

// readEvents reads an execution's event stream up to its result or error event.
func readEvents(resp *http.Response, out *Streams) (*box.Result, error) {
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	var event string
	var data strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("event stream ended before the result: %w", err)
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case line == "":
			if event == "" && data.Len() == 0 {
				continue
			}
			res, done, err := dispatch(resp, event, data.String(), out)
			if done {
				return res, err
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, ":"):
			// a comment: the heartbeat
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				event = value
			case "data":
				if data.Len() > 0 {
					data.WriteByte('\n')
				}
				data.WriteString(value)
			}
		}
	}
}

// dispatch handles one event; done says the stream's outcome is known.
func dispatch(resp *http.Response, event, data string, out *Streams) (res *box.Result, done bool, err error) {
	switch event {
	case "stdout", "stderr":
		var c struct {
			Data string `json:"data"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return nil, true, fmt.Errorf("bad %s event: %w", event, err)
		}
		w := out.Stdout
		if event == "stderr" {
			w = out.Stderr
		}
		if w != nil {
			_, _ = io.WriteString(w, c.Data)
		}
		return nil, false, nil
	case "result":
		var r box.Result
		if err := json.Unmarshal([]byte(data), &r); err != nil {
			return nil, true, fmt.Errorf("bad result event: %w", err)
		}
		return &r, true, nil
	case "error":
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &body); err != nil {
			return nil, true, fmt.Errorf("bad error event: %w", err)
		}
		e := &Error{Status: api.StatusOf(body.Error.Code), Code: body.Error.Code, Message: body.Error.Message, RequestID: resp.Header.Get("X-Request-Id")}
		return nil, true, e
	}
	return nil, false, nil // an event this client does not know
}
