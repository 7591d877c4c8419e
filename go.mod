module github.com/moat-sandbox/moat

go 1.26.8

require (
	github.com/elastic/go-seccomp-bpf v1.6.0
	github.com/landlock-lsm/go-landlock v0.11.0
	github.com/moby/profiles/seccomp v0.2.4
	github.com/opencontainers/runtime-spec v1.2.1
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/net v0.41.0
	golang.org/x/sys v0.49.0
	mvdan.cc/sh/v3 v3.14.1
)

require kernel.org/pub/linux/libs/security/libcap/psx v1.2.77 // indirect
