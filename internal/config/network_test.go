package config

import (
	"testing"

	"github.com/moat-sandbox/moat/internal/egress"
)

func TestNetworkErrors(t *testing.T) {
	tests := []parseErrCase{
		{"unknown mode", "profiles:\n  p:\n    network: {mode: wide}\n", `m.yaml:3: profiles.p.network.mode: unknown network mode "wide" (want none, allowlist or open)`},
		{"open without consent", "profiles:\n  p:\n    network: {mode: open}\n", `m.yaml:3: profiles.p.network.mode: network mode open needs network.allow_open: true in the config`},
		{"allowlist without destinations", "profiles:\n  p:\n    network: {mode: allowlist}\n", `m.yaml:3: profiles.p.network.allow: network mode allowlist with no destinations reaches nothing`},
		{"allow without a mode", "profiles:\n  p:\n    network:\n      allow: [pypi.org]\n", `m.yaml:3: profiles.p.network.mode: allow and secrets have no effect with network mode none`},
		{"bad destination", "profiles:\n  p:\n    network:\n      mode: allowlist\n      allow: [pypi.org, \"https://x.org/\"]\n", `m.yaml:5: profiles.p.network.allow[1]:`},
		{"loopback without a port", "profiles:\n  p:\n    network:\n      mode: allowlist\n      allow: [127.0.0.1]\n", `m.yaml:5: profiles.p.network.allow[0]: bad allowlist item "127.0.0.1": 127.0.0.1 is a loopback address: name it with its port`},
		{"secret without hosts", "profiles:\n  p:\n    network:\n      mode: allowlist\n      allow: [x.org]\n      secrets:\n        - {env: TOKEN, from_env: MOAT_TOKEN}\n", `m.yaml:7: profiles.p.network.secrets[0].hosts: a secret needs the hosts that may receive it`},
		{"secret with a bad name", "profiles:\n  p:\n    network:\n      mode: allowlist\n      allow: [x.org]\n      secrets:\n        - {env: 1TOKEN, from_env: MOAT_TOKEN, hosts: [x.org]}\n", `m.yaml:7: profiles.p.network.secrets[0].env: invalid variable name "1TOKEN"`},
		{"secret twice", "profiles:\n  p:\n    network:\n      mode: allowlist\n      allow: [x.org]\n      secrets:\n        - {env: T, from_env: A, hosts: [x.org]}\n        - {env: T, from_env: B, hosts: [x.org]}\n", `m.yaml:8: profiles.p.network.secrets[1].env: secret T is given twice`},
		{"bad byte limit", "profiles:\n  p:\n    network:\n      mode: allowlist\n      allow: [x.org]\n      limits: {bytes_in: lots}\n", `m.yaml:6: profiles.p.network.limits.bytes_in: invalid size "lots"`},
		{"bad hosts address", "network:\n  hosts:\n    db.example: [not-an-ip]\n", `m.yaml:3: network.hosts.db.example[0]: invalid IP address "not-an-ip"`},
		{"relative upstream ca", "network:\n  upstream_ca: ca.pem\n", `m.yaml:2: network.upstream_ca: must be an absolute path`},
	}
	checkParseErrors(t, tests)
}

// TestNetworkInherits: a profile's network comes from the one it extends, and a
// child's fields replace the parent's one by one.
func TestNetworkInherits(t *testing.T) {
	c := mustParse(t, `network:
  allow_open: true
profiles:
  base:
    network:
      mode: allowlist
      allow: [pypi.org, "files.pythonhosted.org:443"]
      secrets:
        - {env: TOKEN, from_env: MOAT_TOKEN, hosts: ["pypi.org:443"]}
      limits: {connections: 10, bytes_in: 1MiB}
  child:
    extends: base
    network:
      limits: {connections: 3}
  wide:
    extends: base
    network: {mode: open}
`)
	p, err := c.ResolveProfile("child")
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.ResolveNetwork(p.Network)
	if err != nil {
		t.Fatal(err)
	}
	if n.Mode != NetworkAllowlist || len(n.Allow) != 2 || n.Allow[1] != (egress.Rule{Host: "files.pythonhosted.org", Port: 443}) {
		t.Errorf("child's network: %+v", n)
	}
	if n.Limits != (egress.Limits{Conns: 3, BytesIn: 1 << 20}) {
		t.Errorf("child's limits: %+v", n.Limits)
	}
	if len(n.Secrets) != 1 || n.Secrets[0].Env != "TOKEN" || n.Secrets[0].Hosts[0] != (egress.Rule{Host: "pypi.org", Port: 443}) {
		t.Errorf("child's secrets: %+v", n.Secrets)
	}
	p, _ = c.ResolveProfile("wide")
	if n, _ := c.ResolveNetwork(p.Network); n.Mode != NetworkOpen {
		t.Errorf("wide's mode: %q", n.Mode)
	}
	p, _ = c.ResolveProfile("default")
	if n, _ := c.ResolveNetwork(p.Network); n.Mode != NetworkNone || len(n.Allow) != 0 {
		t.Errorf("the default profile has a network: %+v", n)
	}
}
