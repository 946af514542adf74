package daytonafake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/berthdev/berth/internal/clock"
)

// Routes of the fake, as Go ServeMux patterns. Fault.Route and Calls take
// them.
const (
	RouteHealth           = "GET /api/health"
	RouteListSandboxes    = "GET /api/sandbox"
	RouteCreateSandbox    = "POST /api/sandbox"
	RouteGetSandbox       = "GET /api/sandbox/{sandboxIdOrName}"
	RouteDeleteSandbox    = "DELETE /api/sandbox/{sandboxIdOrName}"
	RouteStartSandbox     = "POST /api/sandbox/{sandboxIdOrName}/start"
	RouteStopSandbox      = "POST /api/sandbox/{sandboxIdOrName}/stop"
	RouteArchiveSandbox   = "POST /api/sandbox/{sandboxIdOrName}/archive"
	RouteSnapshotSandbox  = "POST /api/sandbox/{sandboxIdOrName}/snapshot"
	RouteToolboxProxyURL  = "GET /api/sandbox/{sandboxId}/toolbox-proxy-url"
	RouteListSnapshots    = "GET /api/snapshots"
	RouteCreateSnapshot   = "POST /api/snapshots"
	RouteGetSnapshot      = "GET /api/snapshots/{id}"
	RouteDeleteSnapshot   = "DELETE /api/snapshots/{id}"
	RouteActivateSnapshot = "POST /api/snapshots/{id}/activate"
	RouteExecute          = "POST /toolbox/{sandboxId}/process/execute"
)

// Knobs are the fake's timing and failure behaviour. They apply to
// transitions that begin after they are set (see Server.SetKnobs).
type Knobs struct {
	// StartDelay is how long, on the server's clock, a create or start
	// stays creating / starting / restoring before it is started.
	StartDelay time.Duration
	// StartPolls is how many reads (GET of the sandbox, list pages) a
	// pending transition needs before it may finish, in addition to its
	// delay. Default 0.
	StartPolls int
	// StopDelay is how long stop, archive, delete and snapshot transitions,
	// and the removal of a deleted snapshot, take on the clock. Default 0
	// (they finish at the next read).
	StopDelay time.Duration
	// StuckCreating leaves new sandboxes in state creating forever.
	StuckCreating bool
	// FailStart, if not "", makes creates and starts end in state error
	// with this errorReason. With no delay, a create answers 400 "Sandbox
	// failed to start: <reason>" as the API does when the failure comes
	// within its own wait; the errored sandbox exists all the same.
	FailStart string
	// PageSize caps a list page below the request's limit; 0: no cap.
	PageSize int
	// DaemonVersion is the daemonVersion new sandboxes report and whose
	// process/execute behaviour the toolbox reproduces (see execute);
	// default "0.190.0". "" in a sandbox's answer: set NoDaemonVersion.
	DaemonVersion string
	// NoDaemonVersion leaves daemonVersion out of the sandbox records (the
	// field is optional in the API's schema); the toolbox behaves as the
	// newest daemon.
	NoDaemonVersion bool
	// ReplayExecute makes the toolbox run every process/execute command
	// twice, overlapping, and answer with the second run, as Daytona's
	// proxy does when it replays a POST once after a stale-connection
	// error (the first run's answer is lost, the command is not stopped).
	ReplayExecute bool
	// Shell is the shell a v0.156.0+ daemon feeds commands to; default
	// /bin/sh. The real daemon takes zsh, then bash, then sh.
	Shell string
	// SandboxClass is the sandboxClass of new sandboxes: "container" (the
	// default), "linux-vm" or "windows". Only VM classes can be paused
	// (Server.Pause).
	SandboxClass string
	// SnapshotDelay is how long, on the server's clock, a snapshot stays
	// pending before it is active (one created through POST /snapshots, one
	// activated), and how long after a job-based runner restored the
	// sandbox's state a snapshot from the sandbox is saved (active at
	// once). Default 0 (at the next read; the answer to the request that
	// made it pending still says pending).
	SnapshotDelay time.Duration
	// SnapshotBeforeRestore selects the older runners' capture order: the
	// snapshot is saved before the sandbox leaves snapshotting. Default the
	// job-based order: the state is restored first.
	SnapshotBeforeRestore bool
	// ToolboxProxyURL, if not "", is the toolboxProxyUrl sandboxes report
	// (and GET /sandbox/{id}/toolbox-proxy-url answers) instead of the
	// fake's own: the real API answers whatever its region is configured
	// with, another origin than the API's.
	ToolboxProxyURL string
}

