package docker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConnectUnreachable(t *testing.T) {
	host := "unix://" + filepath.Join(t.TempDir(), "no-docker.sock")
	start := time.Now()
	e, err := Connect(context.Background(), host)
	if err == nil {
		e.Close()
		t.Fatal("Connect to a missing socket succeeded")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Connect took %v to fail, want under a second", d)
	}
	if !errors.Is(err, ErrDaemonUnreachable) {
		t.Errorf("error does not wrap ErrDaemonUnreachable: %v", err)
	}
	for _, want := range []string{
		"docker backend: cannot reach the Docker daemon at " + host,
		"is dockerd running?",
		"install docker.io and start it",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestConnectBadHost(t *testing.T) {
	if _, err := Connect(context.Background(), "not a host://x"); err == nil {
		t.Fatal("Connect accepted a malformed host")
	}
}

func TestImageNotFoundText(t *testing.T) {
	err := imageNotFound("moat-test-python:bookworm")
	if !errors.Is(err, ErrImageNotFound) {
		t.Errorf("does not wrap ErrImageNotFound: %v", err)
	}
	want := "image moat-test-python:bookworm not found: build it with scripts/backends, or docker pull python:3.12-slim where a registry is reachable"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks %q", err, want)
	}
}
