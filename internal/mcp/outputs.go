package mcp

import (
	"fmt"
	"sync"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxKeptOutputs bounds the bytes of long outputs one client's store keeps for
// resources/read; the oldest go first.
const MaxKeptOutputs = 16 << 20

// outputURIPrefix starts the URI of a kept output: moat://outputs/{n}/{stream}.
const outputURIPrefix = "moat://outputs/"

// outputs is one client's store of outputs too long to show inline. The model sees
// their head and tail and a link; the client (the agent host) can read the whole
// text with resources/read while it is kept.
type outputs struct {
	mu sync.Mutex
	// +checklocks:mu
	next int
	// +checklocks:mu
	items []keptOutput // oldest first
	// +checklocks:mu
	size int
}

type keptOutput struct {
	uri, text string
}

// inline returns the content blocks that show text, labelled with name: the text
// itself, or, past MaxInlineOutput, its head and tail and a link to the whole of it.
func (o *outputs) inline(name, text string) []sdk.Content {
	label := "[" + name + "]\n"
	if len(text) <= MaxInlineOutput {
		return []sdk.Content{&sdk.TextContent{Text: label + text}}
	}
	uri := o.keep(name, text)
	where := "the whole " + name + " is too long to keep; print less, or write it to a file in a session and read parts of it"
	if uri != "" {
		where = "the whole " + name + " is the resource " + uri + "; to look at it yourself, write it to a file in a session and read parts of it (head, tail, grep)"
	}
	clipped, _ := clip(text, MaxInlineOutput, where)
	out := []sdk.Content{&sdk.TextContent{Text: label + clipped}}
	if uri != "" {
		size := int64(len(text))
		out = append(out, &sdk.ResourceLink{URI: uri, Name: name, MIMEType: "text/plain", Size: &size,
			Description: fmt.Sprintf("the whole %s (%d bytes) of a run whose output was shown clipped", name, len(text))})
	}
	return out
}

// keep stores text and returns its URI, or "" when it cannot be kept (o is nil or
// text is larger than the whole store).
func (o *outputs) keep(name, text string) string {
	if o == nil || len(text) > MaxKeptOutputs {
		return ""
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.next++
	uri := fmt.Sprintf("%s%d/%s", outputURIPrefix, o.next, name)
	o.items = append(o.items, keptOutput{uri: uri, text: text})
	o.size += len(text)
	for o.size > MaxKeptOutputs {
		o.size -= len(o.items[0].text)
		o.items = o.items[1:]
	}
	return uri
}

// get returns the kept output at uri.
func (o *outputs) get(uri string) (string, bool) {
	if o == nil {
		return "", false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, it := range o.items {
		if it.uri == uri {
			return it.text, true
		}
	}
	return "", false
}

// clear drops everything kept.
func (o *outputs) clear() {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.items, o.size = nil, 0
}
