package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moat-sandbox/moat/internal/api"
	"github.com/moat-sandbox/moat/internal/box"
	"github.com/moat-sandbox/moat/internal/client"
	"github.com/moat-sandbox/moat/internal/config"
)

// The servers moat bench starts: one with the warm pool on, as below, and one with
// it off. The pool keeps boxes for the default profile and for a profile that
// preloads pandas.
const (
	benchPreloadProfile = "bench-pandas"
	benchPoolSize       = 2
	benchPoolYAML       = "{size: 2, refills: 2, warm: [default, " + benchPreloadProfile + "]}"
	benchPoolPlainYAML  = "{size: 2, refills: 2, warm: [default]}"
	benchPoolDesc       = "size 2 per profile, 2 refills at once, warm for profiles default and " + benchPreloadProfile
	benchProfilesYAML   = `profiles:
  ` + benchPreloadProfile + `:
    extends: default
    preload: [pandas]
`
	benchPrincipal = "bench"
)

// benchServers are the servers of one run; a server that failed to start fails its
// cases with its error.
type benchServers struct {
	ctx                context.Context
	pandas             bool // the pool preloads pandas for benchPreloadProfile
	pool, nopool       *ownServer
	poolErr, nopoolErr error
	poolC, nopoolC     *client.Client
	stopped            bool

	// docker is the server on the docker backend with the warm pool on, for the
	// print(1) table only (stopDocker stops it after that table). dockerSkip says
	// why it was not started: the backend is not available here.
	docker     *ownServer
	dockerErr  error
	dockerC    *client.Client
	dockerSkip string

	// The pooled servers' pool counters after their last pooled run, and the hits
	// and misses of each pooled case's measured runs; used by the measuring
	// goroutine only.
	last         map[*ownServer]poolState
	hits, misses map[string]int64
	countErr     error // the first failure to read the counters
}

// startBenchServers starts both servers; failures are kept for the cases. Without
// pandas, the pool has no profile preloading it.
func startBenchServers(ctx context.Context, pandas bool, stderr io.Writer, rep *benchReport) *benchServers {
	s := &benchServers{ctx: ctx, pandas: pandas, hits: map[string]int64{}, misses: map[string]int64{}}
	s.pool, s.poolErr = startOwnServer(ctx, s.poolOptions(), stderr)
	if s.poolErr != nil {
		rep.failed("start the server with the warm pool: %v", s.poolErr)
	} else {
		s.poolC = client.New(s.pool.url, s.pool.key)
	}
	s.nopool, s.nopoolErr = startOwnServer(ctx, ownServerOptions{
		name: "moat bench", principal: benchPrincipal, concurrent: 8, pool: "{size: 0}",
	}, stderr)
	if s.nopoolErr != nil {
		rep.failed("start the server without a pool: %v", s.nopoolErr)
	} else {
		s.nopoolC = client.New(s.nopool.url, s.nopool.key)
	}
	if err := backendAvailable(ctx, config.BackendDocker); err != nil {
		s.dockerSkip = err.Error()
		return s
	}
	s.docker, s.dockerErr = startOwnServer(ctx, ownServerOptions{
		name: "moat bench", principal: benchPrincipal, concurrent: 8, pool: benchPoolPlainYAML, backend: config.BackendDocker,
	}, stderr)
	if s.dockerErr != nil {
		rep.failed("start the server on the docker backend with the warm pool: %v", s.dockerErr)
	} else {
		s.dockerC = client.New(s.docker.url, s.docker.key)
	}
	return s
}

// stopDocker stops the server on the docker backend (once) and removes its directory.
func (s *benchServers) stopDocker() {
	if s.docker != nil {
		s.docker.stop()
		s.docker.remove()
		s.docker = nil
	}
}

// poolOptions configure the server with the warm pool.
func (s *benchServers) poolOptions() ownServerOptions {
	o := ownServerOptions{name: "moat bench", principal: benchPrincipal, concurrent: 8, pool: benchPoolYAML,
		profiles: benchProfilesYAML, allowProfiles: []string{benchPreloadProfile}}
	if !s.pandas {
		o.pool, o.profiles, o.allowProfiles = benchPoolPlainYAML, "", nil
	}
	return o
}

// warmBoxes is how many boxes the full pool holds.
func (s *benchServers) warmBoxes() int {
	if s.pandas {
		return 2 * benchPoolSize
	}
	return benchPoolSize
}

// stop stops the servers (once) and removes their directories.
func (s *benchServers) stop() {
	if s.stopped {
		return
	}
	s.stopped = true
	s.stopDocker()
	for _, o := range []*ownServer{s.pool, s.nopool} {
		if o != nil {
			o.stop()
			o.remove()
		}
	}
}

