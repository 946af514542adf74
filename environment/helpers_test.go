package environment_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/clock"
	"github.com/berthdev/berth/internal/testenv"
)

// canary is the secret value pasted into configs; it must never come back
// out of anything readable (CFG-3).
const canary = "CANARY-SECRET-7f3a"

// testDriver is a small driver for catalog tests: its schema has identity,
// knob, secret and metadata fields. Acquire is never called by the catalog.
type testDriver struct {
	name   string
	schema *config.Schema
}

func (d *testDriver) Name() string { return d.name }
func (d *testDriver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{Kind: drivers.KindSandbox, Declared: drivers.NewSet(drivers.CapExec)}
}
func (d *testDriver) Schema() *config.Schema { return d.schema }
func (d *testDriver) Acquire(context.Context, config.Config, drivers.AcquireRequest) (drivers.Sandbox, error) {
	return nil, fmt.Errorf("test driver %s: acquire: %w", d.name, drivers.ErrUnsupported)
}

// remoteSchema is the schema of the "remote" test driver.
func remoteSchema(name string) *config.Schema {
	return &config.Schema{
		Driver: name,
		Fields: []config.Field{
			{Name: "host", Kind: config.KindIdentity, Type: config.TypeString, Required: true},
			{Name: "port", Kind: config.KindIdentity, Type: config.TypeInt, Default: int64(22)},
			{Name: "apiKey", Kind: config.KindSecret, Type: config.TypeString, Required: true},
			{Name: "token", Kind: config.KindSecret, Type: config.TypeString},
			{Name: "timeout", Kind: config.KindKnob, Type: config.TypeDuration, Default: "30s"},
			{Name: "mode", Kind: config.KindKnob, Type: config.TypeString, Enum: []string{"fast", "slow"}, Default: "fast"},
			{Name: "tags", Kind: config.KindMetadata, Type: config.TypeStringList},
			{Name: "label", Kind: config.KindMetadata, Type: config.TypeString},
			{Name: "env", Kind: config.KindSecretMap, Type: config.TypeStringMap},
		},
	}
}

func newRegistry() *drivers.Registry {
	return drivers.NewRegistry(
		&testDriver{name: "remote", schema: remoteSchema("remote")},
		&testDriver{name: "local", schema: &config.Schema{Driver: "local", Fields: []config.Field{
			{Name: "cwd", Kind: config.KindIdentity, Type: config.TypeString, Default: "/"},
		}}},
		&testDriver{name: "fake", schema: &config.Schema{Driver: "fake", Fields: []config.Field{
			{Name: "image", Kind: config.KindIdentity, Type: config.TypeString, Default: "busybox"},
		}}},
		&testDriver{name: "sim", schema: &config.Schema{Driver: "sim"}},
	)
}

// The four principals of every table (CFG-2). The agent holds a company
// grant: grants never widen catalog rights.
var (
	admin    = authz.Principal{ID: "u_admin", Role: authz.RoleInstanceAdmin}
	operator = authz.Principal{ID: "u_op", Role: authz.RoleLocalOperator}
	board    = authz.Principal{ID: "u_board", Role: authz.RoleBoardMember, Companies: []string{"acme"}}
	agent    = authz.Principal{ID: "agent_1", Role: authz.RoleAgent, Companies: []string{"acme"}}
)

var principals = []struct {
	name string
	p    authz.Principal
}{{"admin", admin}, {"operator", operator}, {"board member", board}, {"agent", agent}}

// logBuffer collects slog output of a catalog, safe for concurrent writes.
type logBuffer struct{ testenv.Buffer }

// lines returns the log lines whose message is msg.
func (l *logBuffer) lines(msg string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, `"msg":"`+msg+`"`) {
			out = append(out, line)
		}
	}
	return out
}

