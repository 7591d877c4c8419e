// Package mcp is moat's MCP server: the engine as tools for an agent, over the
// official Go SDK (github.com/modelcontextprotocol/go-sdk). It is a front end like
// the HTTP API: the gate stage for its callers, then a thin translation of the
// engine's requests and results into tool calls and content; it makes no security
// decision the box does not make again.
//
//	s := mcp.New(mcp.Options{Engine: eng, Gate: g, Grace: mcp.DefaultGrace})
//	defer s.Close()
//	http.Handle("/mcp", s.Handler(0))              // moat serve: streamable HTTP
//	err := s.ServeStdio(ctx, local, os.Stdin, os.Stdout) // moat mcp
//
// # Tools
//
//	execute_python   {code, timeout_seconds?, profile?}          one-shot, fresh box
//	execute_shell    {command, timeout_seconds?, profile?}       one-shot, fresh box
//	session_create   {language?, timeout_seconds?, idle_timeout_seconds?, profile?}
//	session_execute  {session_id, code, timeout_seconds?}
//	session_destroy  {session_id}
//	session_list     {}
//	file_upload      {session_id, path, content, encoding?}      text or base64
//	file_download    {session_id, path}
//	file_list        {session_id, dir?}
//
// Each principal gets its own SDK server, so the tools' schemas and descriptions
// carry its limits: timeout_seconds is bounded by its cap, profile is offered only
// to a principal that may pick among several (an enum), and the session quota is
// stated. Unknown arguments are refused. No schema has a "default" keyword: the
// SDK v1.8.0 panics applying one to "arguments": null; descriptions say what an
// omitted argument means. A panic while handling a request becomes an internal
// error for that request (recoverPanics), never the end of the process.
//
// # Results
//
// An execution's result is content for a model: a text block per stream
// ("[stdout]\n..."), the trailing expression's value ("[result]\n..."), each figure
// as image content (PNG), and a last "[status] ..." block that says how it ended and
// what to do about it, with [truncated], [redacted] and [warning] lines. Every
// status but ok sets isError; a blocked run is one block listing the violations.
// A stream longer than MaxInlineOutput is shown as its head and tail, and the whole
// of it is kept (per client, up to MaxKeptOutputs) as the resource
// moat://outputs/{n}/{stream}, linked from the result. file_download returns text,
// an image or an embedded blob when small, else a link to the resource
// moat://sessions/{id}/files/{path} with the file's size and, for text, its start.
// Tool errors (bad arguments, unknown sessions, quotas, lost sessions) are results
// with isError and one sentence saying what to do next (message); moat's own
// failures are logged with an id the model is given, never their text.
//
// # Clients and their sessions
//
// A client is one MCP session: a stdio connection, or an Mcp-Session-Id on HTTP.
// Each client creates its sandbox sessions under an engine owner of its own
// ("<principal>/mcp/<random>"), so the engine's store keeps every other client —
// of the same principal too — from seeing or using them: another client's session
// id is "no such session". The principal's session quota is counted across all its
// clients and its HTTP API sessions (sessionSlots).
//
// When a client's MCP session ends (stdio EOF; HTTP DELETE or SessionTimeout idle)
// its sandbox sessions are destroyed, after Options.Grace if set (moat serve:
// DefaultGrace). Within the grace, another client of the same principal that calls
// one of those session ids takes it over: that is how an agent host that lost its
// connection goes on. Ids are 128 random bits, so only the client that was given
// one can do that. Close destroys everything at once.
//
// # HTTP
//
// Handler serves the streamable HTTP transport (stateful: MCP sessions have ids)
// behind the gate: a request without a valid API token is 401 with the API's JSON
// error body; the MCP session is bound to the principal that opened it (the SDK's
// session-user check, fed by auth.RequireBearerToken), so another key's requests
// for it are 403; the SDK's DNS-rebinding protection stays on and cross-origin
// browser requests are refused (http.CrossOriginProtection). Executions take a slot
// of the principal's concurrency and rate quotas, as on the API.
//
// # Stdio
//
// ServeStdio reads one JSON-RPC message per line (lineTransport). Unlike the SDK's
// stdio transport, which ends the session at the first line it cannot decode, a
// malformed line — not JSON, a batch, not a JSON-RPC message, longer than
// MaxLineBytes — is answered with a JSON-RPC error (-32700 or -32600, with the
// line's id when it has one) and the session goes on. At the end of the input the
// calls already read are answered before the session ends.
//
// # Logging
//
// One record per tool call (tool, principal, session id, isError, duration and a
// request id). Code, file contents, environment values and tokens are never logged.
// The engine's audit records name the caller: the principal (not the client's
// owner name), front end "mcp", the same request id, and on HTTP the client's
// address, which Handler passes to the tools in a header it sets itself.
package mcp
