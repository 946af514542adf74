package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/kubernetes"
	"github.com/berthdev/berth/drivers/local"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images/resolve"
	"github.com/berthdev/berth/store"
)

// server is the host service: berth's System, the server's own tables,
// the bearer tokens, the runs it started, and the API's routes.
type server struct {
	sys    *berth.System
	stores store.Stores
	host   *hostDB
	tokens *tokenSource
	log    *slog.Logger
	tls    bool
	now    func() time.Time
	limits limits
	// xtermDir: see options.xtermDir; xterm is its bundle.
	xtermDir string
	xterm    xtermBundle

	runs    *runs
	streams *streamLimit
	// pins resolves image tags to digests for POST /api/v1/images/pin,
	// uncached: a pin reads the tag as it is now.
	pins *resolve.Resolver
	// closing is closed when shutdown begins: event streams end so that
	// http.Server.Shutdown does not wait for them.
	closing   chan struct{}
	closeOnce sync.Once
	// stopMaintenance ends the maintenance timers; maintenance waits
	// for them.
	stopMaintenance context.CancelFunc
	maintenance     sync.WaitGroup
	// stopHeartbeat ends the renewal of this replica's claims on its
	// runs (after they stopped).
	stopHeartbeat context.CancelFunc
	heartbeat     sync.WaitGroup

	mux    *http.ServeMux
	routes []route
}

// route is one registered API route, for the OpenAPI walk.
type route struct{ method, pattern string }

// options are what newServer composes.
type options struct {
	stores   store.Stores
	host     *hostDB
	drivers  []drivers.Driver
	testMode bool
	tokens   tokenSet
	// tokenFile, if set, is the -tokens file's source (re-read when it
	// changes); else tokens is a fixed set.
	tokenFile *tokenSource
	// sessionIdle ends a cookie session unused this long (0: 30 min).
	sessionIdle time.Duration
	// limits are the caps, deadlines and retention of runs, and the
	// maintenance timers.
	limits     limits
	log        *slog.Logger
	tls        bool
	runnerSet  *drivers.RunnerSet
	maxStreams int
	secrets    environment.SecretStore
	// runnerDir is the runners' output directory (the controller's
	// DataDir: chunk files the store indexes) and runnerKey the key the
	// runners' tokens are signed with: both outlive a restart, and
	// replicas share them, so that any replica reattaches a run's runner
	// and reads its output. "" and nil: a temporary directory and a key of
	// this process (runs do not survive a restart).
	runnerDir string
	runnerKey []byte
	// xtermDir is node-xterm's directory (lib/ holds xterm.js 3.8.1's
	// modules and xterm.css), served bundled under /xterm/ for the page's
	// terminal; "" serves none (a plain line terminal). See xterm.go.
	xtermDir string
}

// driversNamed returns the drivers of the -drivers list; the fake only in
// test mode.
func driversNamed(names []string, testMode bool, log *slog.Logger) ([]drivers.Driver, error) {
	var out []drivers.Driver
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		switch n {
		case "local":
			out = append(out, local.New(nil))
		case "ssh":
			out = append(out, ssh.New(&ssh.Options{Logger: log}))
		case "docker":
			out = append(out, docker.New(&docker.Options{Logger: log}))
		case "daytona":
			out = append(out, daytona.New(&daytona.Options{Logger: log}))
		case "kubernetes":
			out = append(out, kubernetes.New(&kubernetes.Options{Logger: log}))
		case "fake":
			if !testMode {
				return nil, errors.New("-drivers: the fake driver needs -test-mode")
			}
			out = append(out, fake.New(nil))
		default:
			return nil, fmt.Errorf("-drivers: unknown driver %q (local, ssh, docker, daytona, kubernetes, fake)", n)
		}
	}
	return out, nil
}

