package controller_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
)

// hostileScript runs as the runner's task, as the runner's own user: it
// dumps every file of the runner's state directory, its own environment
// and the runner's /proc files into $1, stops the runner (kill -STOP) and
// stays.
const hostileScript = `out=$1; state=$2; r=$PPID
for f in "$state"/* "$state"/.*; do [ -f "$f" ] && cat "$f"; done > "$out/state" 2>/dev/null
cat /proc/self/environ > "$out/self-environ"
cat /proc/$r/environ > "$out/runner-environ" 2>/dev/null
cat /proc/$r/cmdline > "$out/runner-cmdline" 2>/dev/null
ls -l /proc/$r/fd/ > "$out/runner-fd" 2>/dev/null
for fd in /proc/$r/fd/*; do timeout 1 cat "$fd"; done > "$out/runner-fds" 2>/dev/null
dd if=/proc/$r/mem of="$out/runner-mem" bs=4096 count=1 skip=1 2>/dev/null
kill -STOP $r
echo ready > "$out/ready"
exec sleep 300`

// Issue 22 item 2: a task of the real runner binary, both running as the
// unprivileged account, reads everything it can reach (the runner's state
// directory, its own environment, the runner's /proc files) and stops the
// runner. It finds neither the ticket, nor the token, nor the state key;
// the runner's environment, fds and memory are closed to it
// (non-dumpable); a connection with the session's token (as if it had
// one) is refused while the runner's connection lives; and StopAndVerify
// of the still running task never says complete.
func TestAHostileTaskCannotBecomeItsRunner(t *testing.T) {
	t.Parallel()
	acct := testenv.UnprivilegedAccount(t)
	s := newServer(t, serverOptions{Options: controller.WithLimits(controller.Options{}, prpwire.Welcome{Heartbeat: time.Second, DeadAfter: time.Minute})})
	bin := acct.Install(t, testenv.RunnerBinary(t))
	state, out, home := acct.Dir(t), acct.Dir(t), acct.Dir(t)
	ticket := s.ticket(t, prp.ScopeTask)
	tf := filepath.Join(home, "ticket")
	if err := os.WriteFile(tf, []byte(ticket), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tf, acct.UID, acct.GID); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	cmd := acct.Command(exec.Command(bin, "--controller", s.URL(), "--lease", "lease-1", "--state-dir", state, "--ticket-file", tf))
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		for _, pid := range tagged("hostile") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("runner log:\n%s", logs.String())
		}
	})
	session := waitSession(t, s)
	ctx := context.Background()
	if _, err := s.c.StartTask(ctx, operator, session, "c1", prp.TaskStart{TaskID: "hostile", Argv: []string{"sh", "-c", hostileScript, "sh", out, state}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(out, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hostile task did not get ready within a minute")
		}
	}

	key := prpwire.StateKey(testSigner(t), session)
	secrets := map[string][]byte{
		"the ticket":                 []byte(ticket),
		"a token":                    []byte("prpk1."),
		"the state key":              key,
		"the state key (hex)":        []byte(hex.EncodeToString(key)),
		"the state key (base64)":     []byte(base64.StdEncoding.EncodeToString(key)),
		"the state key (base64url)":  []byte(base64.RawURLEncoding.EncodeToString(key)),
		"the ticket's body (base64)": []byte(strings.TrimPrefix(ticket, "prpt1_")),
	}
	dumps, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dumps {
		b, err := os.ReadFile(filepath.Join(out, d.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for what, secret := range secrets {
			if bytes.Contains(b, secret) {
				t.Errorf("the task's dump %s holds %s", d.Name(), what)
			}
		}
	}
	// Non-dumpable: the runner's environment, fds and memory are closed
	// to its same-user task (its argv is not: nothing secret there).
	for _, f := range []string{"runner-environ", "runner-fd", "runner-fds", "runner-mem"} {
		if b, _ := os.ReadFile(filepath.Join(out, f)); len(b) > 0 {
			t.Errorf("the task read the runner's %s (%d bytes)", strings.TrimPrefix(f, "runner-"), len(b))
		}
	}
	if b, _ := os.ReadFile(filepath.Join(out, "runner-cmdline")); !bytes.Contains(b, []byte("--state-dir")) {
		t.Errorf("runner cmdline %q: the check of what the task could read did not run", b)
	}

	// Had the task the session's token: a second connection is refused
	// while the (stopped) runner's connection lives.
	if code := connectStatus(t, s, session); code != http.StatusConflict {
		t.Errorf("a second connection of the live session: HTTP %d, want 409", code)
	}

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if proofs, err := s.c.StopAndVerify(sctx, operator, session, time.Second); err == nil {
		t.Errorf("StopAndVerify of the task the stopped runner still runs = %+v, want an error", proofs)
	}
	if len(tagged("hostile")) == 0 {
		t.Error("the hostile task is gone: the check of StopAndVerify did not run against a live task")
	}
}
