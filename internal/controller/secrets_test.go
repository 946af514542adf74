package controller_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prpwire"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
)

// mapResolver resolves secret references from a map; Check refuses a
// reference it does not know, and Resolve fails with code "gone" for the
// references in gone.
type mapResolver struct {
	values map[string]string
	gone   map[string]bool
}

type codedErr struct{ code, msg string }

func (e codedErr) Error() string      { return e.msg }
func (e codedErr) SecretCode() string { return e.code }

func (m mapResolver) Check(_ context.Context, _ authz.Principal, _ controller.SecretTarget, uses []prp.SecretUse) error {
	for _, u := range uses {
		if _, ok := m.values[u.Ref]; !ok {
			return codedErr{"unknown_secret", "secret " + u.Ref + " is unknown"}
		}
	}
	return nil
}

func (m mapResolver) Resolve(_ context.Context, _ controller.SecretTarget, uses []prp.SecretUse) ([]string, error) {
	out := make([]string, len(uses))
	for i, u := range uses {
		if m.gone[u.Ref] {
			return nil, codedErr{"gone", "secret " + u.Ref + " is gone"}
		}
		out[i] = m.values[u.Ref]
	}
	return out, nil
}

func newCanary(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "canary-" + hex.EncodeToString(b)
}

// startLoggedChild runs the runner binary (debug log into logs) against s
// on stateDir, with a ticket unless ticket is false.
func startLoggedChild(t *testing.T, s *server, stateDir string, ticket bool, logs *syncbuf.Buffer) *exec.Cmd {
	t.Helper()
	return startLoggedChildOf(t, s, stateDir, ticket, "", logs)
}

// startLoggedChildOf is startLoggedChild; a restart (ticket false) rejoins
// session resume with a resume ticket.
func startLoggedChildOf(t *testing.T, s *server, stateDir string, ticket bool, resume string, logs *syncbuf.Buffer) *exec.Cmd {
	t.Helper()
	args := []string{"--controller", s.URL(), "--lease", "lease-1", "--state-dir", stateDir, "--log-level", "debug"}
	tk := ""
	if ticket {
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
	cmd := exec.Command(testenv.RunnerBinary(t), args...)
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.String())
		}
	})
	return cmd
}

// secretTask is a task that copies its env secret and its file secret into
// dir and records the file's mode; it prints nothing of them.
func secretTask(id, work, dir string) prp.TaskStart {
	return prp.TaskStart{TaskID: id, Cwd: work,
		Argv: []string{"sh", "-c", `printf %s "$TOKEN" > "$1/env" && cp account.json "$1/file" && stat -c %a account.json > "$1/mode" && echo ran`, "sh", dir},
		Secrets: []prp.SecretUse{
			{Source: prp.SecretFromEnvironment, Ref: "TOKEN", Env: "TOKEN"},
			{Source: prp.SecretFromManagedAccount, Ref: "secret:acct@v1", File: "account.json", Projects: []string{"p1"}},
		}}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// PRP "secrets in commands": secret values reach the task (an env var and a
// 0600 file) and nothing else: not the runner's state directory (journal,
// outbox, credentials), not the controller's store (SQLite file bytes,
// PostgreSQL rows), events, output, command digests or logs.
func TestSecretValuesReachOnlyTheTask(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			canary := newCanary(t)
			var dbFile, url string
			if kind == "sqlite" {
				dbFile = filepath.Join(t.TempDir(), "berth.db")
				url = "sqlite://" + dbFile
			} else {
				url = testenv.Postgres(t)
			}
			db := openStores(t, url)
			var clog, rlog syncbuf.Buffer
			dataDir := t.TempDir()
			s := newServer(t, serverOptions{Secrets: mapResolver{values: map[string]string{"TOKEN": canary + "-env", "secret:acct@v1": canary + "-account"}}, Options: controller.Options{Store: db.Runners.(controller.RunnerStore), Tickets: db.Runners.(controller.RunnerStore), DataDir: dataDir,
				Logger: slog.New(slog.NewTextHandler(&clog, &slog.HandlerOptions{Level: slog.LevelDebug}))}})
			stateDir := t.TempDir()
			startLoggedChild(t, s, stateDir, true, &rlog)
			session := waitSession(t, s)
			ctx := context.Background()
			work, out := t.TempDir(), t.TempDir()
			if _, err := s.c.StartTask(ctx, operator, session, "c1", secretTask("t1", work, out)); err != nil {
				t.Fatal(err)
			}
			res := wait(t, s, session, "c1")
			if res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 0 {
				t.Fatalf("result = %+v, want done with exit 0", res)
			}
			// The task saw both values; the file was 0600 and is gone.
			if got := readFile(t, filepath.Join(out, "env")); got != canary+"-env" {
				t.Errorf("the task's env secret = %q, want the canary", got)
			}
			if got := readFile(t, filepath.Join(out, "file")); got != canary+"-account" {
				t.Errorf("the task's file secret = %q, want the canary", got)
			}
			if got := readFile(t, filepath.Join(out, "mode")); got != "600" {
				t.Errorf("the secret file's mode = %s, want 600", got)
			}
			if _, err := os.Stat(filepath.Join(work, "account.json")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the secret file is left after the task: %v", err)
			}
			// Events (with output read back from the sink) and the journal.
			var evs bytes.Buffer
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			last, err := db.Runners.(controller.RunnerStore).LastEventSeq(ctx, session)
			if err != nil {
				t.Fatal(err)
			}
			err = s.c.Follow(fctx, operator, session, 0, func(e controller.StoredEvent) error {
				b, _ := json.Marshal(e)
				evs.Write(b)
				if e.Event.Output != nil {
					evs.Write(e.Event.Output.Data) // raw, not only base64
				}
				if e.Seq >= last {
					return errStop
				}
				return nil
			})
			if !errors.Is(err, errStop) {
				t.Fatal(err)
			}
			if !bytes.Contains(evs.Bytes(), []byte("ran")) {
				t.Errorf("the events lack the task's output: %s", evs.String())
			}
			cmds, err := db.Runners.(controller.RunnerStore).CommandsAfter(ctx, session, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			jb, _ := json.Marshal(cmds)
			for what, b := range map[string][]byte{"events": evs.Bytes(), "command journal and digests": jb,
				"controller log": []byte(clog.String()), "runner log": []byte(rlog.String())} {
				if bytes.Contains(b, []byte(canary)) {
					t.Errorf("%s hold the secret", what)
				}
			}
			if controller.SecretFrames(s.c) != 1 {
				t.Errorf("secrets frames sent = %d, want 1", controller.SecretFrames(s.c))
			}
			n := testenv.CanaryInFiles(t, canary, "runner state", stateDir)
			n += testenv.CanaryInFiles(t, canary, "output sink", dataDir)
			if kind == "sqlite" {
				n += testenv.CanaryInFiles(t, canary, "SQLite files", filepath.Dir(dbFile))
			} else {
				n += testenv.CanaryInPostgres(t, url, canary)
			}
			t.Logf("%s: scanned %d files or rows, the events, the journal and %d bytes of logs", kind, n, len(clog.String())+len(rlog.String()))
		})
	}
}

