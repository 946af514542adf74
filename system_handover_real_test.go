package berth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
)

// TestManagedAccountHandoverInRealTargets (AUTH-2, issue 18) through the
// controller with the real runner binary in a real Docker container
// (busybox, network none) and on the real sshd host, on SQLite (and on
// PostgreSQL over SSH): a matching project auth check lets the managed
// account through and the task reads it from a 0600 file where it
// expects it (it prints the file's SHA-256, never the account), the file
// is gone when the task ends; each mismatch is refused at dispatch with
// the code naming it: one project added, one removed, another provider,
// a record of version 2, a preparation after a config edit (the lease
// runs the old config), and a cleared record. The account never appears
// in events, lease records, logs (library and drivers), the database
// (SQLite's files with -wal; PostgreSQL's rows), the output sink, the
// runner's state directory and log, docker inspect of the container, or
// the argv or environment of any process on this host while the task
// holds it.
func TestManagedAccountHandoverInRealTargets(t *testing.T) {
	bin, _ := testenv.RunnerBinarySum(t)
	for _, tc := range []struct {
		name, store string
		mk          func(testing.TB) realTarget
	}{
		{"docker/sqlite", "sqlite", dockerTarget},
		{"ssh/sqlite", "sqlite", sshTarget},
		{"ssh/postgres", "postgres", sshTarget},
	} {
		t.Run(tc.name, func(t *testing.T) { testManagedAccountInRealTarget(t, bin, tc.store, tc.mk(t)) })
	}
}