// Options configure a Server. nil means defaults.
type Options struct {
	// APIKey is the only bearer token accepted; default "daytonatest-key".
	APIKey string
	// OrganizationID is the organization of the key. As with the real API
	// and an API key, X-Daytona-Organization-ID is ignored. Default a
	// random UUID.
	OrganizationID string
	// Clock runs the transitions; default the wall clock. Tests pass a
	// *clock.Fake and advance it: no sleeps.
	Clock clock.Clock
	// Knobs are the initial knobs.
	Knobs Knobs
	// Dir holds the sandboxes' home directories; default a new temporary
	// directory removed by Close.
	Dir string
	// TLS serves https with httptest's self-signed certificate (see
	// Server.Client for a client that trusts it); default plain http.
	TLS bool
	// AfterCall, if not nil, is called after each authenticated request
	// was answered, with its route and status, outside the server's lock:
	// a test hook to act at an exact point of a conversation (for example
	// advance the clock after the first 409).
	AfterCall func(route string, status int)
}

// Fault is an injected error answer. It matches requests on Route ("" for
// every route) from the Nth matching call on (1-based; 0 means the first),
// Count times (0 means once; negative means forever). It answers Status
// with Message in the API's error body, and a Retry-After header when
// RetryAfter is not "". With Lose set, the request is served first and
// only its answer is replaced: an answer lost on the way back. With
// Location set, the answer is a redirect there (Status, default 307), as a
// load balancer or a misconfigured proxy in front of the API may send.
type Fault struct {
	Route      string
	Nth        int
	Count      int
	Status     int
	Message    string
	RetryAfter string
	Lose       bool
	Location   string

	seen, fired int
}

// Server is a fake Daytona API and toolbox proxy on a loopback httptest
// server. It is safe for concurrent use.
type Server struct {
	srv    *httptest.Server
	key    string
	org    string
	clk    clock.Clock
	dir    string
	ownDir bool
	after  func(route string, status int)

	mu        sync.Mutex
	knobs     Knobs
	seq       int64
	lastTouch time.Time           // the last activity time given (see touch)
	sandboxes map[string]*sandbox // by id, destroyed ones included
	snapshots map[string]*snapshot
	saves     []pendingSave // snapshots saved after their sandbox's state
	calls     map[string]int
	faults    []*Fault
	closed    bool
}

// New starts a fake server on 127.0.0.1. Close it when done.
func New(opts *Options) (*Server, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	s := &Server{
		key: o.APIKey, org: o.OrganizationID, clk: o.Clock, dir: o.Dir, knobs: o.Knobs, after: o.AfterCall,
		sandboxes: map[string]*sandbox{}, snapshots: map[string]*snapshot{}, calls: map[string]int{},
	}
	if s.key == "" {
		s.key = "daytonatest-key"
	}
	if s.org == "" {
		s.org = uuid.NewString()
	}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	if s.dir == "" {
		d, err := os.MkdirTemp("", "daytonatest-")
		if err != nil {
			return nil, fmt.Errorf("daytonatest: %w", err)
		}
		s.dir, s.ownDir = d, true
	}
	mux := http.NewServeMux()
	s.routes(mux)
	s.srv = httptest.NewUnstartedServer(mux)
	if o.TLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	return s, nil
}

func (s *Server) routes(mux *http.ServeMux) {
	h := func(route string, fn func(http.ResponseWriter, *http.Request)) {
		mux.HandleFunc(route, s.wrap(route, fn))
	}
	h(RouteHealth, s.health)
	h(RouteListSandboxes, s.listSandboxes)
	h(RouteCreateSandbox, s.createSandbox)
	h(RouteGetSandbox, s.getSandbox)
	h(RouteDeleteSandbox, s.deleteSandbox)
	h(RouteStartSandbox, s.startSandbox)
	h(RouteStopSandbox, s.stopSandbox)
	h(RouteArchiveSandbox, s.archiveSandbox)
	h(RouteSnapshotSandbox, s.snapshotSandbox)
	h(RouteToolboxProxyURL, s.toolboxProxyURL)
	h(RouteListSnapshots, s.listSnapshots)
	h(RouteCreateSnapshot, s.createSnapshotHTTP)
	h(RouteGetSnapshot, s.getSnapshot)
	h(RouteDeleteSnapshot, s.deleteSnapshotHTTP)
	h(RouteActivateSnapshot, s.activateSnapshot)
	h(RouteExecute, s.execute)
	h(RouteCreatePty, s.createPty)
	h(RouteGetPty, s.getPty)
	h(RouteDeletePty, s.deletePty)
	h(RouteResizePty, s.resizePty)
	h(RouteConnectPty, s.connectPty)
	h(RouteUploadFile, s.uploadFile)
	h(RouteDownloadFile, s.downloadFile)
}

// URL returns the API base URL, http://127.0.0.1:PORT/api: the driver's
// api_url.
func (s *Server) URL() string { return s.srv.URL + "/api" }

