package docker

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/box/container/contracttest"
	"github.com/moat-sandbox/moat/internal/box/native"
	"github.com/moat-sandbox/moat/internal/childproc"
)

// TestMain lets the test binary act as the box's agent and init: NewBackend
// bind-mounts this binary into each container, which runs it as MuxRole, which
// re-executes it as native.InitRole.
func TestMain(m *testing.M) {
	childproc.Dispatch()
	os.Exit(m.Run())
}

// These tests run boxes through NewBackend on the real dockerd, under runc and runsc,
// one at a time: the tests that look for leftovers count every container this
// process owns.

func newTestBackend(t *testing.T, rt string) (*native.Backend, *Engine) {
	t.Helper()
	e := requireEngine(t)
	requireRuntime(t, e, rt)
	b, err := NewBackend(context.Background(), Options{Image: TestImage, Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, ok := b.Starter.(io.Closer); ok {
			c.Close()
		}
	})
	return b, e
}

// forRuntimes runs f for runc and runsc.
func forRuntimes(t *testing.T, f func(t *testing.T, b *native.Backend, e *Engine, rt string)) {
	for _, rt := range runtimes {
		t.Run(runtimeName(rt), func(t *testing.T) {
			b, e := newTestBackend(t, rt)
			f(t, b, e, rt)
		})
	}
}

// ownContainers lists the moat containers this process owns, running or not.
func ownContainers(t *testing.T, e *Engine) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := e.cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", LabelBox+"=1").Add("label", LabelOwner+"="+CurrentOwner().String()),
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range list.Items {
		ids = append(ids, c.ID)
	}
	return ids
}

// TestContract runs the contract of container backends on docker boxes, under runc
// and runsc; the boxes are the containers this process owns.
func TestContract(t *testing.T) {
	forRuntimes(t, func(t *testing.T, b *native.Backend, e *Engine, rt string) {
		contracttest.All(t, &contracttest.Harness{
			Backend:      b,
			Name:         "docker",
			Isolation:    []string{"docker", "runtime_" + runtimeName(rt)},
			GVisorKernel: rt == RuntimeGVisor,
			Boxes:        func(t *testing.T) []string { return ownContainers(t, e) },
			Kill: func(t *testing.T, id string) {
				if err := e.Kill(context.Background(), id); err != nil {
					t.Fatal(err)
				}
			},
		})
	})
}

func TestNewBackendErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := NewBackend(ctx, Options{}); err == nil || !strings.Contains(err.Error(), "no image configured") {
		t.Errorf("no image: %v", err)
	}
	host := "unix://" + filepath.Join(t.TempDir(), "no-docker.sock")
	if _, err := NewBackend(ctx, Options{Host: host, Image: TestImage}); !errors.Is(err, ErrDaemonUnreachable) {
		t.Errorf("no daemon: %v", err)
	}
	requireEngine(t)
	_, err := NewBackend(ctx, Options{Image: "moat-test-missing:never"})
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "moat-test-missing:never") || !strings.Contains(err.Error(), "scripts/backends") {
		t.Errorf("missing image: %v", err)
	}
	_, err = NewBackend(ctx, Options{Image: TestImage, Images: map[string]string{"bash": "moat-test-missing:bash"}})
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), "bash's image") || !strings.Contains(err.Error(), "moat-test-missing:bash") {
		t.Errorf("missing image of a language: %v", err)
	}
	_, err = NewBackend(ctx, Options{Image: TestImage, Runtime: "moat-no-such-runtime"})
	if err == nil || !strings.Contains(err.Error(), "runtime moat-no-such-runtime is not registered with dockerd") || !strings.Contains(err.Error(), "see scripts/backends") {
		t.Errorf("unknown runtime: %v", err)
	}
}

// TestImagesByLanguage: a language's image replaces the default for that language's
// boxes only. The test tags the test image under a second name for bash.
func TestImagesByLanguage(t *testing.T) {
	e := requireEngine(t)
	ctx := context.Background()
	const bashImage = "moat-test-bash:images-by-language"
	if _, err := e.cli.ImageTag(ctx, client.ImageTagOptions{Source: TestImage, Target: bashImage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.cli.ImageRemove(context.Background(), bashImage, client.ImageRemoveOptions{}) })
	b, err := NewBackend(ctx, Options{Image: TestImage, Images: map[string]string{"bash": bashImage}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Starter.(io.Closer).Close()
	for lang, want := range map[string]string{"bash": bashImage, "python": TestImage} {
		code := map[string]string{"bash": "echo up; sleep 30", "python": "import time; print('up', flush=True); time.sleep(30)"}[lang]
		done := make(chan error, 1)
		runCtx, cancel := context.WithCancel(ctx)
		go func() {
			_, err := b.Run(runCtx, &box.Spec{Language: lang, Code: []byte(code), Limits: box.Limits{Timeout: time.Minute}})
			done <- err
		}()
		var image string
		for deadline := time.Now().Add(30 * time.Second); image == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for _, id := range ownContainers(t, e) {
				res, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
				if err == nil && res.Container.Config != nil {
					image = res.Container.Config.Image
				}
			}
		}
		cancel()
		<-done
		if image != want {
			t.Errorf("a %s box ran image %q, want %q", lang, image, want)
		}
	}
}