// withPlugins returns drvs with the plugins of dir (-plugins) loaded
// (drivers/plugin.LoadDir): a plugin replaces the driver of its name.
// Their stderr goes to log.
func withPlugins(drvs []drivers.Driver, dir string, log *slog.Logger) ([]drivers.Driver, error) {
	ps, err := plugin.LoadDir(dir, &plugin.Options{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("-plugins: %w", err)
	}
	byName := map[string]bool{}
	for _, d := range ps {
		byName[d.Name()] = true
	}
	out := ps
	for _, d := range drvs {
		if !byName[d.Name()] {
			out = append(out, d)
		}
	}
	return out, nil
}

// newServer composes berth over o.stores and registers the API.
func newServer(ctx context.Context, o options) (*server, error) {
	log := o.log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A runner's connection to a dead replica is known dead after three
	// heartbeats: a third of the run claim's expiry, so that a replica
	// taking a run over reconnects its runner about when the claim lapsed.
	lim := o.limits.withDefaults()
	var keys [][]byte
	if o.runnerKey != nil {
		keys = [][]byte{o.runnerKey}
	}
	sys, err := berth.New(ctx, &berth.Options{
		RunnerDir:       o.runnerDir,
		RunnerHeartbeat: lim.runClaimTTL / 3,
		RunnerKeys:      keys,
		Stores:          o.stores,
		Drivers:         o.drivers,
		Secrets:         o.secrets,
		TestMode:        o.testMode,
		Logger:          log,
		RunnerSet:       o.runnerSet,
		Protected:       protectLocal,
	})
	if err != nil {
		return nil, err
	}
	tokens := o.tokenFile
	if tokens == nil {
		tokens = fixedTokens(o.tokens)
	}
	o.host.tokens, o.host.idle = tokens, o.sessionIdle
	s := &server{
		sys: sys, stores: o.stores, host: o.host, tokens: tokens, log: log, tls: o.tls, xtermDir: o.xtermDir,
		limits:  o.limits.withDefaults(),
		now:     time.Now,
		mux:     http.NewServeMux(),
		closing: make(chan struct{}),
		pins:    resolve.New(&resolve.Options{TTL: -1}),
	}
	s.runs = newRuns(s)
	// Stream slots are per credential (identityOf), not per "ROLE ID".
	s.streams = &streamLimit{max: max(o.maxStreams, 1), open: map[string]int{}}
	s.registerRoutes()
	if _, err := sys.Drivers().Lookup("local"); err == nil {
		if err := s.ensureLocal(ctx); err != nil {
			sys.Close()
			return nil, err
		}
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopMaintenance = cancel
	s.maintenance.Add(1)
	go func() {
		defer s.maintenance.Done()
		s.runMaintenance(mctx)
	}()
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopHeartbeat = hcancel
	s.heartbeat.Add(1)
	go func() {
		defer s.heartbeat.Done()
		s.runs.heartbeat(hctx)
	}()
	return s, nil
}

// protectLocal is the catalog's Protected hook (CFG-7): the local
// environment (at most one per instance, CFG-4) is the server's managed
// one, which may be archived but never deleted. It reads the record, not
// its metadata, which an operator may edit.
func protectLocal(_ context.Context, env *environment.Environment) string {
	if env.Driver == "local" {
		return "the managed local environment of this server (the host itself)"
	}
	return ""
}

// managedMeta marks the managed local environment the server keeps.
const managedMeta = "managed_by"

// ensureLocal creates the managed local environment when none exists
// (the create form never offers local: SPEC UI-1).
func (s *server) ensureLocal(ctx context.Context) error {
	op := servicePrincipal
	envs, err := s.sys.Catalog().List(ctx, op, environment.ListFilter{Driver: "local"})
	if err != nil {
		return fmt.Errorf("server: list local environments: %w", err)
	}
	for _, e := range envs {
		if e.Metadata[managedMeta] == "examples/server" {
			return nil
		}
	}
	_, err = s.sys.Catalog().Create(ctx, op, environment.CreateRequest{
		Name: "local", Description: "This host (managed by the server)", Driver: "local",
		Metadata: map[string]string{managedMeta: "examples/server"},
	})
	if err != nil && !errors.Is(err, errcode.ErrConflict) {
		return fmt.Errorf("server: create the managed local environment: %w", err)
	}
	return nil
}

// handle registers an authenticated API route.
func (s *server) handle(method, pattern string, h http.HandlerFunc) {
	s.routes = append(s.routes, route{method, pattern})
	s.mux.HandleFunc(method+" "+pattern, func(w http.ResponseWriter, r *http.Request) {
		r, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		h(w, r)
	})
}

// Handler returns the server's HTTP handler: the API, its OpenAPI
// document, the login and the page, behind the request log and the
// security headers.
func (s *server) Handler() http.Handler {
	return s.logRequests(securityHeaders(s.mux))
}

// contentSecurityPolicy is the policy of every response: the server's own
// scripts and styles only (no inline script), never framed.
const contentSecurityPolicy = "default-src 'self'; frame-ancestors 'none'"

// securityHeaders sets, on every response (the pages and the login form
// among them), the content security policy, X-Frame-Options: DENY,
// nosniff and Referrer-Policy: no-referrer. A handler may tighten the
// policy; none loosens it.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}

func (s *server) registerRoutes() {
	s.routes = append(s.routes, route{http.MethodGet, "/api/openapi.json"})
	s.mux.HandleFunc("GET /api/openapi.json", s.serveOpenAPI)
	s.mux.HandleFunc("/login", s.handleLogin)
	s.mux.HandleFunc("GET /{$}", s.servePage)
	s.mux.HandleFunc("GET "+envPagePath, s.serveEnvironmentsPage)
	s.mux.HandleFunc("GET "+sessionsPagePath, s.serveSessionsPage)
	s.mux.HandleFunc("GET /assets/{name}", s.serveAsset)
	s.mux.HandleFunc("GET /xterm/{name}", s.serveXTerm)
	defer func() {
		// A known path with another method is 405, an unknown one 404.
		paths := http.NewServeMux()
		seen := map[string]bool{}
		for _, rt := range s.routes {
			if !seen[rt.pattern] {
				seen[rt.pattern] = true
				paths.HandleFunc(rt.pattern, http.NotFound)
			}
		}
		s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
			if _, p := paths.Handler(r); p != "" {
				s.writeError(w, r, errMethod)
				return
			}
			s.writeError(w, r, errNoRoute)
		})
	}()

	s.handle("GET", "/api/v1/session", s.getSession)
	s.handle("DELETE", "/api/v1/session", s.deleteSession)
	s.handle("GET", "/api/v1/sessions", s.listSessions)
	s.handle("DELETE", "/api/v1/sessions/{id}", s.revokeSessionByID)
	s.handle("GET", "/api/v1/drivers", s.listDrivers)
	s.handle("GET", "/api/v1/environments", s.listEnvironments)
	s.handle("POST", "/api/v1/environments", s.authorizeFirst(s.mayCreateEnvironment, s.idempotent(s.createEnvironment)))
	s.handle("GET", "/api/v1/environments/{id}", s.getEnvironment)
	s.handle("PATCH", "/api/v1/environments/{id}", s.updateEnvironment)
	s.handle("DELETE", "/api/v1/environments/{id}", s.deleteEnvironment)
	s.handle("POST", "/api/v1/environments/{id}/archive", s.archiveEnvironment)
	s.handle("POST", "/api/v1/environments/{id}/restore", s.restoreEnvironment)
	s.handle("GET", "/api/v1/environments/{id}/blast-radius", s.blastRadius)
	s.handle("POST", "/api/v1/environments/{id}/health", s.refreshHealth)
	s.handle("POST", "/api/v1/environments/{id}/host-key/scan", s.scanHostKey)
	s.handle("POST", "/api/v1/environments/{id}/host-key/trust", s.trustHostKey)
	s.handle("POST", "/api/v1/images/pin", s.pinImage)
	s.handle("POST", "/api/v1/image-choices", s.listImageChoices)
	s.handle("POST", "/api/v1/sweep", s.sweep)
	s.handle("GET", "/api/v1/settings", s.getSettings)
	s.handle("PATCH", "/api/v1/settings", s.patchSettings)

	const c = "/api/v1/companies/{company}"
	s.handle("POST", c+"/environments/{id}/probe", s.probeSaved)
	s.handle("POST", c+"/probes", s.probeDraft)
	s.handle("GET", c+"/environments/{id}/qualification", s.qualification)
	s.handle("GET", c+"/assignments", s.listAssignments)
	s.handle("PUT", c+"/assignments/{kind}/{key}", s.setAssignment)
	s.handle("GET", c+"/assignments/{kind}/{key}", s.showAssignment)
	s.handle("DELETE", c+"/assignments/{kind}/{key}", s.clearAssignment)
	s.handle("POST", c+"/resolve", s.resolve)
	s.handle("GET", c+"/leases", s.listLeases)
	s.handle("GET", c+"/leases/{id}", s.getLease)
	s.handle("POST", c+"/leases/{id}/release", s.releaseLease)
	s.handle("GET", c+"/leases/{id}/files", s.getFiles)
	s.handle("PUT", c+"/leases/{id}/files", s.putFiles)
	s.handle("POST", c+"/leases/{id}/files", s.putFiles)
	s.handle("GET", c+"/leases/{id}/workspace", s.getWorkspace)
	s.handle("POST", c+"/leases/{id}/workspace", s.prepareWorkspace)
	s.handle("GET", c+"/leases/{id}/workspace/{ws}/changes", s.workspaceChanges)
	s.handle("GET", c+"/auth-checks", s.listAuthChecks)
	s.handle("PUT", c+"/auth-checks/{account}", s.recordAuthCheck)
	s.handle("GET", c+"/auth-checks/{account}", s.getAuthCheck)
	s.handle("DELETE", c+"/auth-checks/{account}", s.clearAuthCheck)
	s.handle("POST", c+"/runs", s.authorizeFirst(s.mayRunIn, s.idempotent(s.startRun)))
	s.handle("GET", c+"/runs", s.listRuns)
	s.handle("GET", c+"/runs/{id}", s.getRun)
	s.handle("GET", c+"/runs/{id}/output", s.runOutput)
	s.handle("POST", c+"/runs/{id}/stop", s.stopRun)
	s.registerTemplateRoutes()
}