// ToolboxProxyURL returns the toolbox proxy URL sandboxes report: the
// fake's own (under /toolbox) unless Knobs.ToolboxProxyURL says otherwise.
func (s *Server) ToolboxProxyURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.toolboxProxyURLLocked()
}

func (s *Server) toolboxProxyURLLocked() string {
	if s.knobs.ToolboxProxyURL != "" {
		return s.knobs.ToolboxProxyURL
	}
	return s.srv.URL + "/toolbox"
}

// Client returns an HTTP client that trusts the server's certificate (with
// Options.TLS) and reaches it.
func (s *Server) Client() *http.Client { return s.srv.Client() }

// APIKey returns the accepted API key.
func (s *Server) APIKey() string { return s.key }

// OrganizationID returns the key's organization.
func (s *Server) OrganizationID() string { return s.org }

// Clock returns the server's clock.
func (s *Server) Clock() clock.Clock { return s.clk }

// SetKnobs changes the knobs under the server's lock.
func (s *Server) SetKnobs(fn func(*Knobs)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.knobs)
}

// InjectFault adds a fault; faults are checked in the order added.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &f)
}

// Calls returns how many requests reached route (after authentication,
// faulted ones included).
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}

// Close kills every process the toolbox runs, stops the server and removes
// the directory it made.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for _, sb := range s.sandboxes {
		sb.killAll()
	}
	s.mu.Unlock()
	s.srv.Close()
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// wrap checks the bearer key and the organization header, counts the call
// and answers an injected fault if one matches.
func (s *Server) wrap(route string, fn func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	toolbox := strings.Contains(route, " /toolbox/")
	return func(w http.ResponseWriter, r *http.Request) {
		fail := apiError
		if toolbox {
			fail = toolboxError
		}
		auth := r.Header.Get("Authorization")
		// GET /health is @Public() in v0.190.0
		// apps/api/src/health/health.controller.ts.
		if tok, ok := strings.CutPrefix(auth, "Bearer "); route != RouteHealth && (!ok || tok != s.key) {
			fail(w, r, http.StatusUnauthorized, "Unauthorized")
			return
		}
		// X-Daytona-Organization-ID is read only by the API's JWT strategy
		// (v0.190.0 apps/api/src/auth/jwt.strategy.ts); with an API key, the
		// only credential the fake takes, the key's organization is used
		// and the header is ignored.
		s.mu.Lock()
		s.calls[route]++
		f := s.matchFault(route)
		s.mu.Unlock()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		if s.after != nil {
			defer func() { s.after(route, sw.status) }()
		}
		if f == nil {
			fn(sw, r)
			return
		}
		if f.Lose {
			fn(httptest.NewRecorder(), r)
		}
		if f.Location != "" {
			status := f.Status
			if status == 0 {
				status = http.StatusTemporaryRedirect
			}
			http.Redirect(sw, r, f.Location, status)
			return
		}
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		msg := f.Message
		if msg == "" {
			msg = http.StatusText(f.Status)
		}
		fail(sw, r, f.Status, msg)
	}
}

// statusWriter remembers the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

// Unwrap gives http.ResponseController and WebSocket upgrades the
// underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (s *Server) matchFault(route string) *Fault {
	for _, f := range s.faults {
		if f.Route != "" && f.Route != route {
			continue
		}
		f.seen++
		if f.seen < f.Nth {
			continue
		}
		limit := f.Count
		if limit == 0 {
			limit = 1
		}
		if limit > 0 && f.fired >= limit {
			continue
		}
		f.fired++
		return f
	}
	return nil
}

// apiError writes the API's error body (AllExceptionsFilter).
func apiError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	writeJSON(w, status, map[string]any{
		"path": r.URL.RequestURI(), "timestamp": time.Now().UTC().Format(time.RFC3339Nano),
		"statusCode": status, "error": http.StatusText(status), "message": msg,
	})
}

// toolboxError writes the toolbox's error body (common-go ErrorResponse).
func toolboxError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	code := strings.ToUpper(strings.ReplaceAll(http.StatusText(status), " ", "_"))
	writeJSON(w, status, map[string]any{
		"statusCode": status, "message": msg, "code": code,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "path": r.URL.Path, "method": r.Method,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeStrict reads a JSON body into v, refusing unknown fields. The real
// API ignores unknown fields (its ValidationPipe does not forbid them), so
// a misspelt field would silently do nothing there; the fake refuses them
// so that the driver's field names are checked.
func decodeStrict(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("property %s should not exist", strings.Trim(f, `"`))
		}
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON body")
	}
	return nil
}

// health answers the API's public liveness route as v0.190.0 does
// (apps/api/src/health/health.controller.ts live(): {"status":"ok"}); a
// Fault on RouteHealth makes it fail.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