// printCases are the API's print(1) cases: warm pool, pool off, a session call, and
// the warm pool of docker boxes, or why that one is skipped.
func (s *benchServers) printCases() (cases []benchCase, skipped []benchRow) {
	pooled := s.pooled(s.executeCase("api_pool", "API execute, warm pool", s.poolC, s.poolErr, "", "print(1)", "1\n"), s.pool)
	cold := s.executeCase("api_nopool", "API execute, pool off", s.nopoolC, s.nopoolErr, "", "print(1)", "1\n")
	cases = []benchCase{pooled, cold, s.sessionCase()}
	const dockerID, dockerName = "api_pool_docker", "API execute, warm pool, `moat serve --backend docker`"
	if s.dockerSkip != "" {
		return cases, []benchRow{{ID: dockerID, Name: dockerName, Skipped: s.dockerSkip}}
	}
	docker := s.executeCase(dockerID, dockerName, s.dockerC, s.dockerErr, "", "print(1)", "1\n")
	return append(cases, s.pooled(docker, s.docker)), nil
}

// pandasCases are the API's pandas cases, both served by the warm pool.
func (s *benchServers) pandasCases() []benchCase {
	plain := s.pooled(s.executeCase("pandas_pool", "API execute, warm pool, no preload", s.poolC, s.poolErr, "", benchPandasCode, benchPandasOut), s.pool)
	pre := s.pooled(s.executeCase("pandas_preload", "API execute, warm pool, profile preloading pandas", s.poolC, s.poolErr,
		benchPreloadProfile, benchPandasCode, benchPandasOut), s.pool)
	return []benchCase{plain, pre}
}

// executeCase is POST /v1/execute of code, which must print want.
func (s *benchServers) executeCase(id, name string, c *client.Client, startErr error, profile, code, want string) benchCase {
	if startErr != nil {
		return failCase(id, name, fmt.Errorf("the server did not start: %w", startErr))
	}
	return benchCase{id: id, name: name, run: func() error {
		ctx, cancel := context.WithTimeout(s.ctx, benchCallTimeout)
		defer cancel()
		res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: code, Profile: profile}, nil)
		if err != nil {
			return err
		}
		if res.Status != box.StatusOK || res.Stdout != want {
			return fmt.Errorf("%s", describeResult(res, want))
		}
		return nil
	}}
}

// sessionCase creates one session on the pooled server; each run is a call of 1+1.
func (s *benchServers) sessionCase() benchCase {
	const id, name = "session", "API session execute `1+1` (one session, a call right after another)"
	if s.poolErr != nil {
		return failCase(id, name, fmt.Errorf("the server did not start: %w", s.poolErr))
	}
	ctx, cancel := context.WithTimeout(s.ctx, benchCallTimeout)
	defer cancel()
	info, err := s.poolC.CreateSession(ctx, &api.SessionRequest{Language: "python"})
	if err != nil {
		return failCase(id, name, fmt.Errorf("create the session: %w", err))
	}
	call := func() error {
		ctx, cancel := context.WithTimeout(s.ctx, benchCallTimeout)
		defer cancel()
		res, err := s.poolC.SessionExecute(ctx, info.ID, &api.CallRequest{Code: "1+1"}, nil)
		if err != nil {
			return err
		}
		if res.Status != box.StatusOK || res.Result == nil || *res.Result != "2" {
			return fmt.Errorf("result %v: %s", res.Result, describeResult(res, ""))
		}
		return nil
	}
	return benchCase{id: id, name: name, run: call, before: call}
}

// failCase is a case that cannot run.
func failCase(id, name string, err error) benchCase {
	return benchCase{id: id, name: name, run: func() error { return err }}
}

// pooled makes c, a case on o, a server with the warm pool, count its pool hits and
// misses and wait after each run until the pool is full again. The counters are
// read after every run: the pooled cases run one at a time, so the change since
// the previous read of o's counters is this run's. A nil o (the server did not
// start) leaves c as it is.
func (s *benchServers) pooled(c benchCase, o *ownServer) benchCase {
	if o == nil {
		return c
	}
	c.after = func(measured bool) {
		if s.last == nil {
			s.last = map[*ownServer]poolState{}
		}
		st := s.waitPoolFull(o)
		if measured {
			s.hits[c.id] += st.hits - s.last[o].hits
			s.misses[c.id] += st.misses - s.last[o].misses
		}
		s.last[o] = st
		time.Sleep(benchTeardown) // the used box is destroyed in the background
	}
	return c
}

// poolState is the pooled server's warm pool, from its /metrics.
type poolState struct{ hits, misses, ready, making, keys int64 }

