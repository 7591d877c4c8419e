// Package filter is the output stage of moat's pipeline: it redacts secrets from what
// untrusted code prints before the text goes back to a caller (often an LLM), and it
// sanitizes moat's own error texts before API users see them.
//
//	red := filter.New(filter.DefaultRules(), []string{os.Getenv("OPENAI_API_KEY")})
//	out, n := red.Redact(stdout)  // "key: [REDACTED:openai_key]", 1
//
//	s := red.Stream(w)            // the same, on a live stream
//	io.Copy(s, boxStdout)
//	s.Close()
//
// # Rules and secrets
//
// A Rule is a named regular expression (DefaultRules, OptInRules, or NewRule for the
// config's custom rules); every match becomes "[REDACTED:<name>]". Exact secrets (the
// values of moat's secret environment variables, tokens the server holds) are matched
// byte for byte and become "[REDACTED:secret]"; the longest of them sets the window
// (below) like a rule's MaxLen. Markers are written to the output, never searched
// again.
//
// # Overlaps and precedence
//
// Candidates are found independently for every secret and every rule. Candidates that
// overlap merge into one redaction covering all of them (too much rather than too
// little), counted once and named after the candidate that starts first; among those
// starting at the same byte, the longest; then exact secrets before rules; then rules
// in the order given to New. So an exact secret that is also a GitHub token reads
// [REDACTED:secret], and "sk-ant-..." (matched by anthropic_key only) reads
// [REDACTED:anthropic_key].
//
// # Frames: why Stream equals Redact
//
// A Redactor cuts its input into frames of step+window bytes: window is the longest
// MaxLen among its rules and secrets plus 64 bytes, step is max(16 KiB, 2*window).
// For each frame it finds every candidate, then decides how much of the frame is
// final: normally the first step bytes (ending just after a newline if one is near);
// if a match spans that point, the frame ends before the match, which the next frame
// then sees whole. The final bytes are written with their candidates replaced and the
// next frame starts where this one ended. Only the last frame of the input is shorter.
//
// Redact runs this machine over a string; Stream runs it over a buffer that it fills
// to exactly one frame before each step. Each step depends only on the frame's bytes
// and the state left by the previous step (the byte before the frame, an overflowing
// rule), never on how the bytes arrived, so the output and count are identical for
// every chunking, by construction. FuzzStreamEqualsRedact checks it.
//
// Guarantee: a match no longer than the window (so, every secret and every match
// within its rule's MaxLen) that starts before the frame's end point lies wholly in
// the frame, is found, and is redacted whole.
//
// # Overflow
//
// A match longer than its rule's MaxLen (an 8192-bit RSA key, a PEM block without
// its END line, a pathological token) can reach the end of a frame. Then the frame
// ends there, the match is redacted up to that point, and the next frame begins by
// redacting the rule's continuation (for private_key: more PEM body and the END line;
// for token rules: more token characters; for custom rules: up to the next white
// space), without a second marker. The continuation repeats frame after frame for as
// long as it lasts, so memory stays bounded and nothing of the secret is written.
// What is redacted is then decided by frames, which may redact a little more than the
// regular expression alone would; Redact and Stream still agree.
//
// A match, or chain of overlapping matches, that starts in the first quarter of a
// frame and spans its end point (so it is longer than half a step, 8 KiB or more)
// ends the frame at its end rather than its start; an exact secret straddling that
// end and the end of the frame is then seen only in part. This needs kilobytes of
// matches back to back, then a secret.
//
// # Custom rules
//
// Custom rules run over whole frames, so \b and (?m)^ see their real context inside a
// frame; at the start of a frame they see the start of a text. Frames end after a
// newline when one is near. NewRule refuses patterns that can match the empty string
// and patterns anchored to the whole text (\A, \z, ^ or $ without m).
//
// # Speed
//
// Go's regexp engine is linear in time, so no pattern can be made to backtrack
// exponentially; the filter keeps the whole pass linear too. Every built-in pattern
// starts with a literal (or, for email, contains '@' once). One pass over a frame, a
// table lookup per byte, finds where any of those literals occurs; a rule's regexp is
// then run only there, and only where the byte before is allowed ("task-" is never
// tried as the start of "sk-..."). A try that fails stops within a few dozen bytes,
// except for jwt, whose first run is skipped for every later "eyJ" inside it. So
// output made of near-misses costs a constant factor, not a square. Custom rules are
// run by the engine over each frame. BenchmarkRedact measures typical output.
//
// # Error texts
//
// SanitizeError removes host paths, internal addresses and Go stack traces from
// moat's own error texts (not from the program's output, which is the caller's).
package filter
