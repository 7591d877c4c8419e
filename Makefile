# moat: `make build` builds ./moat; `make test` installs what the tests need and runs
# every test (unit, kernel and integration; root required for the last two).
GO ?= go
export CGO_ENABLED = 0

.PHONY: build test unit bench lint backends
build:
	$(GO) build -trimpath -o moat ./cmd/moat

test:
	./scripts/test

unit:
	$(GO) test ./...

bench: build
	./moat bench

lint:
	./scripts/lint

# Docker, runsc and the debootstrapped test image (root; scripts/test runs it too).
backends:
	./scripts/backends
