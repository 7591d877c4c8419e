// Package engine is moat's pipeline. Every execution, from any front end, passes the
// same stages in order, and the code here keeps them visible:
//
//	gate    who is asking, may they, how much     (front ends, later issues)
//	policy  language rules of the profile          shell: checked here, before any box;
//	                                               python: the runner in the box checks
//	                                               the AST first, then enforces audit hooks
//	box     OS isolation, limits                   box.Backend
//	filter  redaction, caps, error sanitizing      filter.Redactor on the live streams
//	audit   the record of what ran, and metrics    audit.go: one record per execution,
//	                                               session event; timings per stage
//
// The box is the security boundary; policy is defence in depth and the source of clear,
// early messages. A blocked execution returns status "blocked" with its violations, and
// blocked code never starts.
package engine
