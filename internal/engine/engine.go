package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
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

// pythonRunner makes spec start the Python policy runner with pol: compiled when it
// can be, from source otherwise, in isolated mode (-I), with the report channel.
func (e *Engine) pythonRunner(spec *box.Spec, pol python.Policy) {
	var runner string
	spec.Support, runner = e.runnerFiles(pol)
	spec.Interpreter = python.Interpreter(runner)
	spec.Report = true
}

// runnerFiles returns the support files of a Python box (the policy, and the runner
// compiled when it can be, else its source) and the runner's path in the box.
func (e *Engine) runnerFiles(pol python.Policy) ([]box.SupportFile, string) {
	pyc := compiledRunner(e.log)
	if pyc == nil {
		return python.Support(pol, nil), python.RunnerPath
	}
	return python.Support(pol, pyc), python.CompiledRunnerPath
}

// Engine runs executions through the pipeline. Build it with New; it is safe for
// concurrent use.
type Engine struct {
	cfg      *config.Config
	backend  box.Backend
	log      *slog.Logger
	redactor *filter.Redactor

	// The warm pool, once EnablePool has run.
	pool *pool
	// The audit stage, once EnableAudit has run.
	audit *auditor
	// Sessions, once EnableSessions has run.
	sessions  *session.Store[*liveSession]
	stopSweep context.CancelFunc
	maxFile   int64

	// environ is moat's own environment (secret values for the egress proxy).
	environ []string
	// egress is the egress proxy, made at its first use.
	egress egressProxy
}

// New builds an Engine. environ is moat's own environment: the values of its secret
// variables (config filter.secret_env) are redacted exactly from every output.
func New(cfg *config.Config, backend box.Backend, environ []string, log *slog.Logger) (*Engine, error) {
	if log == nil {
		log = slog.Default()
	}
	if err := cfg.CheckFilterNames(filter.DefaultRuleNames(), filter.OptInRuleNames()); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	fc := cfg.Filter
	// The egress proxy's secrets never enter a box; should one come back anyway
	// (echoed by the host it was sent to), the filter redacts it.
	fc.SecretEnv = append(slices.Clone(fc.SecretEnv), cfg.NetworkSecretEnv()...)
	red, err := buildRedactor(fc, environ)
	if err != nil {
		return nil, err
	}
	return &Engine{cfg: cfg, backend: backend, log: log, redactor: red, environ: slices.Clone(environ)}, nil
}

// Request is one execution as a front end asks for it.
type Request struct {
	Language string
	Code     []byte
	// Profile names the policy profile; empty means the config's default.
	Profile string
	// Limits override the profile's and the config's; zero fields are not set.
	Limits box.Limits
	Env    []string
	Files  []box.File
	// Network asks for a network other than the profile's: "none",
	// "allow:HOST[:PORT],..." or "open" (see network.go); empty means the profile's.
	Network string
	// OutputFiles name workspace files (clean relative paths) to return in
	// Result.Files after the code ran, each up to MaxOutputFile bytes.
	OutputFiles []string
	// Stdout and Stderr, when set, receive the filtered output live.
	Stdout, Stderr io.Writer
	// Caller says who asks, for the audit trail.
	Caller Caller
}

