package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/filter"
	"github.com/moat-sandbox/moat/internal/gate"
)

// MaxRequestBody bounds one HTTP request to /mcp: a file_upload of DefaultMaxUpload
// bytes, base64 encoded, fits.
const MaxRequestBody = 16 << 20

type principalKey struct{}

// remoteHeader carries the client's network address from Handler to the tools.
const remoteHeader = "Moat-Remote-Addr"

// Handler serves the streamable HTTP transport (moat serve mounts it at /mcp)
// behind the gate: every request carries the bearer token of an API key, the MCP
// session belongs to the key's principal (another key's requests for it are
// refused, by the SDK's session-user check), and its tools carry the principal's
// profile, limits and quotas. sessionTimeout closes an MCP session idle that long
// (DefaultSessionTimeout when zero). The SDK's protection against DNS rebinding
// stays on, and cross-origin browser requests are refused.
func (s *Server) Handler(sessionTimeout time.Duration) http.Handler {
	if sessionTimeout <= 0 {
		sessionTimeout = DefaultSessionTimeout
	}
	streamable := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		p, ok := r.Context().Value(principalKey{}).(*gate.Principal)
		if !ok {
			return nil
		}
		return s.serverFor(p)
	}, &sdk.StreamableHTTPOptions{
		SessionTimeout:      sessionTimeout,
		Logger:              s.log,
		MaxRequestBodyBytes: MaxRequestBody,
	})
	// RequireBearerToken only carries the principal to the SDK (TokenInfo.UserID):
	// the gate has checked the token already.
	bound := auth.RequireBearerToken(func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		p, ok := r.Context().Value(principalKey{}).(*gate.Principal)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: p.Name}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(streamable)
	inner := http.NewCrossOriginProtection().Handler(bound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.gate == nil {
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the MCP endpoint has no gate", 0)
			return
		}
		p, err := s.gate.Authenticate(r)
		if err != nil {
			status, code, after := gate.Status(err)
			if status == 0 {
				status, code = http.StatusInternalServerError, "internal_error"
			}
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="moat"`)
			}
			msg := strings.TrimPrefix(filter.SanitizeError(err.Error()), "unauthenticated: ")
			if s.onRefused != nil {
				s.onRefused(r, status, code, msg, audit.FrontEndMCP)
			}
			writeError(w, status, code, msg, after)
			return
		}
		// The tool handlers see the request's headers, not the request: the
		// client's address reaches the audit trail as a header moat sets itself,
		// over whatever the client sent under that name.
		r.Header.Set(remoteHeader, r.RemoteAddr)
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// writeError answers a refused request with the HTTP API's error body.
func writeError(w http.ResponseWriter, status int, code, msg string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
