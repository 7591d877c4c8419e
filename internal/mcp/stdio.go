package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxLineBytes bounds one message on stdio (a line). A file_upload of
// DefaultMaxUpload bytes, base64 encoded, fits.
const MaxLineBytes = 16 << 20

// JSON-RPC error codes of the errors the stdio transport answers itself.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeInternalError  = -32603
)

// lineTransport is the stdio transport: one JSON-RPC message per line, as MCP hosts
// write them. Unlike the SDK's own, a line that is not a JSON-RPC message (not
// JSON, a batch, a wrong shape, too long) is answered with a JSON-RPC error and the
// session goes on: an MCP host's mistake, or noise on the pipe, must not end a
// client's sessions.
type lineTransport struct {
	in  io.Reader
	out io.Writer
	log *slog.Logger
}

func newLineTransport(in io.Reader, out io.Writer, log *slog.Logger) *lineTransport {
	return &lineTransport{in: in, out: out, log: log}
}

// Connect implements sdk.Transport; it starts the reader.
func (t *lineTransport) Connect(context.Context) (sdk.Connection, error) {
	c := &lineConn{out: t.out, log: t.log, msgs: make(chan readResult), closed: make(chan struct{})}
	go c.readLoop(bufio.NewReaderSize(t.in, 64<<10))
	return c, nil
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

// lineConn is a connection of lineTransport.
type lineConn struct {
	log       *slog.Logger
	msgs      chan readResult
	closed    chan struct{}
	closeOnce sync.Once

	wmu sync.Mutex
	// +checklocks:wmu
	out io.Writer

	// The calls read and not yet answered: at the end of the input, the
	// connection ends only once they are, so a host that writes its requests and
	// closes its end of the pipe still gets every answer.
	pmu sync.Mutex
	// +checklocks:pmu
	pending  map[jsonrpc.ID]bool
	answered sync.WaitGroup
}

// called records a call read from the input.
func (c *lineConn) called(msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.pending == nil {
		c.pending = map[jsonrpc.ID]bool{}
	}
	if !c.pending[req.ID] {
		c.pending[req.ID] = true
		c.answered.Add(1)
	}
}

// answering records the answer to a call.
func (c *lineConn) answering(msg jsonrpc.Message) {
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return
	}
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.pending[resp.ID] {
		delete(c.pending, resp.ID)
		c.answered.Done()
	}
}

// drain waits until every call read has been answered, or the connection closed.
func (c *lineConn) drain() {
	done := make(chan struct{})
	go func() {
		c.answered.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-c.closed:
	}
}

// readLoop reads lines until the input ends, delivering each message, answering
// each malformed line itself.
func (c *lineConn) readLoop(r *bufio.Reader) {
	for {
		line, tooLong, err := readLine(r, MaxLineBytes)
		if tooLong {
			c.reject(nil, codeInvalidRequest, fmt.Sprintf("message is longer than %d bytes", MaxLineBytes))
		} else if line = bytes.TrimSpace(line); len(line) > 0 {
			if msg, ok := c.decode(line); ok {
				c.called(msg)
				select {
				case c.msgs <- readResult{msg: msg}:
				case <-c.closed:
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				err = fmt.Errorf("read stdin: %w", err)
			}
			c.drain()
			select {
			case c.msgs <- readResult{err: err}:
			case <-c.closed:
			}
			return
		}
	}
}

// readLine reads one line of at most max bytes, without its newline. A longer line
// is read to its end and dropped (tooLong).
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// decode parses one line as a JSON-RPC message; a malformed one is answered with
// an error and not delivered.
func (c *lineConn) decode(line []byte) (jsonrpc.Message, bool) {
	if !json.Valid(line) {
		c.reject(nil, codeParseError, "parse error: the line is not valid JSON")
		return nil, false
	}
	if line[0] == '[' {
		c.reject(nil, codeInvalidRequest, "batches are not supported: send one JSON-RPC message per line")
		return nil, false
	}
	var head struct {
		ID            json.RawMessage `json:"id"`
		Result, Error json.RawMessage
	}
	_ = json.Unmarshal(line, &head)
	msg, err := jsonrpc.DecodeMessage(line)
	if _, isResponse := msg.(*jsonrpc.Response); isResponse && head.Result == nil && head.Error == nil {
		err = errors.New("a response without result or error")
	}
	if err != nil {
		c.reject(head.ID, codeInvalidRequest, "invalid request: not a JSON-RPC 2.0 request, notification or response")
		return nil, false
	}
	return msg, true
}

// reject writes an error response to a malformed message; id is the message's
// id, echoed when it is a string or an integer, as JSON-RPC ids are.
func (c *lineConn) reject(id json.RawMessage, code int, msg string) {
	c.log.Debug("mcp: malformed message on stdin", "code", code, "reason", msg)
	type wireError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	line, _ := json.Marshal(struct {
		Version string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   wireError       `json:"error"`
	}{"2.0", json.RawMessage(echoID(id)), wireError{code, msg}})
	_ = c.writeLine(line)
}

// echoID returns a raw JSON id to echo in an error response: the id itself when it
// is a string or an integer, else null.
func echoID(raw json.RawMessage) string {
	var s string
	var n int64
	if len(raw) > 0 && (json.Unmarshal(raw, &s) == nil || json.Unmarshal(raw, &n) == nil) {
		return string(raw)
	}
	return "null"
}

// Read implements sdk.Connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	case r := <-c.msgs:
		return r.msg, r.err
	}
}

// Write implements sdk.Connection: one message, one line.
func (c *lineConn) Write(_ context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	err = c.writeLine(data)
	c.answering(msg)
	return err
}

func (c *lineConn) writeLine(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		return io.ErrClosedPipe
	default:
	}
	_, err := c.out.Write(append(data, '\n'))
	return err
}

// Close implements sdk.Connection. The reader may stay blocked on the input until
// it ends; the process is about to exit then.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// SessionID implements sdk.Connection: stdio has no session id.
func (c *lineConn) SessionID() string { return "" }