// Execute runs req through policy, box and filter, and audits it (one record and
// its metrics, whatever the outcome). A non-nil error is ErrBadRequest (wrapped),
// audit.ErrUnavailable (wrapped: the audit trail fails closed, and nothing ran) or
// a failure of moat itself.
func (e *Engine) Execute(ctx context.Context, req *Request) (res *box.Result, err error) {
	au, err := e.begin(audit.KindExecute, req.Caller, "", "", req.Language, req.Profile, req.Code)
	if err != nil {
		return nil, err
	}
	defer func() { au.end(res, err) }()
	lang, err := box.LookupLanguage(req.Language)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := box.CheckCode(req.Code); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	name, prof, err := e.profile(req.Profile)
	if err != nil {
		return nil, err
	}
	lim, err := e.limits(prof, req.Limits)
	if err != nil {
		return nil, err
	}
	plan, err := e.network(name, prof, req.Network, req.Caller)
	if err != nil {
		return nil, err
	}
	spec := &box.Spec{
		Language: lang.Name, Code: req.Code, Env: append(slices.Clone(plan.env), req.Env...), Files: req.Files,
		Limits: lim, Network: box.NetworkNone, Stdout: req.Stdout, Stderr: req.Stderr,
	}

	for _, p := range req.OutputFiles {
		if _, err := box.CleanDest(p); err != nil {
			return nil, fmt.Errorf("%w: output file %q: %w", ErrBadRequest, p, err)
		}
	}

	// policy
	switch lang.Name {
	case "bash":
		rules := policy.ShellRules{Profile: name, Allow: prof.Shell.Allow, Deny: prof.Shell.Deny}
		if v := policy.CheckShell(string(req.Code), rules); len(v) > 0 {
			return blocked(v), nil
		}
	case "python":
		e.pythonRunner(spec, pythonPolicy(name, prof))
	}
	au.stage(metrics.StagePolicy)

	// box, with the filter on the live streams
	streams := &streamSet{red: e.redactor}
	spec.Filter = streams.wrap
	eg, err := e.newBoxEgress(plan, req.Caller, "")
	if err != nil {
		return nil, err
	}
	var pooled box.Session
	taking := time.Now()
	if eg != nil {
		// A box with a network is made for its execution: its proxy serves it alone.
		spec.Network, spec.Egress = box.NetworkEgress, eg
		spec.Support = append(spec.Support, plan.support...)
	} else {
		pooled = e.takePooled(ctx, lang.Name, name, lim, spec.Env, func() *box.SessionSpec { return e.oneShotSpec(spec, name, prof) })
	}
	switch {
	case pooled != nil:
		took := time.Since(taking)
		res, err = runOneShot(ctx, pooled, spec, req.OutputFiles)
		e.pool.release(pooled) // destroyed in the background: no teardown to wait for
		if res != nil {
			res.Timing.Start = took
		}
	case len(req.OutputFiles) > 0:
		res, err = e.runForFiles(ctx, spec, name, prof, req.OutputFiles)
	default:
		res, err = e.backend.Run(ctx, spec)
	}
	if res != nil {
		au.boxStages(res.Timing)
		if eg != nil {
			eg.Close() // the backend closed it with the box; this only waits for it
			res.Egress = eg.usage(egressMark{})
			res.Isolation = append(res.Isolation, plan.desc)
		}
	}
	au.stage(metrics.StageBox)
	if err != nil {
		return nil, err
	}
	e.finish(res, streams)
	au.stage(metrics.StageFilter)
	return res, nil
}

// finish applies the filter's count and the runner's report to a box's result.
func (e *Engine) finish(res *box.Result, streams *streamSet) {
	res.Redactions = streams.count()
	res.RedactionsByRule = streams.byRule(res.RedactionsByRule)
	e.applyReport(res)
	for i, w := range res.Warnings {
		res.Warnings[i] = filter.SanitizeError(w)
	}
	res.Normalize()
}

