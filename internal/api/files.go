package api

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/gate"
)

// putFile serves PUT /v1/sessions/{id}/files/{path...}: the raw body becomes the file.
func (s *Server) putFile(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	id, err := sessionID(r)
	if err != nil {
		return err
	}
	path, err := cleanPath("path", r.PathValue("path"))
	if err != nil {
		return err
	}
	if r.ContentLength > s.maxUpload {
		return errorf(CodeFileTooLarge, "file is %d bytes, over the upload limit of %d bytes", r.ContentLength, s.maxUpload)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()

	body := &bodyReader{r: http.MaxBytesReader(w, r.Body, s.maxUpload)}
	var src io.Reader = body
	size := r.ContentLength
	if size < 0 {
		// A chunked body: spool it to a memory file to learn its size first.
		mf, n, err := spool("upload", body)
		if err != nil {
			if cerr := body.clientErr(s.maxUpload); cerr != nil {
				return cerr
			}
			return err
		}
		defer mf.Close()
		src, size = mf, n
	}
	if err := s.eng.PutFile(r.Context(), p.Name, id, path, src, size); err != nil {
		if cerr := body.clientErr(s.maxUpload); cerr != nil {
			return cerr
		}
		return err
	}
	writeJSON(w, http.StatusCreated, PutFileResponse{Path: path, Size: size})
	return nil
}

// bodyReader remembers the first error reading a request body, to tell a client's
// broken upload from moat's own failure.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && b.err == nil {
		b.err = err
	}
	return n, err
}

// clientErr is the error to answer when reading the body failed (nil if it did not).
func (b *bodyReader) clientErr(max int64) error {
	var mbe *http.MaxBytesError
	switch {
	case b.err == nil, errors.Is(b.err, io.EOF):
		return nil
	case errors.As(b.err, &mbe):
		return errorf(CodeFileTooLarge, "file is over the upload limit of %d bytes", max)
	}
	return badRequest("request body: the upload ended early or could not be read")
}

// getFile serves GET /v1/sessions/{id}/files/{path...}: the file's raw bytes.
func (s *Server) getFile(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	id, err := sessionID(r)
	if err != nil {
		return err
	}
	path, err := cleanPath("path", r.PathValue("path"))
	if err != nil {
		return err
	}
	out := &lazyBody{w: w}
	n, err := s.eng.GetFile(r.Context(), p.Name, id, path, out)
	if err != nil {
		if !out.started {
			return err
		}
		// The status is sent: all that is left is to make sure the client does not
		// take a cut-off file for the whole one.
		s.errorResponse(r, err) // logs it if it is moat's own failure
		panic(http.ErrAbortHandler)
	}
	if !out.started {
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		out.start()
	}
	return nil
}

// lazyBody sends the 200 and its headers with the first byte of a download, so that
// an error found before (no such file, not a regular file, too large) is still a
// JSON error with its status.
type lazyBody struct {
	w       http.ResponseWriter
	started bool
}

func (l *lazyBody) start() {
	h := l.w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
	l.started = true
}

func (l *lazyBody) Write(b []byte) (int, error) {
	if !l.started {
		l.start()
	}
	return l.w.Write(b)
}

// removeFile serves DELETE /v1/sessions/{id}/files/{path...}.
func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	id, err := sessionID(r)
	if err != nil {
		return err
	}
	path, err := cleanPath("path", r.PathValue("path"))
	if err != nil {
		return err
	}
	if err := s.eng.RemoveFile(r.Context(), p.Name, id, path); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// listFiles serves GET /v1/sessions/{id}/files[?dir=DIR].
func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	id, err := sessionID(r)
	if err != nil {
		return err
	}
	dir := r.URL.Query().Get("dir")
	if dir != "" {
		if dir, err = cleanPath("dir", dir); err != nil {
			return err
		}
	}
	files, err := s.eng.ListFiles(r.Context(), p.Name, id, dir)
	cut := errors.Is(err, box.ErrListTruncated)
	if err != nil && !cut {
		return err
	}
	if files == nil {
		files = []box.FileInfo{}
	}
	writeJSON(w, http.StatusOK, FileList{Files: files, Truncated: cut})
	return nil
}
