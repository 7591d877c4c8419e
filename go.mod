module github.com/moat-sandbox/moat

go 1.26.8

require (
	github.com/elastic/go-seccomp-bpf v1.6.0 // indirect
	github.com/landlock-lsm/go-landlock v0.11.0 // indirect
	github.com/moby/profiles/seccomp v0.2.4 // indirect
	github.com/opencontainers/runtime-spec v1.2.1 // indirect
	golang.org/x/net v0.41.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.77 // indirect
)
