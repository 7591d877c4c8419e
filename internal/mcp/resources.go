package mcp

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The resources: what a tool result links to instead of carrying it whole. Only the
// client that got the link can read it (a file of a session it owns, an output it
// was shown), and only while the session or the output is kept.
const (
	fileURIPrefix   = "moat://sessions/"
	fileURITemplate = "moat://sessions/{session_id}/files/{+path}"
	outputTemplate  = "moat://outputs/{n}/{stream}"
)

func (s *Server) addResources(ms *sdk.Server) {
	ms.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "workspace-file",
		Title:       "A file in a session's workspace",
		URITemplate: fileURITemplate,
		Description: "A file in the /workspace of one of your sessions, up to " + size(MaxResource) + ". file_download links to files too large to return inline.",
	}, s.readFile)
	ms.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "output",
		Title:       "The whole output of a run",
		URITemplate: outputTemplate,
		MIMEType:    "text/plain",
		Description: "The whole stdout, stderr or result of a run that a tool result showed clipped; kept for this connection, the oldest dropped past " + size(MaxKeptOutputs) + ".",
	}, s.readOutput)
}

// fileURI is the resource URI of workspace file p (relative) of session id.
func fileURI(id, p string) string {
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return fileURIPrefix + id + "/files/" + strings.Join(segs, "/")
}

var fileURIRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^moat://sessions/([A-Za-z0-9_-]{1,128})/files/(.+)$`)
})

// parseFileURI splits a file resource URI into its session id and path.
func parseFileURI(uri string) (id, p string, ok bool) {
	m := fileURIRE().FindStringSubmatch(uri)
	if m == nil {
		return "", "", false
	}
	p, err := url.PathUnescape(m[2])
	if err != nil {
		return "", "", false
	}
	return m[1], p, true
}

func (s *Server) readFile(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, p, ok := parseFileURI(uri)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	c, ok := s.lookup(req.Session)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	owner, err := s.owned(c, id)
	if err != nil {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	if p, err = workspacePath("path", p); err != nil {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	buf := &capWriter{max: MaxResource}
	n, err := s.eng.GetFile(ctx, owner, id, p, buf)
	switch {
	case errors.Is(err, errCapped):
		return nil, errorf("%s is %s, more than the %s a resource may hold; read parts of it with session_execute", p, size(n), size(MaxResource))
	case err != nil:
		return nil, errors.New(describe(s.log, "resources/read", err, id))
	}
	data := buf.b.Bytes()
	rc := &sdk.ResourceContents{URI: uri, MIMEType: http.DetectContentType(data)}
	if utf8.Valid(data) && bytes.IndexByte(data, 0) < 0 {
		rc.Text = string(data)
	} else {
		rc.Blob = data
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{rc}}, nil
}

func (s *Server) readOutput(_ context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	c, ok := s.lookup(req.Session)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	text, ok := c.out.get(uri)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	return &sdk.ReadResourceResult{Contents: []*sdk.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: text}}}, nil
}