// authorizeFirst runs a route's authorization before next (an idempotent
// route): a caller refused the route gets the refusal, never another
// request's recorded answer.
func (s *server) authorizeFirst(may func(*http.Request) error, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := may(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		next(w, r)
	}
}

// mayCreateEnvironment is POST /api/v1/environments' authorization.
func (s *server) mayCreateEnvironment(r *http.Request) error {
	return s.sys.Catalog().Authorize(r.Context(), principalOf(r), authz.ActionCreate, authz.Resource{Kind: authz.ResourceKindEnvironment})
}

// mayRunIn is POST …/runs' authorization: the caller may hold a lease of
// the path's company (the library decides the target when the run
// acquires it).
func (s *server) mayRunIn(r *http.Request) error {
	return s.sys.Catalog().Authorize(r.Context(), principalOf(r), authz.ActionLease,
		authz.Resource{Kind: authz.ResourceKindLease, Company: r.PathValue("company")})
}

// errOtherGrant refuses an idempotent replay to a credential whose grant
// changed since the record was made.
var errOtherGrant = errcode.New(errcode.Conflict, "server: this Idempotency-Key was recorded for another grant of this credential: use a new key")

// granteeOf is the grant an idempotency record is replayed to: role, id
// and companies.
func granteeOf(p authz.Principal) string {
	b, _ := json.Marshal([]any{p.Role, p.ID, slices.Sorted(slices.Values(p.Companies))})
	return string(b)
}

// beginShutdown ends the open event streams (each sends its last event
// or just closes); it is http.Server's RegisterOnShutdown hook.
func (s *server) beginShutdown() { s.closeOnce.Do(func() { close(s.closing) }) }

// Close ends the event streams, stops the runs the server started (with
// proof, releasing their ephemeral leases) and closes the System.
func (s *server) Close(ctx context.Context) error {
	s.beginShutdown()
	s.stopMaintenance()
	s.maintenance.Wait()
	err := s.runs.stopAll(ctx)
	s.stopHeartbeat()
	s.heartbeat.Wait()
	return errors.Join(err, s.sys.Close())
}

// streamLimit bounds the open event streams per principal.
type streamLimit struct {
	mu   sync.Mutex
	max  int
	open map[string]int
}

// acquire takes a stream slot of who, or returns errTooManyStreams.
func (l *streamLimit) acquire(who string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[who] >= l.max {
		return nil, errTooManyStreams
	}
	l.open[who]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[who]--; l.open[who] == 0 {
			delete(l.open, who)
		}
	}, nil
}

// sortBy sorts items by key.
func sortBy[T any](items []T, key func(T) string) {
	sort.SliceStable(items, func(i, j int) bool { return key(items[i]) < key(items[j]) })
}
