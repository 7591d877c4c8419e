package engine

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/config"
	"github.com/moat-sandbox/moat/internal/filter"
	"github.com/moat-sandbox/moat/internal/metrics"
	"github.com/moat-sandbox/moat/internal/policy"
	"github.com/moat-sandbox/moat/internal/policy/python"
	"github.com/moat-sandbox/moat/internal/session"
)

// SessionRequest opens a session: one box kept alive with a persistent interpreter.
type SessionRequest struct {
	// Owner is the principal the session belongs to; only it can see or use it.
	Owner    string
	Language string
	// Profile names the policy profile; empty means the config's default.
	Profile string
	// Limits bound the box; Limits.Timeout is the default per-call timeout.
	Limits box.Limits
	Env    []string
	// Network asks for a network other than the profile's, as Request.Network.
	Network string
	// IdleTTL and MaxLifetime, when non-zero, override the server's defaults; larger
	// values are cut to them.
	IdleTTL, MaxLifetime time.Duration
	// MaxSessions is how many live sessions Owner may hold (its quota); zero means
	// DefaultMaxSessions.
	MaxSessions int
	// Caller says who asks, for the audit trail; its empty Principal means Owner.
	Caller Caller
}

// DefaultMaxSessions is an owner's session quota when the request gives none.
const DefaultMaxSessions = 8

// CallRequest is one execution in a session.
type CallRequest struct {
	Code []byte
	// Timeout, when non-zero, bounds this call instead of the session's default.
	Timeout time.Duration
	// Stdout and Stderr, when set, receive the filtered output live.
	Stdout, Stderr io.Writer
	// Caller says who asks, for the audit trail; its empty Principal means the
	// session's owner.
	Caller Caller
}

// SessionInfo describes a session to its owner.
type SessionInfo struct {
	ID        string    `json:"id"`
	Language  string    `json:"language"`
	Profile   string    `json:"profile"`
	State     string    `json:"state"` // "idle" or "busy"
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used"`
	// ExpiresAt is when the session ends if left idle (the earlier of the idle TTL
	// and the maximum lifetime).
	ExpiresAt time.Time `json:"expires_at"`
	Calls     int       `json:"calls"`
	// Isolation and Warnings are those of the session's box.
	Isolation []string `json:"isolation"`
	Warnings  []string `json:"warnings"`
}

// SessionOptions enable sessions on an engine (EnableSessions).
type SessionOptions struct {
	// Store configures the session store: TTLs, the total limit, the record directory.
	Store session.Options
	// MaxFile bounds a file downloaded from a workspace; zero means 64 MiB.
	MaxFile int64
}

// liveSession is a session's box and what the engine needs to run calls in it.
type liveSession struct {
	box.Session
	lang    string
	profile string
	shell   policy.ShellRules
	// netDesc names the session's network in its isolation list ("" without one),
	// and egress serves it.
	netDesc string
	egress  *boxEgress
}

// Isolation lists the protections in force: the box's, and the egress proxy.
func (ls *liveSession) Isolation() []string {
	iso := ls.Session.Isolation()
	if ls.netDesc != "" {
		iso = append(iso, ls.netDesc)
	}
	return iso
}

// ErrNoSessions: the engine was not given a session store (EnableSessions).
var ErrNoSessions = errors.New("sessions are not enabled")

