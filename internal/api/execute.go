package api

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
)

// Bounds on the lists of a one-shot execution.
const (
	MaxInputFiles  = 1000
	MaxOutputFiles = 100
)

// execute serves POST /v1/execute.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	var in ExecuteRequest
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	req, err := s.executeRequest(&in, p)
	if err != nil {
		return err
	}
	files, err := openInputFiles(in.Files)
	defer closeFiles(files)
	if err != nil {
		return err
	}
	req.Files = files
	req.Caller = caller(r, p)
	release, err := s.gate.Begin(p)
	if err != nil {
		return err
	}
	defer release()
	return s.run(w, r, func(stdout, stderr io.Writer) (*box.Result, error) {
		req.Stdout, req.Stderr = stdout, stderr
		return s.eng.Execute(r.Context(), req)
	})
}

// executeRequest checks in and turns it into an engine request (without files).
func (s *Server) executeRequest(in *ExecuteRequest, p *gate.Principal) (*engine.Request, error) {
	if err := checkLanguage(in.Language); err != nil {
		return nil, err
	}
	if err := checkCode(in.Code); err != nil {
		return nil, err
	}
	profile, err := p.PickProfile(in.Profile)
	if err != nil {
		return nil, err
	}
	lim, err := in.Limits.resolve("limits.")
	if err != nil {
		return nil, err
	}
	if in.Timeout != "" {
		if lim.Timeout != 0 {
			return nil, badRequest("timeout: given twice (timeout and limits.timeout); give one")
		}
		if lim.Timeout, err = parseDuration("timeout", in.Timeout); err != nil {
			return nil, err
		}
	}
	// Over the principal's caps: 403 limit_exceeded.
	if err := p.CheckLimits(lim); err != nil {
		return nil, err
	}
	env, err := envList(in.Env)
	if err != nil {
		return nil, err
	}
	if len(in.Files) > MaxInputFiles {
		return nil, badRequest("files: %d files, over the limit of %d", len(in.Files), MaxInputFiles)
	}
	seen := map[string]bool{}
	for i := range in.Files {
		f := &in.Files[i]
		if f.Path, err = cleanPath(fmt.Sprintf("files[%d].path", i), f.Path); err != nil {
			return nil, err
		}
		if seen[f.Path] {
			return nil, badRequest("files[%d].path: %s is given twice", i, f.Path)
		}
		seen[f.Path] = true
	}
	if len(in.OutputFiles) > MaxOutputFiles {
		return nil, badRequest("output_files: %d paths, over the limit of %d", len(in.OutputFiles), MaxOutputFiles)
	}
	var outs []string
	for i, o := range in.OutputFiles {
		c, err := cleanPath(fmt.Sprintf("output_files[%d]", i), o)
		if err != nil {
			return nil, err
		}
		if slices.Contains(outs, c) {
			return nil, badRequest("output_files[%d]: %s is given twice", i, c)
		}
		outs = append(outs, c)
	}
	return &engine.Request{
		Language: in.Language, Code: []byte(in.Code), Profile: profile,
		Limits: lim, Env: env, OutputFiles: outs, Network: in.Network,
	}, nil
}

// openInputFiles decodes each file's content into an anonymous memory file for the
// box's init to copy from: uploads never touch the host's filesystem. The caller
// closes what is returned, also on error.
func openInputFiles(in []InputFile) ([]box.File, error) {
	var out []box.File
	for i, f := range in {
		data, err := decodeBase64(fmt.Sprintf("files[%d].content", i), f.Content)
		if err != nil {
			return out, err
		}
		mf, err := memFile("upload", data)
		if err != nil {
			return out, fmt.Errorf("files[%d]: %w", i, err)
		}
		out = append(out, box.File{Dest: f.Path, Src: mf})
	}
	return out, nil
}

func closeFiles(files []box.File) {
	for _, f := range files {
		f.Src.Close()
	}
}

// sessionExecute serves POST /v1/sessions/{id}/execute.
func (s *Server) sessionExecute(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	id, err := sessionID(r)
	if err != nil {
		return err
	}
	var in CallRequest
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	if err := checkCode(in.Code); err != nil {
		return err
	}
	timeout, err := parseDuration("timeout", in.Timeout)
	if err != nil {
		return err
	}
	if err := p.CheckLimits(box.Limits{Timeout: timeout}); err != nil {
		return err
	}
	release, err := s.gate.Begin(p)
	if err != nil {
		return err
	}
	defer release()
	return s.run(w, r, func(stdout, stderr io.Writer) (*box.Result, error) {
		return s.eng.SessionExecute(r.Context(), p.Name, id, &engine.CallRequest{
			Code: []byte(in.Code), Timeout: timeout, Stdout: stdout, Stderr: stderr, Caller: caller(r, p),
		})
	})
}

// run runs an execution and answers with its result: one JSON object, or, when the
// client asked for text/event-stream, the output as it comes and then the result.
func (s *Server) run(w http.ResponseWriter, r *http.Request, exec func(stdout, stderr io.Writer) (*box.Result, error)) error {
	if !wantsStream(r) {
		res, err := exec(nil, nil)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	es := newEventStream(w, s.heartbeat)
	defer es.close()
	res, err := exec(es.output("stdout"), es.output("stderr"))
	started := es.end()
	if err != nil {
		if !started {
			return err
		}
		_, body := s.errorResponse(r, err)
		data, _ := marshal(body)
		es.send("error", data)
		return nil
	}
	data, err := marshal(res)
	if err != nil {
		return err
	}
	es.send("result", data)
	return nil
}

// decode reads a JSON body with the server's size cap and a read deadline.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) error {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	return decodeJSON(w, r, s.maxBody, dst)
}