// profile resolves a profile name (empty: the config's default).
func (e *Engine) profile(name string) (string, config.Profile, error) {
	if name == "" {
		name = e.cfg.Profile
	}
	if name == "" {
		name = "default"
	}
	p, err := e.cfg.ResolveProfile(name)
	if err != nil {
		return "", config.Profile{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	return name, p, nil
}

// limits merges, from weakest to strongest: box.DefaultLimits (applied by the
// backend), the config's limits, the profile's, the request's.
func (e *Engine) limits(p config.Profile, req box.Limits) (box.Limits, error) {
	out := box.Limits{}
	for _, l := range []config.Limits{e.cfg.Limits, p.Limits} {
		r, err := l.Resolve()
		if err != nil {
			return box.Limits{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
		}
		out = out.Merge(box.Limits{Timeout: r.Timeout, Memory: r.Memory, CPUs: r.CPUs, Pids: r.Pids, Disk: r.Disk, Tmp: r.Tmp, Output: r.Output})
	}
	return out.Merge(req), nil
}

func blocked(v []box.Violation) *box.Result {
	r := &box.Result{Status: box.StatusBlocked, ExitCode: -1, Violations: v}
	r.Normalize()
	return r
}

// pythonPolicy turns a profile into the runner's policy document.
func pythonPolicy(name string, p config.Profile) python.Policy {
	pp := p.Python
	out := python.Policy{
		Profile:        name,
		Mode:           python.Mode(pp.Mode),
		AllowModules:   pp.AllowModules,
		DenyModules:    pp.DenyModules,
		DenyBuiltins:   pp.DenyBuiltins,
		DenyAttributes: pp.DenyAttributes,
		FileAccess:     python.FileAccess(pp.FileAccess),
	}
	if len(pp.Modules) > 0 {
		out.Modules = map[string]python.ModuleRule{}
		for m, r := range pp.Modules {
			out.Modules[m] = python.ModuleRule{Allow: r.Allow, Deny: r.Deny}
		}
	}
	return out
}

// streamSet makes one redacting stream per output stream and counts their
// replacements.
type streamSet struct {
	red *filter.Redactor
	mu  sync.Mutex
	all []*filter.Stream
}

func (s *streamSet) wrap(next io.Writer) io.WriteCloser {
	st := s.red.Stream(next)
	s.mu.Lock()
	s.all = append(s.all, st)
	s.mu.Unlock()
	return st
}

func (s *streamSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, st := range s.all {
		n += st.Count()
	}
	return n
}

// byRule adds the streams' replacements, by rule, to into (made when needed).
func (s *streamSet) byRule(into map[string]int) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.all {
		into = addCounts(into, st.CountByRule())
	}
	return into
}

// addCounts adds the counts of b to a, making a when needed.
func addCounts(a, b map[string]int) map[string]int {
	for k, v := range b {
		if a == nil {
			a = map[string]int{}
		}
		a[k] += v
	}
	return a
}

// buildRedactor assembles the redaction rules of the config and the exact values of
// moat's secret environment variables.
func buildRedactor(fc config.Filter, environ []string) (*filter.Redactor, error) {
	disabled := map[string]bool{}
	for _, n := range fc.Disable {
		disabled[n] = true
	}
	var rules []filter.Rule
	for _, r := range filter.DefaultRules() {
		if !disabled[r.Name] {
			rules = append(rules, r)
		}
	}
	for _, n := range fc.Enable {
		r, ok := filter.RuleByName(n)
		if !ok {
			return nil, fmt.Errorf("%w: filter.enable: unknown rule %q", ErrBadRequest, n)
		}
		rules = append(rules, r)
	}
	for _, cr := range fc.Rules {
		r, err := filter.NewRule(cr.Name, cr.Pattern, cr.MaxLen)
		if err != nil {
			return nil, fmt.Errorf("%w: filter.rules: %w", ErrBadRequest, err)
		}
		rules = append(rules, r)
	}
	return filter.New(rules, secretValues(fc, environ)), nil
}

// secretValues returns the values of moat's own environment variables that the config
// calls secret (config.Filter.IsSecretEnv), to be redacted exactly.
func secretValues(fc config.Filter, environ []string) []string {
	var out []string
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && v != "" && fc.IsSecretEnv(k) {
			out = append(out, v)
		}
	}
	return out
}

// Check reports what the profile would block in req's code without running it: shell
// scripts are checked here; Python is checked by the runner's static pass in a box
// (the code itself never starts). It returns the profile's name and the violations.
func (e *Engine) Check(ctx context.Context, req *Request) (string, []box.Violation, error) {
	lang, err := box.LookupLanguage(req.Language)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if err := box.CheckCode(req.Code); err != nil {
		return "", nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	name, prof, err := e.profile(req.Profile)
	if err != nil {
		return "", nil, err
	}
	if lang.Name == "bash" {
		return name, policy.CheckShell(string(req.Code), policy.ShellRules{Profile: name, Allow: prof.Shell.Allow, Deny: prof.Shell.Deny}), nil
	}
	spec := &box.Spec{Language: lang.Name, Code: req.Code, Network: "none", Limits: box.Limits{Timeout: checkTimeout}}
	e.pythonRunner(spec, pythonPolicy(name, prof))
	spec.Interpreter = append(spec.Interpreter, "--check-only")
	res, err := e.backend.Run(ctx, spec)
	if err != nil {
		return "", nil, err
	}
	if res.Status != box.StatusOK && res.Status != box.StatusError {
		return "", nil, fmt.Errorf("policy check did not finish: %s", res.Status)
	}
	e.applyReport(res)
	if res.Status == box.StatusError && len(res.Violations) == 0 {
		// The code does not parse: the runner printed the SyntaxError.
		return name, []box.Violation{{Rule: "python.syntax", Detail: box.LastLine(res.Stderr, maxSyntaxDetail)}}, nil
	}
	return name, res.Violations, nil
}

// checkTimeout bounds a policy check, which parses but never runs the code.
const checkTimeout = 10 * time.Second

// maxSyntaxDetail bounds the quoted SyntaxError line of a policy check.
const maxSyntaxDetail = 1 << 10

// PolicyDocument returns the Python runner's policy for a profile (empty: the config's
// default), as the box receives it; for benchmarks and debugging.
func (e *Engine) PolicyDocument(profile string) ([]byte, error) {
	name, prof, err := e.profile(profile)
	if err != nil {
		return nil, err
	}
	return pythonPolicy(name, prof).JSON(), nil
}

// ShellRules returns the shell rules of a profile (empty: the config's default).
func (e *Engine) ShellRules(profile string) (policy.ShellRules, error) {
	name, prof, err := e.profile(profile)
	if err != nil {
		return policy.ShellRules{}, err
	}
	return policy.ShellRules{Profile: name, Allow: prof.Shell.Allow, Deny: prof.Shell.Deny}, nil
}