type fixture struct {
	cat     *environment.Catalog
	store   environment.Store
	secrets environment.SecretStore
	logs    *logBuffer
	logger  *slog.Logger // writes to logs
	clock   *clock.Fake
}

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// newFixture returns a catalog over a memory store and secret store with the
// test registry, a fake clock and a JSON log capture. mod may change the
// options before the catalog is built.
func newFixture(t testing.TB, mod func(*environment.Options)) *fixture {
	t.Helper()
	return newFixtureOn(t, environment.NewMemoryStore(), mod)
}

// stores are the two store flavours catalog tests run against: the memory
// store keeps Go values; jsonStore keeps the JSON form, as SQL stores do.
var stores = []struct {
	name string
	new  func() environment.Store
}{
	{"memory store", func() environment.Store { return environment.NewMemoryStore() }},
	{"JSON store", func() environment.Store { return jsonStore{environment.NewMemoryStore()} }},
}

// jsonStore is a MemoryStore that keeps each environment in its JSON form:
// configs come back with json.Number, []any and map-form secret references,
// as from store/sqlite and store/postgres.
type jsonStore struct{ environment.Store }

func (s jsonStore) CreateEnvironment(ctx context.Context, env *environment.Environment, exclusiveDriver bool) error {
	return s.Store.CreateEnvironment(ctx, viaJSON(env), exclusiveDriver)
}

func (s jsonStore) UpdateEnvironment(ctx context.Context, env *environment.Environment, base int64) error {
	return s.Store.UpdateEnvironment(ctx, viaJSON(env), base)
}

func viaJSON(env *environment.Environment) *environment.Environment {
	b, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out environment.Environment
	if err := dec.Decode(&out); err != nil {
		panic(err)
	}
	return &out
}

// newFixtureOn is newFixture over store.
func newFixtureOn(t testing.TB, store environment.Store, mod func(*environment.Options)) *fixture {
	t.Helper()
	f := &fixture{
		store:   store,
		secrets: environment.NewMemorySecretStore(),
		logs:    &logBuffer{},
		clock:   clock.NewFake(t0),
	}
	f.logger = slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n := 0
	var mu sync.Mutex
	opts := environment.WithTestOptions(&environment.Options{Logger: f.logger}, environment.TestOptions{
		Clock: f.clock,
		NewID: func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return fmt.Sprintf("env_%03d", n)
		},
	})
	if mod != nil {
		mod(opts)
	}
	f.cat = environment.NewCatalog(f.store, newRegistry(), f.secrets, nil, opts)
	return f
}

// remoteRequest is a valid create request for the remote driver, pasting
// the canary as its API key.
func remoteRequest(name string) environment.CreateRequest {
	return environment.CreateRequest{
		Name:        name,
		Description: "a remote target",
		Driver:      "remote",
		Config:      map[string]any{"host": "build-1.example", "apiKey": canary, "mode": "slow"},
		Env:         map[string]string{"GOFLAGS": "-mod=mod"},
		Metadata:    map[string]string{"team": "infra"},
	}
}

// mustCreate creates req as admin and fails the test on error.
func (f *fixture) mustCreate(t testing.TB, req environment.CreateRequest) *environment.View {
	t.Helper()
	v, err := f.cat.Create(context.Background(), admin, req)
	if err != nil {
		t.Fatalf("Create(%s): %v", req.Name, err)
	}
	return v
}

// count returns how many environments the store holds.
func (f *fixture) count(t testing.TB) int {
	t.Helper()
	envs, err := f.store.ListEnvironments(context.Background(), environment.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(envs)
}

// wantErr fails unless err wraps every target.
func wantErr(t testing.TB, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one wrapping %v", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Errorf("error %q does not wrap %q", err, target)
		}
	}
}

// wantText fails unless err's text contains every part.
func wantText(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func jsonNumber(s string) json.Number { return json.Number(s) }

// resolvedConfig reaches the catalog's unexported resolved config the way
// berth's own packages do.
func resolvedConfig(c *environment.Catalog, ctx context.Context, id string) (*environment.Environment, config.Config, error) {
	return environment.ResolvedConfigForTest(c, ctx, id)
}
