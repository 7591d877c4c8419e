// Package api is moat's HTTP API: JSON over HTTP, versioned under /v1, on top of the
// engine. It is the gate stage of the pipeline for network callers (who is asking,
// may they, how much) and a thin translation of the engine's requests and results;
// it makes no security decision the box does not make again.
//
// # Endpoints
//
//	GET    /healthz                               {"status":"ok"}; no authentication
//	GET    /v1/openapi.json                       the OpenAPI 3 document (openapi.json)
//	POST   /v1/execute                            one execution in a fresh box -> Result
//	POST   /v1/sessions                           start a session -> 201 SessionInfo
//	GET    /v1/sessions                           the caller's sessions
//	GET    /v1/sessions/{id}                      one session
//	DELETE /v1/sessions/{id}                      destroy it -> 204
//	POST   /v1/sessions/{id}/execute              one call in the session -> Result
//	GET    /v1/sessions/{id}/files[?dir=D]        list the workspace
//	PUT    /v1/sessions/{id}/files/{path...}      upload the raw body -> 201 {path,size}
//	GET    /v1/sessions/{id}/files/{path...}      download raw bytes
//	DELETE /v1/sessions/{id}/files/{path...}      remove -> 204
//	GET    /v1/audit[?since&until&principal&...]  audit records, newest first, paged
//	GET    /metrics                               Prometheus metrics (public with
//	                                              server.metrics_public)
//
// Both execute endpoints stream when the request has Accept: text/event-stream; see
// eventStream for the framing.
//
// # Errors
//
// Every error is {"error":{"code":C,"message":M}}, mapped in one place (apiError;
// the gate's errors through gate.Status):
//
//	400 bad_request             malformed JSON, unknown field, wrong type, bad value
//	400 bad_path                a workspace path that is not a plain relative path
//	400 not_regular             the path is a directory or other non-file
//	401 unauthenticated         no or wrong bearer token (with WWW-Authenticate)
//	403 forbidden               the principal may not use that profile
//	403 limit_exceeded          a limit over the principal's maximum
//	404 not_found               no such endpoint, or no such session for this caller
//	404 file_not_found          no such file in the workspace
//	405 method_not_allowed      (with Allow)
//	409 busy                    the session is serving another call
//	410 session_lost            the session existed but its state is gone; says why
//	413 too_large               request body or code over its cap
//	413 file_too_large          a file over the upload or download cap
//	415 unsupported_media_type  a JSON endpoint got another content type
//	429 rate_limited            the principal's rate quota is used up (Retry-After)
//	429 quota_exceeded          the principal runs its quota of executions at once
//	                            (Retry-After) or has its quota of live sessions
//	429 session_limit           too many sessions (on the server, or the owner's)
//	500 internal_error          moat failed; the message has a request id for the log
//	503 unavailable             the server is shutting down, or the audit trail
//	                            cannot record (audit.failure: fail_closed)
//
// A session that belongs to another principal is not_found, never forbidden, so that
// ids cannot be probed. Internal errors are logged in full; callers get a request id.
//
// # Paths
//
// Request paths that the mux would clean ("..", ".", "//", also when encoded as %2F)
// are refused with bad_path before routing, and workspace paths are checked by
// cleanPath. Neither is the guard: the box resolves every path inside the workspace
// again, and no path chosen by a caller or by code in a box is followed on the host.
//
// # Logging
//
// One record per request (method, route pattern, status, duration, principal,
// request id) goes to the injected logger. Code, file contents, environment values
// and tokens are never logged.
//
// # Audit
//
// The request id (X-Request-Id) goes into the engine's audit record of the
// execution or session operation (engine.Caller), so a log line, an audit record
// and a response can be matched. Requests refused with 401 or 403 are recorded
// here as auth_failure records (never the token); every gate refusal is counted
// in moat_gate_refusals_total. GET /v1/audit shows a principal its own records;
// an admin principal (api_keys[].admin, or the generated token's) sees all of
// them, auth failures without a principal included.
package api