// EnableSessions gives the engine a session store and starts its sweeper. Call it
// once, before serving; Close ends both.
func (e *Engine) EnableSessions(opts SessionOptions) error {
	if _, ok := e.backend.(box.SessionBackend); !ok {
		return fmt.Errorf("the %s backend does not keep sessions", e.backend.Name())
	}
	if opts.Store.Log == nil {
		opts.Store.Log = e.log
	}
	if next := opts.Store.OnEnd; next != nil {
		opts.Store.OnEnd = func(end session.End) { e.sessionEnded(end); next(end) }
	} else {
		opts.Store.OnEnd = e.sessionEnded
	}
	st, err := session.New[*liveSession](opts.Store)
	if err != nil {
		return err
	}
	if opts.MaxFile <= 0 {
		opts.MaxFile = 64 << 20
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.sessions, e.stopSweep, e.maxFile = st, cancel, opts.MaxFile
	go st.Run(ctx)
	return nil
}

// CreateSession starts a session for req.Owner and returns its description. It fails
// with ErrBadRequest (wrapped) for a bad language, profile or limit, and with
// session.ErrLimit when the owner or the server has too many sessions.
func (e *Engine) CreateSession(ctx context.Context, req *SessionRequest) (_ SessionInfo, err error) {
	au, err := e.begin(audit.KindSessionCreate, req.Caller, req.Owner, "", req.Language, req.Profile, nil)
	if err != nil {
		return SessionInfo{}, err
	}
	defer func() { au.end(nil, err) }()
	if e.sessions == nil {
		return SessionInfo{}, ErrNoSessions
	}
	lang, err := box.LookupLanguage(req.Language)
	if err != nil {
		return SessionInfo{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	name, prof, err := e.profile(req.Profile)
	if err != nil {
		return SessionInfo{}, err
	}
	lim, err := e.limits(prof, req.Limits)
	if err != nil {
		return SessionInfo{}, err
	}
	if req.IdleTTL < 0 || req.MaxLifetime < 0 {
		return SessionInfo{}, fmt.Errorf("%w: idle TTL and maximum lifetime must be positive", ErrBadRequest)
	}
	max := req.MaxSessions
	if max == 0 {
		max = DefaultMaxSessions
	}
	plan, err := e.network(name, prof, req.Network, req.Caller)
	if err != nil {
		return SessionInfo{}, err
	}
	eg, err := e.newBoxEgress(plan, req.Caller, "")
	if err != nil {
		return SessionInfo{}, err
	}
	slot, err := e.sessions.Reserve(req.Owner, max)
	if err != nil {
		return SessionInfo{}, err
	}
	spec := &box.SessionSpec{Language: lang.Name, Env: append(slices.Clone(plan.env), req.Env...), Limits: lim, Network: box.NetworkNone}
	if lang.Name == "python" {
		e.pythonSession(spec, pythonPolicy(name, prof), prof.Preload)
	}
	var sb box.Session
	if eg != nil {
		// A box with a network is made for its session: its proxy serves it alone.
		spec.Network, spec.Egress = box.NetworkEgress, eg
		spec.Support = append(spec.Support, plan.support...)
	} else {
		// A box from the warm pool serves a session as well as an execution: it
		// has never run code, and it is destroyed with the session.
		sb = e.takePooled(ctx, lang.Name, name, lim, req.Env, func() *box.SessionSpec { return spec })
	}
	if sb == nil {
		if sb, err = e.backend.(box.SessionBackend).StartSession(ctx, spec); err != nil {
			slot.Cancel()
			return SessionInfo{}, err
		}
	}
	ls := &liveSession{Session: sb, lang: lang.Name, profile: name, netDesc: plan.desc, egress: eg,
		shell: policy.ShellRules{Profile: name, Allow: prof.Shell.Allow, Deny: prof.Shell.Deny}}
	info, err := slot.Commit(session.Info{Language: lang.Name, Profile: name, IdleTTL: req.IdleTTL, MaxLifetime: req.MaxLifetime}, ls)
	if err != nil {
		return SessionInfo{}, err
	}
	if eg != nil {
		eg.setSession(info.ID)
	}
	out := sessionInfo(info, ls)
	au.created(out, req.Caller)
	return out, nil
}

func sessionInfo(in session.Info, ls *liveSession) SessionInfo {
	out := SessionInfo{
		ID: in.ID, Language: in.Language, Profile: in.Profile, State: "idle",
		CreatedAt: in.CreatedAt, LastUsed: in.LastUsed, ExpiresAt: in.ExpiresAt, Calls: in.Calls,
		Isolation: []string{}, Warnings: []string{},
	}
	if in.Busy {
		out.State = "busy"
	}
	if ls != nil {
		out.Isolation = ls.Isolation()
		out.Warnings = ls.Warnings()
	}
	return out
}

// Sessions lists owner's live sessions, oldest first.
func (e *Engine) Sessions(owner string) []SessionInfo {
	if e.sessions == nil {
		return []SessionInfo{}
	}
	out := []SessionInfo{}
	for _, in := range e.sessions.List(owner) {
		out = append(out, sessionInfo(in, nil))
	}
	return out
}

// Session describes one of owner's sessions: session.ErrNotFound if it does not exist
// or is another owner's, session.ErrLost if it existed and its state is gone.
func (e *Engine) Session(owner, id string) (SessionInfo, error) {
	if e.sessions == nil {
		return SessionInfo{}, ErrNoSessions
	}
	in, err := e.sessions.Get(owner, id)
	if err != nil {
		return SessionInfo{}, err
	}
	return sessionInfo(in, nil), nil
}

// DeleteSession destroys one of owner's sessions and its box.
func (e *Engine) DeleteSession(owner, id string) error {
	if e.sessions == nil {
		return ErrNoSessions
	}
	return e.sessions.Delete(owner, id)
}

// acquire takes one of owner's sessions for one operation.
func (e *Engine) acquire(owner, id string) (*liveSession, func(bool), error) {
	if e.sessions == nil {
		return nil, nil, ErrNoSessions
	}
	return e.sessions.Acquire(owner, id)
}

// lost turns a box's "session lost" into the store's typed error, with a reason fit
// for the client.
func lost(id string, err error) error {
	if errors.Is(err, box.ErrSessionLost) {
		return &session.LostError{ID: id, Reason: filter.SanitizeError(err.Error())}
	}
	return err
}

// SessionExecute runs one call in a session through policy, the box and the filter.
// A session serves one call at a time: session.ErrBusy while another runs.
func (e *Engine) SessionExecute(ctx context.Context, owner, id string, req *CallRequest) (res *box.Result, err error) {
	au, err := e.begin(audit.KindSessionExecute, req.Caller, owner, id, "", "", req.Code)
	if err != nil {
		return nil, err
	}
	defer func() { au.end(res, err) }()
	if err := box.CheckCode(req.Code); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if req.Timeout < 0 {
		return nil, fmt.Errorf("%w: timeout must be positive", ErrBadRequest)
	}
	ls, release, err := e.acquire(owner, id)
	if err != nil {
		return nil, err
	}
	defer release(true)
	au.session(ls.lang, ls.profile)
	// policy
	if ls.lang == "bash" {
		if v := policy.CheckShell(string(req.Code), ls.shell); len(v) > 0 {
			return blocked(v), nil
		}
	}
	au.stage(metrics.StagePolicy)
	// box, with the filter on the live streams
	streams := &streamSet{red: e.redactor}
	var mark egressMark
	if ls.egress != nil {
		mark = ls.egress.mark()
	}
	res, err = ls.Exec(ctx, &box.Call{Code: req.Code, Timeout: req.Timeout, Stdout: req.Stdout, Stderr: req.Stderr, Filter: streams.wrap})
	if res != nil && ls.egress != nil {
		res.Isolation = append(res.Isolation, ls.netDesc)
		res.Egress = ls.egress.usage(mark)
	}
	au.stage(metrics.StageRun)
	if err != nil {
		return nil, lost(id, err)
	}
	e.finish(res, streams)
	au.stage(metrics.StageFilter)
	return res, nil
}

// PutFile writes size bytes from r to path in the session's workspace.
func (e *Engine) PutFile(ctx context.Context, owner, id, path string, r io.Reader, size int64) error {
	ls, release, err := e.acquire(owner, id)
	if err != nil {
		return err
	}
	defer release(false)
	return lost(id, ls.PutFile(ctx, path, r, size))
}

// GetFile copies the workspace file at path to w and returns its size.
func (e *Engine) GetFile(ctx context.Context, owner, id, path string, w io.Writer) (int64, error) {
	ls, release, err := e.acquire(owner, id)
	if err != nil {
		return 0, err
	}
	defer release(false)
	n, err := ls.GetFile(ctx, path, w, e.maxFile)
	return n, lost(id, err)
}

// ListFiles lists the session's workspace below dir ("" for all of it).
func (e *Engine) ListFiles(ctx context.Context, owner, id, dir string) ([]box.FileInfo, error) {
	ls, release, err := e.acquire(owner, id)
	if err != nil {
		return nil, err
	}
	defer release(false)
	files, err := ls.ListFiles(ctx, dir)
	return files, lost(id, err)
}

// RemoveFile removes a file (or an empty directory) from the session's workspace.
func (e *Engine) RemoveFile(ctx context.Context, owner, id, path string) error {
	ls, release, err := e.acquire(owner, id)
	if err != nil {
		return err
	}
	defer release(false)
	return lost(id, ls.RemoveFile(ctx, path))
}

// Close destroys every session's box and the warm pool. The engine serves no session
// (and no pooled execution) afterwards.
func (e *Engine) Close() error {
	if e.pool != nil {
		e.pool.close()
	}
	var err error
	if e.sessions != nil {
		e.stopSweep()
		err = e.sessions.Close()
	}
	if e.pool != nil {
		// What the backend keeps for pooled boxes (the native backend's zygotes)
		// ends once every box is gone: the pool's, and the sessions taken from it.
		if c, ok := e.backend.(io.Closer); ok {
			err = errors.Join(err, c.Close())
		}
	}
	return err
}

// MaxOutputFile bounds each file a one-shot execution returns (Request.OutputFiles),
// and MaxOutputFilesTotal all of them together: the server holds them, base64 and
// all, until the result is sent, and sparse files cost the box nothing.
const (
	MaxOutputFile       = 16 << 20
	MaxOutputFilesTotal = 32 << 20
)

// runForFiles runs a one-shot execution that names output files: in a session box of
// its own (not in the store), so that the files can be read before the box goes. The
// spec has passed policy.
func (e *Engine) runForFiles(ctx context.Context, spec *box.Spec, profile string, prof config.Profile, outputs []string) (*box.Result, error) {
	sb, ok := e.backend.(box.SessionBackend)
	if !ok {
		return nil, fmt.Errorf("%w: the %s backend cannot return output files", ErrBadRequest, e.backend.Name())
	}
	started := time.Now()
	s, err := sb.StartSession(ctx, e.oneShotSpec(spec, profile, prof))
	if err != nil {
		return nil, err
	}
	took := time.Since(started)
	res, err := runOneShot(ctx, s, spec, outputs)
	ended := time.Now()
	s.Close()
	if res != nil {
		res.Timing.Start, res.Timing.Teardown = took, time.Since(ended)
	}
	return res, err
}

// oneShotSpec is the session box a one-shot execution of spec runs in.
func (e *Engine) oneShotSpec(spec *box.Spec, profile string, prof config.Profile) *box.SessionSpec {
	ss := &box.SessionSpec{Language: spec.Language, Env: spec.Env, Limits: spec.Limits, Network: spec.Network, Egress: spec.Egress}
	if spec.Language == "python" {
		e.pythonSession(ss, pythonPolicy(profile, prof), prof.Preload)
	}
	for _, f := range spec.Support {
		if f.Path == CABundlePath {
			ss.Support = append(ss.Support, f)
		}
	}
	return ss
}

// runOneShot runs spec as the only call of the session box s (made for it, or taken
// from the warm pool): input files in, the code, output files out. The caller closes
// s afterwards.
func runOneShot(ctx context.Context, s box.Session, spec *box.Spec, outputs []string) (*box.Result, error) {
	for _, f := range spec.Files {
		st, err := f.Src.Stat()
		if err != nil {
			return nil, fmt.Errorf("input file %s: %w", f.Dest, err)
		}
		if err := s.PutFile(ctx, f.Dest, io.NewSectionReader(f.Src, 0, st.Size()), st.Size()); err != nil {
			return nil, fmt.Errorf("input file %s: %w", f.Dest, err)
		}
	}
	res, err := s.Exec(ctx, &box.Call{
		Code: spec.Code, Timeout: spec.Limits.WithDefaults().Timeout, OneShot: true,
		Stdout: spec.Stdout, Stderr: spec.Stderr, Filter: spec.Filter,
	})
	if err != nil {
		return nil, err
	}
	left := int64(MaxOutputFilesTotal)
	for _, p := range outputs {
		fd := box.FileData{Path: p}
		var buf bytes.Buffer
		n, err := s.GetFile(ctx, p, &buf, min(MaxOutputFile, left))
		switch {
		case errors.Is(err, box.ErrFileTooLarge) && left < MaxOutputFile:
			fd.Error = fmt.Sprintf("not returned: the output files of one execution are at most %d MiB in all, and the files before it took %d MiB; read it from a session's workspace instead",
				MaxOutputFilesTotal>>20, (MaxOutputFilesTotal-left)>>20)
		case err != nil:
			fd.Error = filter.SanitizeError(err.Error())
		default:
			left -= n
			fd.Size, fd.Data = n, base64.StdEncoding.EncodeToString(buf.Bytes())
		}
		res.Files = append(res.Files, fd)
	}
	return res, nil
}

// pythonSession makes a session spec start the Python policy runner in session mode,
// importing the profile's preload modules before it says it is ready.
func (e *Engine) pythonSession(ss *box.SessionSpec, pol python.Policy, preload []string) {
	var runner string
	ss.Support, runner = e.runnerFiles(pol)
	ss.Interpreter = python.SessionInterpreter(runner, preload...)
}
