package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A server of one's own: moat loadtest and moat bench start `moat serve` as a child
// on a free loopback port, with a temporary config and data directory and one API
// key passed in the environment, and stop it when they are done.
const (
	ownListenWait    = 30 * time.Second // for the server to listen
	ownStopWait      = 60 * time.Second // for the server to exit after SIGTERM
	ownKeyEnv        = "MOAT_OWN_SERVER_KEY"
	ownLogKeep       = 64 << 10 // bytes of the server's log kept for a failure
	ownLogProblems   = 5        // warnings and errors of the server's log kept
	ownMinConcurrent = 64       // the principal's quotas are at least this
)

// ownServerOptions say how to start an own server.
type ownServerOptions struct {
	// name is the command ("moat loadtest"): it starts messages and names the temp dir.
	name string
	// principal holds the server's one API key. Its quotas allow concurrent
	// executions and as many sessions at once (at least ownMinConcurrent), and its
	// rate is in effect unlimited.
	principal  string
	concurrent int
	// pool, when set, is the server.pool mapping in YAML flow style ("{size: 0}").
	pool string
	// profiles, when set, is the config's top-level profiles block, verbatim; the
	// principal may pick any profile it names.
	profiles string
	// allowProfiles are the profiles the principal may pick besides its default.
	allowProfiles []string
	// backend, when set, is the server's --backend.
	backend string
}

// ownServer is a moat serve started by startOwnServer.
type ownServer struct {
	dir    string // temp dir: config and data dir
	url    string
	key    string
	pid    int
	cmd    *exec.Cmd
	log    *serverLog
	exited chan struct{}
}

// startOwnServer starts moat serve as o says and waits until it listens. The caller
// must stop and remove it.
func startOwnServer(ctx context.Context, o ownServerOptions, stderr io.Writer) (*ownServer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", strings.ReplaceAll(o.name, " ", "-")+"-")
	if err != nil {
		return nil, err
	}
	s := &ownServer{dir: dir, log: &serverLog{}, exited: make(chan struct{})}
	var b [24]byte
	_, _ = rand.Read(b[:])
	s.key = hex.EncodeToString(b[:])
	cfgPath := filepath.Join(dir, "moat.yaml")
	if err := os.WriteFile(cfgPath, []byte(o.config()), 0o600); err != nil {
		s.remove()
		return nil, err
	}
	args := []string{"serve", "--config", cfgPath, "--data-dir", filepath.Join(dir, "data")}
	if o.backend != "" {
		args = append(args, "--backend", o.backend)
	}
	s.cmd = exec.Command(self, args...)
	s.cmd.Env = append(os.Environ(), ownKeyEnv+"="+s.key, "MOAT_TOKEN=")
	pr, pw, err := os.Pipe()
	if err != nil {
		s.remove()
		return nil, err
	}
	s.cmd.Stderr = pw
	if err := s.cmd.Start(); err != nil {
		pw.Close()
		pr.Close()
		s.remove()
		return nil, fmt.Errorf("start moat serve: %w", err)
	}
	pw.Close()
	s.pid = s.cmd.Process.Pid
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if addr, ok := strings.CutPrefix(line, "moat: listening on "); ok {
				listening <- addr
				s.log.started()
			}
			s.log.add(line)
		}
		pr.Close()
	}()
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	select {
	case s.url = <-listening:
		fmt.Fprintf(stderr, "%s: started moat serve (pid %d) on %s\n", o.name, s.pid, s.url)
		return s, nil
	case <-s.exited:
		err = fmt.Errorf("moat serve exited before listening (%v):\n%s", s.cmd.ProcessState, s.log.tail())
	case <-time.After(ownListenWait):
		err = fmt.Errorf("moat serve did not listen within %v:\n%s", ownListenWait, s.log.tail())
	case <-ctx.Done():
		err = errors.New("interrupted")
	}
	s.stop()
	s.remove()
	return nil, err
}

// config is the server's config file.
func (o ownServerOptions) config() string {
	quota := max(ownMinConcurrent, o.concurrent)
	var b strings.Builder
	fmt.Fprintf(&b, `server:
  listen: 127.0.0.1:0
  shutdown_grace: 30s
  sessions:
    max_total: %d
  api_keys:
    - principal: %s
      key_env: %s
      quotas:
        concurrent: %d
        sessions: %d
        rate: 100000/s
`, quota, o.principal, ownKeyEnv, quota, quota)
	if len(o.allowProfiles) > 0 {
		fmt.Fprintf(&b, "      profiles: [%s]\n", strings.Join(o.allowProfiles, ", "))
	}
	if o.pool != "" {
		fmt.Fprintf(&b, "  pool: %s\n", o.pool)
	}
	if o.profiles != "" {
		b.WriteString(o.profiles)
	}
	return b.String()
}

// stop sends SIGTERM, waits for the server to exit (SIGKILL after ownStopWait) and
// returns its exit status, -1 when it had to be killed or died of a signal.
func (s *ownServer) stop() int {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(ownStopWait):
		_ = s.cmd.Process.Kill()
		<-s.exited
		return -1
	}
	return s.cmd.ProcessState.ExitCode()
}

// remove deletes the temp dir (config and data dir).
func (s *ownServer) remove() { _ = os.RemoveAll(s.dir) }

// serverLog keeps the tail of an own server's log, and its warnings and errors once
// it listens.
type serverLog struct {
	mu        sync.Mutex
	buf       []byte
	listening bool
	first     []string // the first warnings and errors
	count     int      // all of them
}

func (l *serverLog) started() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.listening = true
}

func (l *serverLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, line...)
	l.buf = append(l.buf, '\n')
	if len(l.buf) > ownLogKeep {
		l.buf = slices.Clone(l.buf[len(l.buf)-ownLogKeep:])
	}
	if l.listening && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
		l.count++
		if len(l.first) < ownLogProblems {
			l.first = append(l.first, line)
		}
	}
}

func (l *serverLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

func (l *serverLog) problems() ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.first), l.count
}