func testManagedAccountInRealTarget(t *testing.T, bin, store string, tg realTarget) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	canary := "canary-managed-account-" + randomHex(t)
	sum := sha256.Sum256([]byte(canary))
	wantSum := hex.EncodeToString(sum[:])

	dir := t.TempDir()
	dbDir := filepath.Join(dir, "db")
	if err := os.MkdirAll(dbDir, 0o700); err != nil {
		t.Fatal(err)
	}
	storeURL := "sqlite://" + filepath.Join(dbDir, "berth.db")
	if store == "postgres" {
		storeURL = testenv.Postgres(t)
	}
	var logs syncbuf.Buffer
	lg := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	secrets := envhook.NewMemorySecretStore().(environment.SecretStore)
	sinkDir := filepath.Join(dir, "sink")
	st := openStores(t, storeURL)
	sys, err := berth.New(ctx, &berth.Options{Stores: st, Secrets: secrets, Logger: lg, RunnerBinary: bin,
		Drivers:            []drivers.Driver{docker.New(&docker.Options{Logger: lg}), ssh.New(&ssh.Options{Logger: lg})},
		RunnerDir:          sinkDir,
		ProjectAuthChecker: everyProject{}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = sys.Close()
		}
	}()
	op := realOperator
	agent := authz.Principal{ID: "agent-1", Role: authz.RoleAgent, Companies: []string{"acme"}}
	envA, err := sys.Catalog().Create(ctx, op, environment.CreateRequest{Name: "a", Driver: tg.driver, Config: tg.config})
	if err != nil {
		t.Fatal(err)
	}
	// The same config saved twice: another environment is another
	// provider account (drivers without provider accounts name the
	// environment).
	envB, err := sys.Catalog().Create(ctx, op, environment.CreateRequest{Name: "b", Driver: tg.driver, Config: tg.config})
	if err != nil {
		t.Fatal(err)
	}
	set, err := sys.RunnerSet()
	if err != nil {
		t.Fatal(err)
	}
	h, err := sys.Leases().Acquire(ctx, op, lease.AcquireRequest{Company: "acme", EnvironmentID: envA.ID, Run: "run-1", Runner: set})
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			_, _ = h.Release(context.Background(), lease.ReleaseOptions{Disposition: lease.Destroy})
		}
	}()
	att, err := berth.Runners(sys).Attach(ctx, op, h, controller.AttachRequest{})
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

	// The task finds the account at a path relative to its working
	// directory (the sandbox's workdir), prints the file's mode and
	// digest, and holds it a while for the process scans below.
	// The runner runs in "/": a task names its working directory.
	const file = ".agent/account"
	cwd := "/"
	if w, ok := tg.config["workdir"].(string); ok {
		cwd = w
	}
	task := func(id string, argv []string, projects ...string) prp.TaskStart {
		return prp.TaskStart{TaskID: id, Argv: argv, Cwd: cwd, Env: map[string]string{"ACCOUNT_FILE": file},
			Secrets: []prp.SecretUse{{Source: prp.SecretFromManagedAccount, Ref: account, File: file, Projects: projects}}}
	}
	reader := []string{"sh", "-c", `m=$(stat -c %a "$ACCOUNT_FILE") && s=$(sha256sum < "$ACCOUNT_FILE") && echo "mode=$m sum=${s%% *}" && touch .agent/read && while [ -e .agent/hold ]; do sleep 0.05; done`}
	if res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "mkdir -p .agent && touch .agent/hold"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("prepare the hold file: %+v, %v", res, err)
	}
	readTask, err := att.Start(ctx, agent, controller.TaskSpec{CommandID: "c-read", TaskStart: task("read", reader, "p2", "p1")})
	if err != nil {
		t.Fatalf("a matching record was refused: %v", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"test", "-e", ".agent/read"}})
		if err == nil && res.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			out, _ := berth.Runners(sys).Output(ctx, op, att.Session(), "read", prp.Stderr)
			t.Fatalf("the task never read the account (stderr %q)", out)
		}
	}
	// While the task holds the account: no process on this host (the
	// container's included) carries it in its argv or environment, and
	// docker inspect of the container does not show it.
	scanned := 0
	for _, f := range []string{"cmdline", "environ"} {
		if pids := hostProcessesWith([]byte(canary), f); len(pids) > 0 {
			t.Errorf("host processes %v hold the managed account in their %s", pids, f)
		}
		scanned++
	}
	if tg.driver == "docker" {
		ins, err := testenv.Docker(t).ContainerInspect(ctx, h.SandboxID())
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(ins)
		if bytes.Contains(b, []byte(canary)) {
			t.Error("docker inspect of the container shows the managed account")
		}
		if !bytes.Contains(b, []byte(h.SandboxID())) {
			t.Errorf("docker inspect of %s does not name it", h.SandboxID())
		}
	}
	if res, err := h.Exec(ctx, lease.Command{Argv: []string{"rm", ".agent/hold"}}); err != nil || res.ExitCode != 0 {
		t.Fatalf("release the hold: %+v, %v", res, err)
	}
	if exit, err := readTask.Wait(ctx); err != nil || exit.Code != 0 {
		t.Fatalf("the reading task = %+v, %v; want exit 0", exit, err)
	}
	out, err := berth.Runners(sys).Output(ctx, agent, att.Session(), "read", prp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), "mode=600 sum="+wantSum; got != want {
		t.Errorf("the task printed %q, want %q (the account's digest from a 0600 file)", got, want)
	}
	// The file lives as long as the task.
	if res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "test -e " + file + " && echo present || echo gone"}}); err != nil ||
		strings.TrimSpace(string(res.Stdout)) != "gone" {
		t.Errorf("after the task the account file is %q (%v), want gone", res.Stdout, err)
	}

	// Each mismatch is refused at dispatch with the part that did not
	// match; nothing runs.
	touch := []string{"sh", "-c", "touch refused-ran"}
	refused := func(what, id string, want string, projects ...string) {
		t.Helper()
		_, err := att.Start(ctx, agent, controller.TaskSpec{CommandID: "c-" + id, TaskStart: task(id, touch, projects...)})
		if !errors.Is(err, handover.ErrMismatch) || controller.CodeOfSecrets(err) != string(want) {
			t.Errorf("%s: dispatch = %v, want a refusal with code %s", what, err, want)
		}
		if err != nil && strings.Contains(err.Error(), canary) {
			t.Errorf("%s: the refusal holds the account: %v", what, err)
		}
	}
	refused("one project added", "added", "auth_check_projects", "p1", "p2", "p3")
	refused("one project removed", "removed", "auth_check_projects", "p1")
	recB, err := sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envB.ID, []string{"p1", "p2"})
	if err != nil {
		t.Fatal(err)
	}
	if fp := h.Lease().Fingerprint; recB.Fingerprint != fp {
		// An ssh config holds a secret (the private key), which each
		// saved environment keeps under a reference of its own: b's
		// fingerprint differs too, and is checked first. Store b's record
		// with a's fingerprint, so that only the provider differs.
		recB.Fingerprint = fp
		if err := st.AuthChecks.PutAuthCheck(ctx, recB); err != nil {
			t.Fatal(err)
		}
	}
	refused("prepared for another provider (environment b, same config)", "provider", "auth_check_provider", "p1", "p2")
	rec, err := sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envA.ID, []string{"p1", "p2"})
	if err != nil {
		t.Fatal(err)
	}
	rec.Version = 2
	if err := st.AuthChecks.PutAuthCheck(ctx, rec); err != nil {
		t.Fatal(err)
	}
	refused("a record of version 2", "v2", "auth_check_version", "p1", "p2")
	edited := map[string]any{}
	for k, v := range tg.config {
		edited[k] = v
	}
	switch tg.driver {
	case "docker":
		edited["registry_auth"] = "robot:pull-token" // a secret field: a new reference, a new fingerprint
	case "ssh":
		edited["workdir"] = t.TempDir()
	}
	if _, err := sys.Catalog().Update(ctx, op, envA.ID, environment.UpdateRequest{BaseRevision: envA.Revision, Config: edited}); err != nil {
		t.Fatal(err)
	}
	if rec, err = sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envA.ID, []string{"p1", "p2"}); err != nil || rec.Fingerprint == h.Lease().Fingerprint {
		t.Fatalf("prepare after the edit = %+v, %v; want a new fingerprint", rec, err)
	}
	refused("prepared after a config edit, the lease runs the old config", "edit", "auth_check_fingerprint", "p1", "p2")
	if err := sys.Handover().Clear(ctx, op, "acme", account); err != nil {
		t.Fatal(err)
	}
	refused("cleared", "cleared", "auth_check_missing", "p1", "p2")

	// Delivery checks again: a record cleared after the dispatch passed
	// (before the command reached the runner) makes the runner refuse the
	// command with the code; nothing runs.
	if _, err := sys.Handover().PrepareManagedAccount(ctx, op, "acme", account, envA.ID, []string{"p1", "p2"}); err != nil {
		t.Fatal(err)
	}
	// The edit above changed a's fingerprint: prepare for the lease's.
	rec, err = sys.Handover().Get(ctx, op, "acme", account)
	if err != nil {
		t.Fatal(err)
	}
	rec.Fingerprint = h.Lease().Fingerprint
	if err := st.AuthChecks.PutAuthCheck(ctx, rec); err != nil {
		t.Fatal(err)
	}
	berth.AfterSecretCheck(sys, func() {
		if err := sys.Handover().Clear(context.Background(), op, "acme", account); err != nil {
			t.Errorf("clear between dispatch and delivery: %v", err)
		}
	})
	lateTask, err := att.Start(ctx, agent, controller.TaskSpec{CommandID: "c-late", TaskStart: task("late", touch, "p1", "p2")})
	if err != nil {
		t.Fatalf("dispatch with a matching record: %v", err)
	}
	if exit, err := lateTask.Wait(ctx); !errors.Is(err, controller.ErrTaskNotRun) ||
		!strings.Contains(fmt.Sprint(err), string(prp.ResultRejected)+" ("+string(prpwire.CodeSecretsUnavailable)+"): "+"auth_check_missing"+":") {
		t.Errorf("a record cleared before delivery: %+v, %v; want not run: rejected (%s): %s..., nothing run", exit, err, prpwire.CodeSecretsUnavailable, "auth_check_missing")
	}
	if res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "test -e refused-ran && echo ran || echo none"}}); err != nil ||
		strings.TrimSpace(string(res.Stdout)) != "none" {
		t.Errorf("a refused task ran: %q, %v", res.Stdout, err)
	}

	// Canary: every stored event of the session (output included), the
	// runner's state directory and log in the target, then the lease
	// records, the logs, the sink and the database after the release.
	var evs bytes.Buffer
	var ferr error
	for after := uint64(0); ; {
		page, err := att.Events(ctx, after, 0)
		if ferr = err; err != nil || len(page) == 0 {
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
	if ferr != nil || !bytes.Contains(evs.Bytes(), []byte(wantSum)) {
		t.Errorf("the events lack the task's output (%v)", ferr)
	}
	state := runnerState(t, ctx, tg, h)
	if len(state) == 0 {
		t.Error("the runner's state directory is empty")
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy})
	released = true
	if err != nil || l.Cleanup != "confirmed" {
		t.Errorf("release = %+v, %v; want cleanup confirmed", l, err)
	}
	leases, err := sys.Leases().List(ctx, op, lease.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := json.Marshal(leases)
	// SQLite's files while the store is open (the -wal and -shm too),
	// and again after Close checkpointed the log into the database.
	files := testenv.CanaryInFiles(t, canary, "the managed account", dbDir)
	rows := 0
	if store == "postgres" {
		rows = testenv.CanaryInPostgres(t, storeURL, canary)
	}
	closed = true
	if err := sys.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	for what, b := range map[string][]byte{"events": evs.Bytes(), "lease records": lb, "logs": []byte(logs.String()), "the runner's state directory": state} {
		if bytes.Contains(b, []byte(canary)) {
			t.Errorf("%s hold the managed account", what)
		}
	}
	files += testenv.CanaryInFiles(t, canary, "the managed account", dbDir, sinkDir)
	t.Logf("%s: canary absent from %d files, %d PostgreSQL rows, %d bytes of events, %d bytes of runner state, %d bytes of logs, %d /proc scans",
		tg.driver, files, rows, evs.Len(), len(state), len(logs.String()), scanned)
}

// runnerState returns the bytes of every file of the lease's runner state
// directories (the journal, outbox and runner.log): in a container through
// tar, on an ssh host from its lease directories under /tmp/berth-UID
// (this host).
func runnerState(t *testing.T, ctx context.Context, tg realTarget, h *lease.Handle) []byte {
	t.Helper()
	if tg.driver == "docker" {
		res, err := h.Exec(ctx, lease.Command{Argv: []string{"tar", "-cf", "-", "/.berth/state"}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("tar the runner's state: %v (exit %d: %s)", err, res.ExitCode, res.Stderr)
		}
		return res.Stdout
	}
	// drivers/ssh names a lease's runner state directory state-HASH, the
	// first 8 bytes of the SHA-256 of the lease id in hex.
	lh := sha256.Sum256([]byte(h.ID()))
	dirs, _ := filepath.Glob("/tmp/berth-*/*/state-" + hex.EncodeToString(lh[:8]))
	if len(dirs) != 1 {
		t.Fatalf("runner state directories of lease %s: %v, want one", h.ID(), dirs)
	}
	var all bytes.Buffer
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				all.Write(b)
			}
			return nil
		})
	}
	return all.Bytes()
}
