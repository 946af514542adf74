package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

// loadStats is what one load run saw.
type loadStats struct {
	mu        sync.Mutex
	latencies []time.Duration
	fivexx    []string
	accepted  map[string]map[int64]string // env -> revision -> description
	conflicts int
	fake      []string // conflicts that were not real
	failures  []string
}

func (s *loadStats) add(d time.Duration) {
	s.mu.Lock()
	s.latencies = append(s.latencies, d)
	s.mu.Unlock()
}

func (s *loadStats) fail(format string, a ...any) {
	s.mu.Lock()
	s.failures = append(s.failures, fmt.Sprintf(format, a...))
	s.mu.Unlock()
}

var staleRe = regexp.MustCompile(`stale revision (\d+): the stored revision is (\d+)`)

// runLoad runs clients concurrent clients of ops operations each over
// loopback: reads, updates with revisions, probes on the fake and lease
// acquire/release, mixed. validate checks each request and response
// against the document (the test); the benchmark sends them raw.
func runLoad(tb testing.TB, e *tenv, envIDs []string, clients, ops int, validate bool) *loadStats {
	st := &loadStats{accepted: map[string]map[int64]string{}}
	for _, id := range envIDs {
		st.accepted[id] = map[int64]string{}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	send := func(c call) (int, []byte, http.Header) {
		if validate {
			r := e.do(tb, c)
			return r.status, r.body, r.header
		}
		var body []byte
		if c.body != nil {
			body, _ = json.Marshal(c.body)
		}
		req, _ := http.NewRequest(c.method, e.ts.URL+c.path, bytesReader(body))
		req.Header.Set("Authorization", "Bearer "+c.token)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		if err != nil {
			st.fail("%s %s: %v", c.method, c.path, err)
			return 0, nil, nil
		}
		defer res.Body.Close()
		var buf [64 << 10]byte
		n, _ := readFull(res.Body, buf[:])
		return res.StatusCode, buf[:n], res.Header
	}
	var wg sync.WaitGroup
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ops {
				id := envIDs[(cl+i)%len(envIDs)]
				start := time.Now()
				var status int
				var body []byte
				switch (cl + i) % 4 {
				case 0:
					status, body, _ = send(call{method: "GET", path: "/api/v1/environments/" + id, token: tokBoard})
				case 1:
					var hdr http.Header
					status, body, hdr = send(call{method: "GET", path: "/api/v1/environments/" + id, token: tokAdmin})
					if status != http.StatusOK {
						break
					}
					tag := hdr.Get("ETag")
					base, _ := strconv.ParseInt(tag[1:len(tag)-1], 10, 64)
					desc := fmt.Sprintf("c%d-%d", cl, i)
					status, body, _ = send(call{method: "PATCH", path: "/api/v1/environments/" + id, token: tokAdmin,
						header: map[string]string{"If-Match": tag}, body: map[string]any{"description": desc}})
					switch status {
					case http.StatusOK:
						var v environment.View
						json.Unmarshal(body, &v)
						st.mu.Lock()
						if prev, dup := st.accepted[id][v.Revision]; dup {
							st.failures = append(st.failures, fmt.Sprintf("revision %d of %s accepted twice (%s and %s)", v.Revision, id, prev, desc))
						}
						st.accepted[id][v.Revision] = desc
						st.mu.Unlock()
						if v.Revision != base+1 || v.Description != desc {
							st.fail("update of %s at %d answered revision %d %q", id, base, v.Revision, v.Description)
						}
					case http.StatusPreconditionFailed:
						m := staleRe.FindStringSubmatch(string(body))
						st.mu.Lock()
						st.conflicts++
						if m == nil || m[1] == m[2] || m[1] != strconv.FormatInt(base, 10) {
							st.fake = append(st.fake, string(body))
						}
						st.mu.Unlock()
					}
				case 2:
					status, body, _ = send(call{method: "POST", path: "/api/v1/companies/acme/environments/" + id + "/probe", token: tokOperator})
					if status == http.StatusOK && !json.Valid(body) {
						st.fail("probe answered %s", body)
					}
				case 3:
					h, err := e.s.sys.Leases().Acquire(context.Background(), adminPrincipal, lease.AcquireRequest{Company: "acme", EnvironmentID: id})
					if err != nil {
						st.fail("acquire %s: %v", id, err)
						break
					}
					status, body, _ = send(call{method: "POST", path: "/api/v1/companies/acme/leases/" + h.ID() + "/release", token: tokAdmin, body: map[string]any{"disposition": "destroy"}})
					if status != http.StatusOK {
						st.fail("release %s = %d %s", h.ID(), status, body)
					}
				}
				st.add(time.Since(start))
				if status >= 500 || status == 0 {
					st.mu.Lock()
					st.fivexx = append(st.fivexx, fmt.Sprintf("%d %s", status, body))
					st.mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return st
}

// checkLoad asserts correctness only: no 5xx, every accepted update
// visible at its revision (none lost, none doubled), every conflict a
// real one, and no sandbox or live lease left after a sweep.
func checkLoad(tb testing.TB, e *tenv, drv *fake.Driver, envIDs []string, st *loadStats) {
	tb.Helper()
	for _, f := range st.fivexx {
		tb.Errorf("5xx under load: %s", f)
	}
	for _, f := range st.failures {
		tb.Error(f)
	}
	for _, f := range st.fake {
		tb.Errorf("a conflict that was not real: %s", f)
	}
	for _, id := range envIDs {
		v, err := e.s.sys.Catalog().Get(context.Background(), adminPrincipal, id)
		if err != nil {
			tb.Fatal(err)
		}
		acc := st.accepted[id]
		if want := int64(1 + len(acc)); v.Revision != want {
			tb.Errorf("%s is at revision %d after %d accepted updates (want %d): a write was lost or doubled", id, v.Revision, len(acc), want)
		}
		if len(acc) > 0 && acc[v.Revision] != v.Description {
			tb.Errorf("%s reads %q at revision %d, the accepted update there was %q", id, v.Description, v.Revision, acc[v.Revision])
		}
	}
	e.must(tb, http.StatusOK, call{method: "POST", path: "/api/v1/sweep", token: tokOperator})
	live := 0
	for _, sb := range fakectl.Of(drv).Sandboxes() {
		if sb.State != drivers.StateDestroyed {
			live++
		}
	}
	if live != 0 {
		tb.Errorf("%d sandboxes left after the sweep", live)
	}
	if ls, err := e.s.stores.Leases.ListLeases(context.Background(), lease.Filter{Live: true}); err != nil || len(ls) != 0 {
		tb.Errorf("live leases after the sweep: %d, %v", len(ls), err)
	}
}

func loadEnv(tb testing.TB, kind string) (*tenv, *fake.Driver, []string) {
	drv := fake.New(nil)
	e := newEnv(tb, kind, &envOpts{drivers: []drivers.Driver{drv}, maxStreams: 64})
	// 64 clients lease more than the default lease quotas allow: the load
	// is about correctness under concurrency, so the instance has none.
	e.must(tb, http.StatusOK, call{method: "PATCH", path: "/api/v1/settings", token: tokAdmin, header: map[string]string{"If-Match": `"0"`},
		body: map[string]any{"quotaPerCompany": 0, "quotaPerCompanyEnvironment": 0}})
	var ids []string
	for i := range 4 {
		ids = append(ids, e.createFake(tb, fmt.Sprintf("load-%d", i)).ID)
	}
	return e, drv, ids
}

// 64 concurrent clients over loopback, on SQLite and PostgreSQL:
// correctness only (no timing is asserted).
func TestLoad(t *testing.T) {
	for _, kind := range stores {
		t.Run(kind, func(t *testing.T) {
			e, drv, ids := loadEnv(t, kind)
			st := runLoad(t, e, ids, 64, 8, true)
			checkLoad(t, e, drv, ids, st)
			if st.conflicts == 0 {
				t.Log("no update conflicted under load")
			}
		})
	}
}

// BenchmarkLoad reports throughput and p50/p99 of 64 concurrent clients
// (requests sent raw, without the document's validation):
//
//	BERTH_REQUIRE_REAL=1 go test -run '^$' -bench Load -benchtime 2048x ./examples/server/
func BenchmarkLoad(b *testing.B) {
	for _, kind := range stores {
		b.Run(kind, func(b *testing.B) {
			e, drv, ids := loadEnv(b, kind)
			ops := max(b.N/64, 1)
			b.ResetTimer()
			start := time.Now()
			st := runLoad(b, e, ids, 64, ops, false)
			el := time.Since(start)
			b.StopTimer()
			checkLoad(b, e, drv, ids, st)
			slices.Sort(st.latencies)
			n := len(st.latencies)
			b.ReportMetric(float64(n)/el.Seconds(), "ops/s")
			b.ReportMetric(float64(st.latencies[n/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(st.latencies[n*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(st.conflicts), "conflicts")
		})
	}
}
