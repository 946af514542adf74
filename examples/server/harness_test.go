package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/examples/internal/secretfile"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(serverChildEnv) != "" {
		os.Exit(serverChildMain())
	}
	code := 0
	func() {
		defer testenv.RemoveRunnerBinary()
		openapi3filter.RegisterBodyDecoder("text/event-stream", func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(r)
			return string(b), err
		})
		openapi3filter.RegisterBodyDecoder(tarType, openapi3filter.FileBodyDecoder)
		code = m.Run()
	}()
	if err := testenv.StopPostgres(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// The bearer tokens of the tests' -tokens file.
const (
	tokAdmin    = "admin-token-0123456789"
	tokOperator = "operator-token-0123456789"
	tokBoard    = "board-token-0123456789"
	tokAgent    = "agent-token-0123456789"
	tokGlobex   = "globex-board-token-0123456789"
)

const testTokens = `{"tokens": [
  {"token": "` + tokAdmin + `", "role": "instance_admin", "id": "root"},
  {"token": "` + tokOperator + `", "role": "local_operator", "id": "ops"},
  {"token": "` + tokBoard + `", "role": "board_member", "id": "bob", "companies": ["acme"]},
  {"token": "` + tokAgent + `", "role": "agent", "id": "agent-7", "companies": ["acme"]},
  {"token": "` + tokGlobex + `", "role": "board_member", "id": "gina", "companies": ["globex"]}
]}`

// stores are the databases the API tests run on.
var stores = []string{"sqlite", "postgres"}

// tenv is one server under test: an httptest server over a real store.
type tenv struct {
	t      testing.TB
	s      *server
	ts     *httptest.Server
	logs   *syncbuf.Buffer
	dir    string
	dsn    string
	router routers.Router

	bodiesMu sync.Mutex
	bodies   []byte // every response body, for the canary checks

	closeOnce sync.Once
	closeErr  error
}

// close shuts the server down as SIGTERM does (once).
func (e *tenv) close() error {
	e.closeOnce.Do(func() { e.closeErr = e.s.Close(context.Background()) })
	return e.closeErr
}

// envOpts adjust newEnv.
type envOpts struct {
	drivers    []drivers.Driver
	runnerSet  *drivers.RunnerSet
	maxStreams int
	xtermDir   string // node-xterm's directory; "" for the plain terminal
	// tokensFile, if set, is written to the env's directory and served as
	// the -tokens file (re-read when it changes) instead of testTokens.
	tokensFile string
	limits     limits
	// dsn, if set, is the database of the server (a replica's).
	dsn string
}

// newEnv starts a server on store kind ("sqlite" or "postgres") with the
// fake driver (in test mode) unless o names drivers.
func newEnv(t testing.TB, kind string, o *envOpts) *tenv {
	t.Helper()
	if o == nil {
		o = &envOpts{}
	}
	e := &tenv{t: t, logs: &syncbuf.Buffer{}, dir: t.TempDir()}
	switch {
	case o.dsn != "":
		e.dsn = o.dsn
	case kind == "sqlite":
		e.dsn = filepath.Join(e.dir, "berth.db")
	case kind == "postgres":
		e.dsn = testenv.Postgres(t)
	default:
		t.Fatalf("no store %q", kind)
	}
	ctx := context.Background()
	st, host, closeDB, err := openStores(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := parseTokens("tokens.json", []byte(testTokens))
	if err != nil {
		t.Fatal(err)
	}
	drvs := o.drivers
	if drvs == nil {
		drvs = []drivers.Driver{fake.New(nil)}
	}
	rs := o.runnerSet
	if rs == nil {
		spec, err := runnerSpecOf(testenv.FakeRunnerBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		rs = drivers.RunnerSetOf(spec)
	}
	secrets, err := secretfile.Open(ctx, filepath.Join(e.dir, "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(e.logs, nil))
	var tokenFile *tokenSource
	if o.tokensFile != "" {
		path := filepath.Join(e.dir, "tokens.json")
		if err := os.WriteFile(path, []byte(o.tokensFile), 0o600); err != nil {
			t.Fatal(err)
		}
		if tokenFile, err = newTokenSource(path, log.Info); err != nil {
			t.Fatal(err)
		}
	}
	e.s, err = newServer(ctx, options{stores: st, host: host, drivers: drvs, testMode: true, tokens: tokens, tokenFile: tokenFile,
		log: log, runnerSet: rs, maxStreams: cmp.Or(o.maxStreams, 4), secrets: secrets, xtermDir: o.xtermDir, limits: o.limits})
	if err != nil {
		closeDB()
		t.Fatal(err)
	}
	e.ts = httptest.NewServer(e.s.Handler())
	t.Cleanup(func() {
		e.ts.Close()
		if err := e.close(); err != nil {
			t.Errorf("server Close: %v", err)
		}
		closeDB()
	})
	e.router = docRouter(t)
	return e
}

var (
	routerOnce sync.Once
	routerDoc  *openapi3.T
	routerErr  error
)

// loadDoc loads and validates the OpenAPI document.
func loadDoc(t testing.TB) *openapi3.T {
	t.Helper()
	routerOnce.Do(func() {
		l := openapi3.NewLoader()
		routerDoc, routerErr = l.LoadFromData(openapiDoc)
		if routerErr == nil {
			routerErr = routerDoc.Validate(context.Background())
		}
	})
	if routerErr != nil {
		t.Fatalf("the OpenAPI document: %v", routerErr)
	}
	return routerDoc
}

func docRouter(t testing.TB) routers.Router {
	doc := loadDoc(t)
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// resp is a response the client read whole.
type resp struct {
	status int
	header http.Header
	body   []byte
}

// decode reads the body as JSON into v.
func (r *resp) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// errCode returns the error shape's code.
func (r *resp) err(t testing.TB) apiError {
	t.Helper()
	var e struct {
		Error apiError `json:"error"`
	}
	r.decode(t, &e)
	return e.Error
}

// call is one request of a test.
type call struct {
	method, path string
	body         any // nil, a string (sent as is) or a value (JSON)
	token        string
	header       map[string]string
	cookie       *http.Cookie
	// raw skips the request's validation (a test of a malformed request).
	raw bool
}

// do sends c and validates its request (unless raw) and response against
// the OpenAPI document.
func (e *tenv) do(t testing.TB, c call) *resp {
	t.Helper()
	var body []byte
	switch b := c.body.(type) {
	case nil:
	case string:
		body = []byte(b)
	default:
		var err error
		if body, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(c.method, e.ts.URL+c.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	var in *openapi3filter.RequestValidationInput
	if strings.HasPrefix(c.path, "/api/") {
		route, params, err := e.router.FindRoute(req)
		if err != nil {
			if !c.raw {
				t.Errorf("%s %s: not in the OpenAPI document: %v", c.method, c.path, err)
			}
		} else {
			in = &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
				Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
			if !c.raw {
				if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
					t.Errorf("%s %s: the request does not match the document: %v", c.method, c.path, err)
				}
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := cl.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer res.Body.Close()
	rb, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", c.method, c.path, err)
	}
	e.bodiesMu.Lock()
	e.bodies = append(append(e.bodies, rb...), '\n')
	for k, vs := range res.Header {
		e.bodies = append(e.bodies, k+": "+strings.Join(vs, ",")+"\n"...)
	}
	e.bodiesMu.Unlock()
	if in != nil {
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		out.SetBodyBytes(rb)
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s %s: the response (%d) does not match the document: %v\n%s", c.method, c.path, res.StatusCode, err, rb)
		}
	}
	if strings.HasPrefix(c.path, "/api/") {
		checkMessages(t, c.method+" "+c.path, rb)
	}
	return &resp{status: res.StatusCode, header: res.Header, body: rb}
}

// must sends c and fails the test unless the status is want.
func (e *tenv) must(t testing.TB, want int, c call) *resp {
	t.Helper()
	r := e.do(t, c)
	if r.status != want {
		t.Fatalf("%s %s = %d, want %d: %s", c.method, c.path, r.status, want, r.body)
	}
	return r
}

// createFake saves a fake environment named name as the admin.
func (e *tenv) createFake(t testing.TB, name string) *environment.View {
	t.Helper()
	var v environment.View
	e.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": name, "driver": "fake"}}).decode(t, &v)
	return &v
}

// events splits a text/event-stream body into (event, data) pairs.
func events(body []byte) [][2]string {
	var out [][2]string
	for _, block := range strings.Split(string(body), "\n\n") {
		var ev, data string
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "event: "); ok {
				ev = v
			}
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
		if ev != "" {
			out = append(out, [2]string{ev, data})
		}
	}
	return out
}

var adminPrincipal = authz.Principal{ID: "root", Role: authz.RoleInstanceAdmin}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// readFull reads r into buf until EOF or buf is full, draining the rest.
func readFull(r io.Reader, buf []byte) (int, error) {
	n, err := io.ReadFull(r, buf)
	io.Copy(io.Discard, r)
	return n, err
}

// testSource returns the credential identity of the test token whose
// principal is p (a session made from it stays valid while the token
// does).
func testSource(t testing.TB, p authz.Principal) string {
	t.Helper()
	set, err := parseTokens("tokens.json", []byte(testTokens))
	if err != nil {
		t.Fatal(err)
	}
	for h, q := range set {
		if samePrincipal(p, q) {
			return tokenIdentity(h)
		}
	}
	t.Fatalf("no test token grants %v", p)
	return ""
}