var errStop = errors.New("stop")

// A dispatch whose secrets the resolver refuses journals nothing; secrets
// the resolver cannot resolve at delivery make the runner refuse the
// command with the resolver's code, and nothing runs.
func TestSecretsRefusedAtDispatchAndDelivery(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{Secrets: mapResolver{
		values: map[string]string{"TOKEN": "v", "secret:acct@v1": "a"},
		gone:   map[string]bool{"secret:acct@v1": true}}})
	var logs syncbuf.Buffer
	startLoggedChild(t, s, t.TempDir(), true, &logs)
	session := waitSession(t, s)
	ctx := context.Background()
	work, out := t.TempDir(), t.TempDir()
	ts := secretTask("t1", work, out)
	ts.Secrets[0].Ref = "NOPE"
	if _, err := s.c.StartTask(ctx, operator, session, "c1", ts); err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Fatalf("dispatch with an unknown secret = %v, want a refusal naming it", err)
	}
	if _, err := s.c.Wait(ctx, operator, session, "c1"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("a refused dispatch was journaled: %v", err)
	}
	if _, err := s.c.StartTask(ctx, operator, session, "c2", secretTask("t2", work, out)); err != nil {
		t.Fatal(err)
	}
	res := wait(t, s, session, "c2")
	if res.Status != prp.ResultRejected || res.Code != prpwire.CodeSecretsUnavailable || !strings.HasPrefix(res.Message, "gone:") {
		t.Errorf("result = %+v, want rejected %s with the resolver's code", res, prpwire.CodeSecretsUnavailable)
	}
	if _, err := os.Stat(filepath.Join(out, "env")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the task ran without its secrets: %v", err)
	}
	// Without a resolver, a task with secrets is refused at dispatch.
	bare := newServer(t, serverOptions{})
	startLoggedChild(t, bare, t.TempDir(), true, &logs)
	bs := waitSession(t, bare)
	if _, err := bare.c.StartTask(ctx, operator, bs, "c1", secretTask("t1", work, out)); !errors.Is(err, controller.ErrSecretsUnsupported) {
		t.Errorf("dispatch without a resolver = %v, want ErrSecretsUnsupported", err)
	}
}

// A resume after the command ran redelivers nothing: the runner is killed
// (-9) after the task ran and restarted on its state directory; the
// command's redelivery (same id) answers from the journal, and no secrets
// frame is sent again.
func TestSecretsNotRedeliveredOnResume(t *testing.T) {
	t.Parallel()
	s := newServer(t, serverOptions{Secrets: mapResolver{values: map[string]string{"TOKEN": "v1", "secret:acct@v1": "a1"}}})
	var logs syncbuf.Buffer
	stateDir := t.TempDir()
	child := startLoggedChild(t, s, stateDir, true, &logs)
	session := waitSession(t, s)
	ctx := context.Background()
	work, out := t.TempDir(), t.TempDir()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", secretTask("t1", work, out)); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, s, session, "c1"); res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("result = %+v, want done with exit 0", res)
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	for s.c.Connected(session) {
		time.Sleep(10 * time.Millisecond)
	}
	startLoggedChildOf(t, s, stateDir, false, session, &logs)
	if got := waitSession(t, s); got != session {
		t.Fatalf("the restarted runner resumed session %s, want %s", got, session)
	}
	rec, err := s.c.StartTask(ctx, operator, session, "c1", secretTask("t1", work, out))
	if err != nil || rec.Result == nil || !rec.Result.Duplicate {
		t.Fatalf("redispatch of c1 = %+v, %v; want the stored result marked duplicate", rec.Result, err)
	}
	// A task without secrets still runs on the resumed session.
	if _, err := s.c.StartTask(ctx, operator, session, "c2", prp.TaskStart{TaskID: "t2", Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, s, session, "c2"); res.Status != prp.ResultDone {
		t.Fatalf("c2 = %+v", res)
	}
	if n := controller.SecretFrames(s.c); n != 1 {
		t.Errorf("secrets frames sent = %d, want 1 (nothing redelivered)", n)
	}
}
