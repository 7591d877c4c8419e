package mcp

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/moat-sandbox/moat/internal/box"
)

// Sizes of what a tool result carries inline. A model's context is precious: more
// than this goes into the client's output store (a resource) and the model sees the
// head and the tail.
const (
	// MaxInlineOutput bounds each of stdout, stderr and the result value in a tool
	// result; the head and tail are kept, each half of it.
	MaxInlineOutput = 16 << 10
	// MaxInlineText bounds a text file that file_download returns as text.
	MaxInlineText = 64 << 10
	// MaxInlineImage bounds an image file that file_download returns as an image.
	MaxInlineImage = 1 << 20
	// MaxInlineBlob bounds another file that file_download embeds (base64).
	MaxInlineBlob = 256 << 10
	// MaxResource bounds a file read through resources/read.
	MaxResource = 16 << 20
)

// resultContent turns an execution's result into a tool result: one text block per
// stream that has output, the trailing expression's value, each figure as an image,
// and a last block with the status and anything the model must know (truncation,
// redactions, warnings). Every status but ok sets isError. Streams longer than
// MaxInlineOutput are clipped to their head and tail; the whole text is kept in out
// and linked as a resource.
func resultContent(res *box.Result, out *outputs, inSession bool) *sdk.CallToolResult {
	tr := &sdk.CallToolResult{IsError: res.Status != box.StatusOK}
	if res.Status == box.StatusBlocked {
		var b strings.Builder
		b.WriteString("[blocked] the policy refused the code before it ran; nothing ran")
		if inSession {
			b.WriteString(" and the session is unchanged")
		}
		b.WriteString(":\n")
		for _, v := range res.Violations {
			if v.Line > 0 {
				fmt.Fprintf(&b, "- line %d: %s\n", v.Line, v.Detail)
			} else {
				fmt.Fprintf(&b, "- %s\n", v.Detail)
			}
		}
		b.WriteString("Rewrite the code without what is blocked; there is no way around the policy.")
		tr.Content = append(tr.Content, &sdk.TextContent{Text: b.String()})
		return tr
	}
	for _, s := range []struct{ name, text string }{{"stdout", res.Stdout}, {"stderr", res.Stderr}} {
		if s.text == "" {
			continue
		}
		tr.Content = append(tr.Content, out.inline(s.name, s.text)...)
	}
	if res.Result != nil {
		tr.Content = append(tr.Content, out.inline("result", *res.Result)...)
	}
	figures := 0
	for _, d := range res.Display {
		data, err := base64.StdEncoding.DecodeString(d.Data)
		if err != nil || !strings.HasPrefix(d.MIMEType, "image/") {
			continue
		}
		tr.Content = append(tr.Content, &sdk.ImageContent{MIMEType: d.MIMEType, Data: data})
		figures++
	}
	tr.Content = append(tr.Content, &sdk.TextContent{Text: statusText(res, figures, inSession)})
	return tr
}

// statusText is the last block of an execution's result.
func statusText(res *box.Result, figures int, inSession bool) string {
	var b strings.Builder
	b.WriteString("[status] ")
	switch res.Status {
	case box.StatusOK:
		fmt.Fprintf(&b, "ok: exit code 0, %d ms", res.DurationMS)
	case box.StatusError:
		fmt.Fprintf(&b, "error: the code exited with status %d after %d ms", res.ExitCode, res.DurationMS)
	case box.StatusTimeout:
		fmt.Fprintf(&b, "timeout: the code was stopped at its time limit after %d ms", res.DurationMS)
		if inSession {
			b.WriteString(" (the session keeps what it held before the call, unless stderr says its state is lost)")
		}
		b.WriteString("; make it faster, or give a larger timeout_seconds")
	case box.StatusMemoryLimit:
		b.WriteString("memory_limit: the code was killed at the memory limit; use less memory (process data in chunks)")
	case box.StatusOutputLimit:
		b.WriteString("output_limit: the code was killed for flooding output; print less, or write to a file")
	case box.StatusKilled:
		fmt.Fprintf(&b, "killed: the code was ended by signal %d", res.ExitCode-128)
	case box.StatusInternalError:
		b.WriteString("internal_error: moat failed to run the code")
		if res.Error != "" {
			b.WriteString(": " + res.Error)
		}
	default:
		fmt.Fprintf(&b, "%s (exit code %d)", res.Status, res.ExitCode)
	}
	if res.Stdout == "" && res.Stderr == "" && res.Result == nil && figures == 0 && res.Status == box.StatusOK {
		b.WriteString("; no output (print what you want to see")
		if inSession {
			b.WriteString(", or end the code with an expression")
		}
		b.WriteString(")")
	}
	if figures > 0 {
		fmt.Fprintf(&b, "; %d figure(s) attached as images", figures)
	}
	if res.Truncated {
		b.WriteString("\n[truncated] the output went past the box's output limit: its head and tail are kept, the middle was dropped")
	}
	if res.Redactions > 0 {
		fmt.Fprintf(&b, "\n[redacted] %d secret(s) in the output were replaced by [REDACTED:...] markers", res.Redactions)
	}
	if eg := res.Egress; eg != nil && eg.Refused > 0 {
		fmt.Fprintf(&b, "\n[network] %d destination(s) refused by moat's egress proxy; only the profile's destinations are reachable:", eg.Refused)
		for _, r := range eg.Refusals {
			fmt.Fprintf(&b, "\n- %s (%s): %s", r.Dest, r.Via, r.Reason)
		}
	}
	for _, w := range res.Warnings {
		b.WriteString("\n[warning] " + w)
	}
	return b.String()
}

// clip returns s cut to its first and last max/2 bytes (at rune boundaries) around a
// marker that says how much was left out and where the rest is; s itself when it
// fits.
func clip(s string, max int, where string) (string, bool) {
	if len(s) <= max {
		return s, false
	}
	head, tail := s[:max/2], s[len(s)-max/2:]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	for len(tail) > 0 && !utf8.ValidString(tail) {
		tail = tail[1:]
	}
	elided := len(s) - len(head) - len(tail)
	return fmt.Sprintf("%s\n[... %d bytes left out of %d; %s ...]\n%s", head, elided, len(s), where, tail), true
}
