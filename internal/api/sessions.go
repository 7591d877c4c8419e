package api

import (
	"net/http"
	"regexp"
	"sync"

	"github.com/moat-sandbox/moat/internal/engine"
	"github.com/moat-sandbox/moat/internal/gate"
)

// sessionIDRE is what a session id can look like; anything else cannot name a
// session (404, without asking the engine).
var sessionIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`) })

// sessionID returns the {id} of r's path.
func sessionID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !sessionIDRE().MatchString(id) {
		return "", errorf(CodeNotFound, "no such session")
	}
	return id, nil
}

// callerDeleter is an Engine that records who deletes a session (*engine.Engine).
type callerDeleter interface {
	DeleteSessionAs(c engine.Caller, owner, id string) error
}

// createSession serves POST /v1/sessions.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	var in SessionRequest
	if err := s.decode(w, r, &in); err != nil {
		return err
	}
	if err := checkLanguage(in.Language); err != nil {
		return err
	}
	profile, err := p.PickProfile(in.Profile)
	if err != nil {
		return err
	}
	lim, err := in.Limits.resolve("limits.")
	if err != nil {
		return err
	}
	if err := p.CheckLimits(lim); err != nil {
		return err
	}
	env, err := envList(in.Env)
	if err != nil {
		return err
	}
	idle, err := parseDuration("idle_ttl", in.IdleTTL)
	if err != nil {
		return err
	}
	life, err := parseDuration("max_lifetime", in.MaxLifetime)
	if err != nil {
		return err
	}
	// Starting a box is an execution's worth of work: it takes a slot of the
	// principal's concurrency and rate quotas while it lasts.
	release, err := s.gate.Begin(p)
	if err != nil {
		return err
	}
	defer release()
	info, err := s.eng.CreateSession(r.Context(), &engine.SessionRequest{
		Owner: p.Name, Language: in.Language, Profile: profile, Limits: lim, Env: env, Network: in.Network,
		IdleTTL: idle, MaxLifetime: life, MaxSessions: p.Quotas.Sessions, Caller: caller(r, p),
	})
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sessions/"+info.ID)
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// listSessions serves GET /v1/sessions.
func (s *Server) listSessions(w http.ResponseWriter, _ *http.Request, p *gate.Principal) error {
	list := s.eng.Sessions(p.Name)
	if list == nil {
		list = []engine.SessionInfo{}
	}
	writeJSON(w, http.StatusOK, SessionList{Sessions: list})
	return nil
}

// getSession serves GET /v1/sessions/{id}.
func (s *Server) getSession(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	id, err := sessionID(r)
	if err != nil {
		return err
	}
	info, err := s.eng.Session(p.Name, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

// deleteSession serves DELETE /v1/sessions/{id}.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request, p *gate.Principal) error {
	id, err := sessionID(r)
	if err != nil {
		return err
	}
	var derr error
	if as, ok := s.eng.(callerDeleter); ok {
		derr = as.DeleteSessionAs(caller(r, p), p.Name, id)
	} else {
		derr = s.eng.DeleteSession(p.Name, id)
	}
	if derr != nil {
		return derr
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
