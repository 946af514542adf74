package controller_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/runner"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
	"github.com/berthdev/berth/qualification"
)

// TestMain stops the PostgreSQL cluster testenv.Postgres starts and
// removes the runner binary.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveRunnerBinary()
	if err := testenv.StopPostgres(); err != nil && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// operator may act on co-1's runners; stranger on none (AUTH-1).
var (
	operator = authz.Principal{ID: "op-1", Role: authz.RoleAgent, Companies: []string{"co-1"}}
	stranger = authz.Principal{ID: "op-2", Role: authz.RoleAgent, Companies: []string{"co-2"}}
)

// companyPolicy allows ActionLease to principals with a grant for the
// resource's company.
var companyPolicy = authz.AuthorizerFunc(func(_ context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
	if a == authz.ActionLease && p.HasCompany(r.Company) {
		return nil
	}
	return authz.Denied(p, a, r)
})

func testSigner(t testing.TB) *prp.Signer {
	t.Helper()
	s, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// server is a controller behind a real HTTP server on loopback.
type server struct {
	c     *controller.Controller
	tasks leasehook.TaskStopper // the hook controller.New returned for the lease manager
	srv   *httptest.Server
	url   string // the base URL runners dial, if not the server's own
}

// URL is the PRP base URL runners dial.
func (s *server) URL() string {
	if s.url != "" {
		return s.url
	}
	return s.srv.URL + "/prp/"
}

// testLeases returns lease records holding lease-1 of co-1, active (the
// lease server.ticket mints for).
func testLeases(t testing.TB) lease.Store {
	t.Helper()
	ls := lease.NewMemoryStore()
	leasetest.RecordActive(t, ls, "lease-1", "co-1")
	return ls
}

// serverOptions are a test controller's constructor arguments and options.
type serverOptions struct {
	controller.Options
	Signer  *prp.Signer
	Leases  controller.LeaseReader
	Secrets controller.SecretResolver
}

// newServer starts a controller with o (Signer, Authorizer, Leases
// (testLeases) and DataDir defaulted for the test).
func newServer(t testing.TB, o serverOptions) *server {
	t.Helper()
	if o.Leases == nil {
		o.Leases = testLeases(t)
	}
	if o.Signer == nil {
		o.Signer = testSigner(t)
	}
	if o.Authorizer == nil {
		o.Authorizer = companyPolicy
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = time.Second
	}
	o.Poll = 50 * time.Millisecond
	c, tasks, err := controller.New(o.Signer, o.Leases, o.Secrets, &o.Options)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/prp/", c)
	s := &server{c: c, tasks: tasks, srv: httptest.NewServer(mux)}
	t.Cleanup(func() {
		c.Close()
		s.srv.Close()
	})
	return s
}

// ticket mints a ticket for lease-1 / run-1 of co-1.
func (s *server) ticket(t testing.TB, scope prp.Scope) string {
	t.Helper()
	tk, _, err := s.c.MintTicket(context.Background(), operator, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	return tk.String()
}

// startRunner runs the real runner in-process against s with a fresh
// ticket of scope and returns its session once welcomed.
func startRunner(t testing.TB, s *server, scope prp.Scope) string {
	t.Helper()
	var logs syncbuf.Buffer
	r, err := runner.New(s.URL(), t.TempDir(), &runner.Options{Lease: "lease-1", Ticket: s.ticket(t, scope),
		BinarySHA256: strings.Repeat("ab", 32), StopGrace: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Backoff: func(int) time.Duration { return 20 * time.Millisecond },
		Platform: func(context.Context) (qualification.Platform, error) {
			return runner.DefaultPlatform(context.Background())
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = r.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		if runErr != nil && !errors.Is(runErr, context.Canceled) {
			t.Errorf("runner: %v", runErr)
		}
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.String())
		}
	})
	return waitSession(t, s)
}

// waitSession waits until a runner is connected to s and returns its
// session id.
func waitSession(t testing.TB, s *server) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if ids := s.c.ConnectedSessions(); len(ids) > 0 {
			return ids[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no runner connected within a minute")
	return ""
}

// wait waits for the result of command id, failing the test after a
// generous limit.
func wait(t testing.TB, s *server, session, id string) prp.Result {
	t.Helper()
	return waitFor(t, s, session, id, 2*time.Minute)
}

// waitFor is wait with the limit d.
func waitFor(t testing.TB, s *server, session, id string, d time.Duration) prp.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := s.c.Wait(ctx, operator, session, id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return res
}

// startChild runs the runner binary against s on stateDir, with a fresh
// ticket in a 0600 file, or with a resume ticket of session resume (a
// restart that rejoins its session) when resume is not empty; it gets
// SIGTERM when the test ends.
func startChild(t testing.TB, s *server, stateDir, resume string) *exec.Cmd {
	t.Helper()
	args := []string{"--controller", s.URL(), "--lease", "lease-1", "--state-dir", stateDir}
	tk := ""
	if resume == "" {
		tk = s.ticket(t, prp.ScopeTask)
	} else {
		rt, _, err := s.c.MintResumeTicket(context.Background(), operator, resume, 0)
		if err != nil {
			t.Fatal(err)
		}
		tk = rt.String()
	}
	tf := filepath.Join(t.TempDir(), "ticket")
	if err := os.WriteFile(tf, []byte(tk), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--ticket-file", tf)
	return testenv.StartRunner(t, nil, args...)
}

// tagged returns the live (not zombie) processes whose environment holds a
// runner tag ending in ":"+task.
func tagged(task string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.HasPrefix(kv, []byte(runner.TagEnv+"=")) && bytes.HasSuffix(kv, []byte(":"+task)) {
				if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
					f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
					if f[0] != "Z" {
						out = append(out, pid)
					}
				}
				break
			}
		}
	}
	return out
}
