package api

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/engine"
)

// The OpenAPI document, as far as the tests read it.
type oaDoc struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

type oaOperation struct {
	OperationID string            `json:"operationId"`
	Security    *[]map[string]any `json:"security"`
	RequestBody *struct {
		Content map[string]struct {
			Example json.RawMessage `json:"example"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Example json.RawMessage `json:"example"`
		} `json:"content"`
	} `json:"responses"`
}

func loadDoc(t *testing.T) oaDoc {
	t.Helper()
	var d oaDoc
	if err := json.Unmarshal(openapiDoc, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(d.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", d.OpenAPI)
	}
	return d
}

// docPath turns a mux pattern's path into an OpenAPI path template.
func docPath(p string) string { return strings.ReplaceAll(p, "...}", "}") }

func operations(t *testing.T, d oaDoc) map[string]oaOperation {
	t.Helper()
	ops := map[string]oaOperation{}
	for path, item := range d.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			var op oaOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			ops[strings.ToUpper(method)+" "+path] = op
		}
	}
	return ops
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	d := loadDoc(t)
	ops := operations(t, d)
	var inRoutes, inDoc []string
	for _, rt := range routes {
		key := rt.method + " " + docPath(rt.path)
		inRoutes = append(inRoutes, key)
		op, ok := ops[key]
		if !ok {
			continue
		}
		public := op.Security != nil && len(*op.Security) == 0
		if public == rt.auth {
			t.Errorf("%s: the document says public=%v, the route auth=%v", key, public, rt.auth)
		}
		if _, ok := op.Responses["401"]; rt.auth && !ok {
			t.Errorf("%s: no 401 response documented", key)
		}
	}
	for key := range ops {
		inDoc = append(inDoc, key)
	}
	sort.Strings(inRoutes)
	sort.Strings(inDoc)
	if !slices.Equal(inRoutes, inDoc) {
		t.Fatalf("routes and openapi.json differ:\nroutes: %v\ndoc:    %v", inRoutes, inDoc)
	}
}

// successTypes are the Go types of each operation's 2xx JSON bodies.
var successTypes = map[string]func() any{
	"health":         func() any { return new(Health) },
	"execute":        func() any { return new(box.Result) },
	"sessionExecute": func() any { return new(box.Result) },
	"createSession":  func() any { return new(engine.SessionInfo) },
	"getSession":     func() any { return new(engine.SessionInfo) },
	"listSessions":   func() any { return new(SessionList) },
	"listFiles":      func() any { return new(FileList) },
	"putFile":        func() any { return new(PutFileResponse) },
	"openapi":        nil,
	"getFile":        nil,
	"deleteSession":  nil,
	"removeFile":     nil,
	"audit":          func() any { return new(audit.Page) },
	"metrics":        nil,
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func TestOpenAPIExamplesDecode(t *testing.T) {
	d := loadDoc(t)
	for key, op := range operations(t, d) {
		mk, known := successTypes[op.OperationID]
		if !known {
			t.Errorf("%s: operationId %q has no type in successTypes", key, op.OperationID)
		}
		for status, resp := range op.Responses {
			code, _ := strconv.Atoi(status)
			ex := resp.Content["application/json"].Example
			if ex == nil {
				continue
			}
			if code >= 400 {
				var b errorBody
				if err := strictDecode(ex, &b); err != nil {
					t.Errorf("%s %s: error example: %v", key, status, err)
					continue
				}
				if want, ok := codeStatus[b.Error.Code]; !ok || want != code {
					t.Errorf("%s %s: example code %q has status %d", key, status, b.Error.Code, want)
				}
				continue
			}
			if mk == nil {
				t.Errorf("%s %s: example for an operation without a body type", key, status)
				continue
			}
			if err := strictDecode(ex, mk()); err != nil {
				t.Errorf("%s %s: example does not decode: %v", key, status, err)
			}
		}
	}
}

// TestOpenAPIRequestExamples sends every request example to the server: each must
// be accepted.
func TestOpenAPIRequestExamples(t *testing.T) {
	d := loadDoc(t)
	for key, op := range operations(t, d) {
		if op.RequestBody == nil {
			continue
		}
		ex := op.RequestBody.Content["application/json"].Example
		if ex == nil {
			continue
		}
		method, path, _ := strings.Cut(key, " ")
		target := strings.ReplaceAll(path, "{id}", "s1")
		f := newFixture(t)
		w := f.do(t, method, target, bytes.NewReader(ex), "Content-Type", "application/json")
		if w.Code >= 300 {
			t.Errorf("%s: example request refused: %d %s", key, w.Code, w.Body)
		}
	}
}

func TestOpenAPIErrorCodes(t *testing.T) {
	d := loadDoc(t)
	enum := d.Components.Schemas["Error"].Properties["error"].Properties["code"].Enum
	// Every Code* constant of errors.go, found by parsing it.
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	ast.Inspect(file, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if ok && strings.HasPrefix(vs.Names[0].Name, "Code") {
			s, _ := strconv.Unquote(vs.Values[0].(*ast.BasicLit).Value)
			consts = append(consts, s)
		}
		return true
	})
	sort.Strings(enum)
	sort.Strings(consts)
	if !slices.Equal(enum, consts) {
		t.Fatalf("error codes in openapi.json %v, in errors.go %v", enum, consts)
	}
	for _, c := range consts {
		if _, ok := codeStatus[c]; !ok {
			t.Errorf("code %s has no status in codeStatus", c)
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	f := newFixture(t)
	w := f.do(t, "GET", "/v1/openapi.json", nil)
	if w.Code != 200 || !bytes.Equal(w.Body.Bytes(), openapiDoc) || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
}
