package controller_test

import (
	"context"
	"github.com/berthdev/berth/internal/prpwire"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
)

// startAccountRunner runs the runner binary as acct against s, with a
// ticket and a state directory of acct's own.
func startAccountRunner(t *testing.T, s *server, acct testenv.Account, logs *syncbuf.Buffer) {
	t.Helper()
	home := acct.Dir(t)
	state := filepath.Join(home, "state")
	tf := filepath.Join(home, "ticket")
	if err := os.WriteFile(tf, []byte(s.ticket(t, prp.ScopeTask)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tf, acct.UID, acct.GID); err != nil {
		t.Fatal(err)
	}
	bin := acct.Install(t, testenv.RunnerBinary(t))
	cmd := acct.Command(exec.Command(bin, "--controller", s.URL(), "--lease", "lease-1", "--state-dir", state, "--ticket-file", tf))
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.String())
		}
	})
}

// Issue 22 item 9: a secret is written only into a file the runner created
// itself. As the unprivileged account, with a 0666 file of another user
// (root) planted in a sticky directory, a symlink at the path, and a
// symlinked parent directory, the task is refused with
// prpwire.CodeSecretFile, nothing ran, and no planted or linked file holds the
// value; a file in a new directory still gets it (mode 0600).
func TestSecretFileOnlyTheRunnersOwn(t *testing.T) {
	t.Parallel()
	acct := testenv.UnprivilegedAccount(t)
	canary := newCanary(t)
	s := newServer(t, serverOptions{Secrets: mapResolver{values: map[string]string{"V": canary}}})
	var logs syncbuf.Buffer
	startAccountRunner(t, s, acct, &logs)
	session := waitSession(t, s)
	ctx := context.Background()

	// A sticky, world-writable directory (like /tmp) with a 0666 file of
	// root's in it.
	sticky, err := os.MkdirTemp("", "berth-sticky-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sticky) })
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(sticky, "planted.json")
	if err := os.WriteFile(planted, []byte("planted"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(planted, 0o666); err != nil {
		t.Fatal(err)
	}
	// The account's own work directory: a symlink at the path (to a file
	// of the account's), a symlinked parent (to a directory of its own).
	work := acct.Dir(t)
	target := filepath.Join(work, "target")
	elsewhere := filepath.Join(work, "elsewhere")
	if err := os.WriteFile(target, []byte("target"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(elsewhere, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(work, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(work, "sub")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{target, elsewhere, filepath.Join(work, "link.json"), filepath.Join(work, "sub")} {
		if err := os.Lchown(p, acct.UID, acct.GID); err != nil {
			t.Fatal(err)
		}
	}

	refused := map[string]string{
		"planted": planted,
		"symlink": "link.json",
		"parent":  "sub/secret.json",
	}
	for name, file := range refused {
		id := "c-" + name
		ts := prp.TaskStart{TaskID: "t-" + name, Cwd: work, Argv: []string{"sh", "-c", "touch ran-" + name},
			Secrets: []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "V", File: file}}}
		if _, err := s.c.StartTask(ctx, operator, session, id, ts); err != nil {
			t.Fatal(err)
		}
		res := wait(t, s, session, id)
		if res.Status != prp.ResultRejected || res.Code != prpwire.CodeSecretFile {
			t.Errorf("%s: result %s %s (%s), want rejected %s", name, res.Status, res.Code, res.Message, prpwire.CodeSecretFile)
		}
		if strings.Contains(res.Message, canary) {
			t.Errorf("%s: the refusal holds the value", name)
		}
		if _, err := os.Stat(filepath.Join(work, "ran-"+name)); err == nil {
			t.Errorf("%s: the task ran", name)
		}
	}
	if got := readFile(t, planted); got != "planted" {
		t.Errorf("the planted file holds %q, want it unchanged", got)
	}
	if got := readFile(t, target); got != "target" {
		t.Errorf("the symlink's target holds %q, want it unchanged", got)
	}
	if ents, err := os.ReadDir(elsewhere); err != nil || len(ents) != 0 {
		t.Errorf("the symlinked parent's target holds %v (%v), want nothing", ents, err)
	}
	testenv.CanaryInFiles(t, canary, "the planted and linked files", sticky, work)

	// A new directory and file of the runner's own still get the value.
	ts := prp.TaskStart{TaskID: "t-ok", Cwd: work, Argv: []string{"sh", "-c", `stat -c %a new/secret.json; stat -c %a new`},
		Secrets: []prp.SecretUse{{Source: prp.SecretFromEnvironment, Ref: "V", File: "new/secret.json"}}}
	if _, err := s.c.StartTask(ctx, operator, session, "c-ok", ts); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, s, session, "c-ok"); res.Status != prp.ResultDone || res.Exit == nil || res.Exit.Code != 0 {
		t.Fatalf("c-ok = %+v, want done with exit 0", res)
	}
	out, err := s.c.Output(ctx, operator, session, "t-ok", prp.Stdout)
	if err != nil || string(out) != "600\n700\n" {
		t.Errorf("modes of the new file and directory = %q, %v; want 600 and 700", out, err)
	}
	if _, err := os.Stat(filepath.Join(work, "new", "secret.json")); err == nil {
		t.Error("the secret file was left after the task ended")
	}
}
