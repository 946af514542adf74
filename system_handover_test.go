package berth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// TestMain removes the runner binary testenv.RunnerBinary builds and
// stops the PostgreSQL cluster testenv.Postgres starts.
func TestMain(m *testing.M) {
	if dir := os.Getenv(reattachDirEnv); dir != "" {
		// A host process of TestReattachAfterKill9OnDocker.
		if err := reattachHost(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	testenv.RemoveRunnerBinary()
	if err := testenv.StopPostgres(); err != nil && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// TestManagedAccountHandover (AUTH-2, issue 18) through a System on
// SQLite and on PostgreSQL, with the runner binary as a local child process on loopback: a
// matching project auth check lets the managed account through, written
// 0600 where the task expects it; each mismatch (projects added or
// removed, another provider, version 2, a config edit) is refused at
// dispatch with the code naming it; the account's value never appears in
// events, lease records, logs, the database file or the runner's state.
func TestManagedAccountHandover(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) { testManagedAccountHandover(t, kind) })
	}
}

func testManagedAccountHandover(t *testing.T, kind string) {
	ctx := context.Background()
	const canary = "canary-managed-account-c0ffee"
	dir := t.TempDir()
	dbFile := filepath.Join(dir, "db", "berth.db")
	if err := os.MkdirAll(filepath.Dir(dbFile), 0o700); err != nil {
		t.Fatal(err)
	}
	storeURL := "sqlite://" + dbFile
	if kind == "postgres" {
		storeURL = testenv.Postgres(t)
	}
	var logs syncbuf.Buffer
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	fk := fake.New(nil)
	sinkDir := filepath.Join(dir, "sink")
	st := openStores(t, storeURL)
	sys, err := berth.New(ctx, berth.WithRunnerPoll(&berth.Options{Stores: st, Drivers: []drivers.Driver{fk}, TestMode: true,
		Secrets: secrets, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		RunnerDir: sinkDir, RunnerHeartbeat: time.Second,
		ProjectAuthChecker: everyProject{}}, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	srv := httptest.NewServer(berth.Runners(sys))
	defer srv.Close()

	op := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	agent := authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
	cfg := map[string]any{"image": fk.DefaultImageIdentity().String()}
	envA, err := sys.Catalog().Create(ctx, op, environment.CreateRequest{Name: "a", Driver: fk.Name(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	envB, err := sys.Catalog().Create(ctx, op, environment.CreateRequest{Name: "b", Driver: fk.Name(), Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: envA.ID, Run: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := secrets.Put(ctx, "host", "managed_account", canary)
	if err != nil {
		t.Fatal(err)
	}
	account := ref.String()
	if _, err := sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envA.ID, []string{"p1", "p2"}); err != nil {
		t.Fatal(err)
	}

	tk, _, err := berth.Runners(sys).MintTicket(ctx, op, controller.TicketRequest{Lease: h.ID(), Run: "run-1", Company: "acme", Scope: prp.ScopeTask})
	if err != nil {
		t.Fatal(err)
	}
	tf := filepath.Join(dir, "ticket")
	if err := os.WriteFile(tf, []byte(tk.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(dir, "runner-state")
	var rlog syncbuf.Buffer
	child := exec.Command(testenv.RunnerBinary(t), "--controller", srv.URL+"/prp/", "--lease", h.ID(), "--state-dir", stateDir,
		"--ticket-file", tf, "--log-level", "debug")
	child.Stderr = &rlog
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = child.Process.Signal(syscall.SIGTERM)
		_ = child.Wait()
		if t.Failed() {
			t.Logf("runner log:\n%s", rlog.String())
		}
	}()
	var session string
	for deadline := time.Now().Add(time.Minute); session == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ids := berth.Runners(sys).ConnectedSessions(); len(ids) > 0 {
			session = ids[0]
		}
	}
	if session == "" {
		t.Fatal("no runner connected within a minute")
	}
	att, err := berth.Runners(sys).Reattach(ctx, agent, session)
	if err != nil {
		t.Fatal(err)
	}

	work, out := t.TempDir(), t.TempDir()
	task := func(id string, projects ...string) prp.TaskStart {
		return prp.TaskStart{TaskID: id, Cwd: work,
			Argv:    []string{"sh", "-c", `cp .agent/account "$1/account" && stat -c %a .agent/account > "$1/mode" && echo handed`, "sh", out},
			Secrets: []prp.SecretUse{{Source: prp.SecretFromManagedAccount, Ref: account, File: ".agent/account", Projects: projects}}}
	}
	refused := func(what, id string, want string, projects ...string) {
		t.Helper()
		_, err := att.Start(ctx, agent, controller.TaskSpec{CommandID: id, TaskStart: task(id, projects...)})
		if !errors.Is(err, handover.ErrMismatch) || controller.CodeOfSecrets(err) != string(want) {
			t.Errorf("%s: dispatch = %v, want a refusal with code %s", what, err, want)
		}
	}

	// A matching record: the task reads the account from a 0600 file.
	t1, err := att.Start(ctx, agent, controller.TaskSpec{CommandID: "c1", TaskStart: task("t1", "p2", "p1")})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if exit, err := t1.Wait(wctx); err != nil || exit.Code != 0 {
		t.Fatalf("c1 = %+v, %v; want exit 0", exit, err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "account")); string(b) != canary {
		t.Errorf("the task read %q, want the managed account", b)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "mode")); strings.TrimSpace(string(b)) != "600" {
		t.Errorf("the account file's mode = %q, want 600", b)
	}

	// Each mismatch is refused with the part that did not match.
	refused("one project added", "c2", "auth_check_projects", "p1", "p2", "p3")
	refused("one project removed", "c3", "auth_check_projects", "p1")
	if _, err := sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envB.ID, []string{"p1", "p2"}); err != nil {
		t.Fatal(err)
	}
	refused("prepared for another provider (environment b, same config)", "c4", "auth_check_provider", "p1", "p2")
	rec, err := sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envA.ID, []string{"p1", "p2"})
	if err != nil {
		t.Fatal(err)
	}
	rec.Version = 2
	if err := st.AuthChecks.PutAuthCheck(ctx, rec); err != nil {
		t.Fatal(err)
	}
	refused("a record of version 2", "c5", "auth_check_version", "p1", "p2")
	edited := map[string]any{"image": fk.DefaultImageIdentity().String(), "region": "eu-2"}
	if _, err := sys.Catalog().Update(ctx, op, envA.ID, environment.UpdateRequest{BaseRevision: envA.Revision, Config: edited}); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envA.ID, []string{"p1", "p2"}); err != nil {
		t.Fatal(err)
	}
	refused("prepared after a config edit, the lease runs the old config", "c6", "auth_check_fingerprint", "p1", "p2")
	if err := sys.Handover().Clear(ctx, op, "acme", account); err != nil {
		t.Fatal(err)
	}
	refused("cleared", "c7", "auth_check_missing", "p1", "p2")

	// Canary: events (output read back), lease records, logs, the
	// database's files, the runner's state and the output sink.
	var evs bytes.Buffer
	for after := uint64(0); ; {
		page, err := att.Events(ctx, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			b, _ := json.Marshal(e)
			evs.Write(b)
			if e.Event.Output != nil {
				evs.Write(e.Event.Output.Data)
			}
			after = e.Seq
		}
	}
	if !bytes.Contains(evs.Bytes(), []byte("handed")) {
		t.Errorf("the events lack the task's output")
	}
	leases, err := sys.Leases().List(ctx, op, lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := json.Marshal(leases)
	for what, b := range map[string][]byte{"events": evs.Bytes(), "lease records": lb, "library log": []byte(logs.String()), "runner log": []byte(rlog.String())} {
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s hold the managed account", what)
		}
	}
	files := testenv.CanaryInFiles(t, canary, "the managed account", filepath.Dir(dbFile), stateDir, sinkDir)
	if kind == "postgres" {
		files += testenv.CanaryInPostgres(t, storeURL, canary)
	}
	t.Logf("%s: canary absent from %d files or rows, %d bytes of events and %d bytes of logs", kind, files, evs.Len(), len(logs.String())+len(rlog.String()))
}

// everyProject is a host's project auth check that lets every project use
// the account.
type everyProject struct{}

func (everyProject) CheckProjectAuth(context.Context, authz.Principal, handover.AuthCheck) (handover.Status, string, error) {
	return handover.StatusSucceeded, "", nil
}
