package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/internal/audit"
	"github.com/moat-sandbox/moat/internal/box"
)

const netConfig = `network:
  allow_open: true
profiles:
  net:
    extends: open
    network:
      mode: allowlist
      allow: ["*.example.com", "pypi.org:443", "127.0.0.1:8080"]
      secrets:
        - {env: TOKEN, from_env: MOAT_REAL_TOKEN, hosts: ["pypi.org:443"]}
  wide:
    extends: open
    network: {mode: open}
`

// TestNetworkRequests: what a request may ask for, by front end, and what the box
// gets for it.
func TestNetworkRequests(t *testing.T) {
	api := Caller{FrontEnd: audit.FrontEndAPI}
	cli := Caller{FrontEnd: audit.FrontEndCLI}
	tests := []struct {
		profile, network string
		caller           Caller
		err              string // "" = allowed
		egress           bool
	}{
		{"net", "", api, "", true},
		{"net", "none", api, "", false},
		{"net", "allow:a.example.com:443,b.c.example.com", api, "", true},
		{"net", "allow:*.a.example.com", api, "", true},
		{"net", "allow:pypi.org:443", api, "", true},
		{"net", "allow:pypi.org", api, "does not allow pypi.org", false},       // every port is more than 443
		{"net", "allow:example.com", api, "does not allow example.com", false}, // the wildcard is strictly below
		{"net", "allow:127.0.0.1:8081", api, "does not allow 127.0.0.1:8081", false},
		{"net", "allow:127.0.0.1:8081", cli, "", true}, // the operator may name any destination
		{"net", "open", api, "profile net does not allow it", false},
		{"net", "open", cli, "", true},
		{"wide", "open", api, "", true},
		{"wide", "allow:any.org:443", api, "", true},
		{"wide", "allow:10.0.0.1:80", api, "does not allow 10.0.0.1:80", false},
		{"default", "allow:pypi.org", api, "does not allow pypi.org", false},
		{"default", "", api, "", false},
		{"net", "allow:", cli, "network", false},
		{"net", "wide", cli, `network mode "wide" is not one of`, false},
	}
	for _, tc := range tests {
		rec := &recorder{res: box.Result{Status: box.StatusOK}}
		e := newTestEngine(t, netConfig, rec, "MOAT_REAL_TOKEN=real-value")
		req := &Request{Language: "bash", Code: []byte("true"), Profile: tc.profile, Network: tc.network, Caller: tc.caller}
		_, err := e.Execute(context.Background(), req)
		name := tc.profile + " " + tc.network + " " + tc.caller.FrontEnd
		if tc.err != "" {
			if err == nil || !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want a bad request containing %q", name, err, tc.err)
			}
			if rec.spec != nil {
				t.Errorf("%s: a box was made for a refused request", name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := rec.spec.Egress != nil; got != tc.egress || (rec.spec.Network == box.NetworkEgress) != tc.egress {
			t.Errorf("%s: egress %v (network %q), want %v", name, got, rec.spec.Network, tc.egress)
		}
		if !tc.egress {
			continue
		}
		env := strings.Join(rec.spec.Env, "\n")
		for _, want := range []string{"HTTPS_PROXY=" + box.EgressProxyURL, "SSL_CERT_FILE=" + CABundlePath} {
			if !strings.Contains(env, want) {
				t.Errorf("%s: env lacks %s:\n%s", name, want, env)
			}
		}
		if strings.Contains(env, "real-value") {
			t.Errorf("%s: the real secret is in the box's environment", name)
		}
		if tc.profile == "net" && !strings.Contains(env, "TOKEN=moat-secret-") {
			t.Errorf("%s: the secret's placeholder is missing:\n%s", name, env)
		}
		if !slices.ContainsFunc(rec.spec.Support, func(f box.SupportFile) bool {
			return f.Path == CABundlePath && strings.Contains(string(f.Data), "BEGIN CERTIFICATE")
		}) {
			t.Errorf("%s: no CA bundle in the box", name)
		}
	}
}

// TestNetworkSecretMissing: a profile whose secret is not in moat's environment
// refuses to run, saying which variable is missing (and never runs without it).
func TestNetworkSecretMissing(t *testing.T) {
	rec := &recorder{}
	e := newTestEngine(t, netConfig, rec)
	_, err := e.Execute(context.Background(), &Request{Language: "bash", Code: []byte("true"), Profile: "net"})
	if err == nil || !strings.Contains(err.Error(), "MOAT_REAL_TOKEN") || rec.spec != nil {
		t.Fatalf("err %v, spec %v", err, rec.spec)
	}
}

// TestNetworkSecretRedacted: should a secret's real value come back into a box's
// output (a host that echoes it), the filter redacts it.
func TestNetworkSecretRedacted(t *testing.T) {
	rec := &recorder{res: box.Result{Status: box.StatusOK}, output: "echoed: real-value-12345\n"}
	e := newTestEngine(t, netConfig, rec, "MOAT_REAL_TOKEN=real-value-12345")
	res, err := e.Execute(context.Background(), &Request{Language: "bash", Code: []byte("true")})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.Stdout, "real-value-12345") || res.Redactions != 1 {
		t.Fatalf("stdout %q, %d redactions", res.Stdout, res.Redactions)
	}
}