// poolState reads the pool counters of o, a server with the warm pool.
func (s *benchServers) poolState(o *ownServer) (poolState, error) {
	ctx, cancel := context.WithTimeout(s.ctx, benchCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", o.url+"/metrics", nil)
	if err != nil {
		return poolState{}, err
	}
	req.Header.Set("Authorization", "Bearer "+o.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return poolState{}, fmt.Errorf("GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return poolState{}, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	var st poolState
	fields := map[string]*int64{"moat_pool_hits_total": &st.hits, "moat_pool_misses_total": &st.misses,
		"moat_pool_ready": &st.ready, "moat_pool_making": &st.making, "moat_pool_keys": &st.keys}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if p := fields[name]; ok && p != nil {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return poolState{}, fmt.Errorf("/metrics: %s %q: %w", name, value, err)
			}
			*p = int64(v)
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return poolState{}, fmt.Errorf("read /metrics: %w", err)
	}
	if found != len(fields) {
		return poolState{}, fmt.Errorf("/metrics has %d of the %d pool metrics", found, len(fields))
	}
	return st, nil
}

// waitPoolFull waits until o's pool holds benchPoolSize ready boxes for each of its
// keys and makes none (at most benchPoolWait), and returns its state. A failure to
// read the counters is kept in countErr and returns the last state.
func (s *benchServers) waitPoolFull(o *ownServer) poolState {
	deadline := time.Now().Add(benchPoolWait)
	for {
		st, err := s.poolState(o)
		if err != nil {
			if s.countErr == nil {
				s.countErr = err
			}
			return s.last[o]
		}
		if (st.making == 0 && st.ready >= st.keys*benchPoolSize) || time.Now().After(deadline) || s.ctx.Err() != nil {
			return st
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// poolHits sets the pool hits and misses of the pooled rows.
func (s *benchServers) poolHits(rows []benchRow) {
	if s.countErr != nil {
		return
	}
	for i := range rows {
		id := rows[i].ID
		if h, m := s.hits[id], s.misses[id]; rows[i].Runs > 0 && h+m > 0 {
			rows[i].PoolHits, rows[i].PoolMisses = &h, &m
		}
	}
}

// throughput runs, at each level of concurrency, per executions of print(1) (at
// least one per client) against the pooled server, each client back to back.
func (s *benchServers) throughput(levels []int, per int) []throughputRow {
	var rows []throughputRow
	for _, clients := range levels {
		each := max(1, (per+clients-1)/clients)
		row := throughputRow{Clients: clients, Executions: each * clients}
		if s.poolErr != nil {
			row.Errors, row.Error = row.Executions, "the server did not start: "+s.poolErr.Error()
			rows = append(rows, row)
			continue
		}
		before := s.waitPoolFull(s.pool)
		c := client.New(s.pool.url, s.pool.key, client.WithHTTPClient(&http.Client{Transport: loadTransport(clients)}))
		var (
			mu    sync.Mutex
			lat   []time.Duration
			wg    sync.WaitGroup
			first string
		)
		start := time.Now()
		var last time.Time
		for range clients {
			wg.Go(func() {
				for range each {
					if s.ctx.Err() != nil {
						return
					}
					ctx, cancel := context.WithTimeout(s.ctx, benchCallTimeout)
					t := time.Now()
					res, err := c.Execute(ctx, &api.ExecuteRequest{Language: "python", Code: "print(1)"}, nil)
					end := time.Now()
					cancel()
					if err == nil && (res.Status != box.StatusOK || res.Stdout != "1\n") {
						err = fmt.Errorf("%s", describeResult(res, "1\n"))
					}
					mu.Lock()
					if err != nil {
						row.Errors++
						if first == "" {
							first = err.Error()
						}
					} else {
						lat = append(lat, end.Sub(t))
						if end.After(last) {
							last = end
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		row.OK, row.Error = len(lat), first
		after, err := s.poolState(s.pool)
		if err == nil {
			row.PoolHits, row.PoolMisses = after.hits-before.hits, after.misses-before.misses
		} else if s.countErr == nil {
			s.countErr = err
		}
		slices.Sort(lat)
		row.P50MS, row.P99MS = benchMS(pct(lat, 50)), benchMS(pct(lat, 99))
		if row.OK > 0 {
			wall := last.Sub(start)
			row.WallMS, row.PerSecond = benchMS(wall), round(float64(row.OK)/wall.Seconds(), 10)
		}
		bare, err := bareThroughput(s.ctx, clients, max(clients, row.Executions/5))
		if err != nil {
			row.BareError = err.Error()
		} else {
			row.BarePerSecond = round(bare, 10)
			if row.PerSecond > 0 && bare > 0 {
				row.Ratio = round(row.PerSecond/bare, 100)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// bareThroughput is the rate at which clients, each back to back, run total bare
// python3 processes (bareCase): throughput's baseline, the machine's speed at that
// moment. It fails at the first process that does not print 1, or once ctx ends.
func bareThroughput(ctx context.Context, clients, total int) (float64, error) {
	each := max(1, total/clients)
	bare := bareCase()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for range each {
				err := ctx.Err()
				if err == nil {
					err = bare.run()
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(each*clients) / time.Since(start).Seconds(), nil
}
