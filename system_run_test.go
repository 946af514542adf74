package berth_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/lease"
)

// runWorld is a System on the fake driver (which runs berth's runner in
// this process) with an environment bound to acme's workspace ws.
type runWorld struct {
	sys     *berth.System
	env     *environment.View
	secrets environment.SecretStore
	agent   authz.Principal
	ops     authz.Principal
}

func newRunWorld(t *testing.T) *runWorld {
	t.Helper()
	ctx := context.Background()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := &runWorld{secrets: envhook.NewMemorySecretStore().(environment.SecretStore),
		agent: authz.Principal{ID: "bot", Role: authz.RoleAgent, Companies: []string{"acme"}},
		ops:   authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}}
	w.sys, err = berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fake.New(nil)}, TestMode: true, RunnerBinary: self, Secrets: w.secrets,
		ProjectAuthChecker: everyProject{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.sys.Close() })
	if w.env, err = w.sys.Catalog().Create(ctx, w.ops, environment.CreateRequest{Name: "runs", Driver: "fake"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.sys.Assignments().Set(ctx, w.ops, environment.Binding{BindingRef: environment.BindingRef{Kind: environment.BindingWorkspace, Key: "ws", Company: "acme"},
		EnvironmentID: w.env.ID}, 0); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *runWorld) acquire(t *testing.T, withRunner bool) *lease.Handle {
	t.Helper()
	h, err := w.sys.Leases().Acquire(context.Background(), w.agent, lease.AcquireRequest{Scope: &authz.Scope{Company: "acme", Workspace: "ws"}, WithRunner: withRunner})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := h.Release(context.Background(), lease.ReleaseOptions{}); err != nil {
			t.Errorf("release: %v", err)
		}
	})
	return h
}

// Issue 49 item 1: Handle.Run does what the four calls did (RunnerSet,
// AcquireRequest.Runner, Attach, Start) for the agent who holds the
// handle: several tasks on one runner, output read from any offset and
// streamed whether or not someone waits, an output limit, a task id that
// ran before starts nothing again, a managed account handed in, stdin,
// and a stop with the runner's proof.
func TestRunOnTheLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newRunWorld(t)
	h := w.acquire(t, true)

	t.Run("output streamed and read from an offset, with and without Wait", func(t *testing.T) {
		task, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", "echo one; echo two >&2; echo three"}})
		if err != nil {
			t.Fatal(err)
		}
		// Two streams read concurrently with Wait.
		var wg sync.WaitGroup
		got := make([]string, 2)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b, err := io.ReadAll(task.Stream(ctx))
				if err != nil {
					t.Errorf("stream %d: %v", i, err)
				}
				got[i] = string(b)
			}()
		}
		exit, err := task.Wait(ctx)
		wg.Wait()
		if err != nil || exit.Code != 0 {
			t.Fatalf("wait: %+v, %v", exit, err)
		}
		// Every chunk, in the order stored; stdout and stderr are two
		// pipes, so their interleaving is the order the runner read them.
		var all []lease.OutputChunk
		for after := uint64(0); ; {
			more, err := task.Output(ctx, after)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, more...)
			after = more[len(more)-1].Seq
		}
		var whole, stdout, stderr bytes.Buffer
		for _, c := range all {
			whole.Write(c.Data)
			if c.Stream == "stderr" {
				stderr.Write(c.Data)
			} else {
				stdout.Write(c.Data)
			}
		}
		if stdout.String() != "one\nthree\n" || stderr.String() != "two\n" {
			t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
		}
		for i, g := range got {
			if g != whole.String() {
				t.Errorf("stream %d read %q, want the stored output %q", i, g, whole.String())
			}
		}
		// Output from the first chunk's seq skips that chunk only.
		cs, err := task.Output(ctx, all[0].Seq)
		if err != nil || len(cs) != len(all)-1 || (len(cs) > 0 && cs[0].Seq != all[1].Seq) {
			t.Errorf("output after seq %d: %d chunks, %v; want the %d after it", all[0].Seq, len(cs), err, len(all)-1)
		}
	})

	t.Run("Manager.Task reads a task without taking the lease", func(t *testing.T) {
		task, err := h.Run(ctx, lease.Command{TaskID: "task_read", Argv: []string{"sh", "-c", "echo seen; echo err >&2; exit 3"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := task.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		// A reader (another replica, or this one without the handle) finds
		// the task by ids and reads what is stored.
		found, err := w.sys.Leases().Task(ctx, w.agent, h.ID(), "task_read")
		if err != nil || found.ID() != "task_read" || found.Lease() != h.ID() {
			t.Fatalf("Manager.Task: %v, %v", found, err)
		}
		exit, err := found.Wait(ctx)
		if err != nil || exit.Code != 3 {
			t.Errorf("wait: %+v, %v; want code 3", exit, err)
		}
		if b, err := io.ReadAll(found.Stream(ctx)); err != nil || (string(b) != "seen\nerr\n" && string(b) != "err\nseen\n") {
			t.Errorf("stream: %q, %v", b, err)
		}
		// A lease of another company is missing for the agent; a lease
		// whose runner never connected has no task session yet.
		if _, err := w.sys.Leases().Task(ctx, authz.Principal{ID: "other", Role: authz.RoleAgent, Companies: []string{"globex"}}, h.ID(), "task_read"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("another company's agent: %v, want not found", err)
		}
		fresh := w.acquire(t, true)
		if _, err := w.sys.Leases().Task(ctx, w.agent, fresh.ID(), "task_read"); !errors.Is(err, errcode.ErrNotFound) {
			t.Errorf("a lease without a runner session: %v, want not found", err)
		}
		plain := w.acquire(t, false)
		if _, err := w.sys.Leases().Task(ctx, w.agent, plain.ID(), "task_read"); !errors.Is(err, drivers.ErrUnsupported) {
			t.Errorf("a lease without a runner: %v, want unsupported", err)
		}
	})

	t.Run("a task id that ran before starts nothing again", func(t *testing.T) {
		cmd := lease.Command{TaskID: "task_once", Argv: []string{"sh", "-c", "echo ran >> \"$0\"", t.TempDir() + "/count"}}
		first, err := h.Run(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := first.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		again, err := h.Run(ctx, cmd)
		if err != nil || again.ID() != "task_once" {
			t.Fatalf("second run: %v, %v", again, err)
		}
		if _, err := again.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(cmd.Argv[3])
		if err != nil || string(b) != "ran\n" {
			t.Errorf("the task ran %q, %v; want once", b, err)
		}
	})

	t.Run("output limit", func(t *testing.T) {
		task, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", "head -c 100000 /dev/zero"}, OutputLimit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		exit, err := task.Wait(ctx)
		if err != nil || !exit.Truncated {
			t.Fatalf("wait: %+v, %v; want truncated", exit, err)
		}
		b, err := io.ReadAll(task.Stream(ctx))
		if err != nil || len(b) > 1000 {
			t.Errorf("stored %d bytes, %v; want at most 1000", len(b), err)
		}
	})

	t.Run("stdin and deadline", func(t *testing.T) {
		task, err := h.Run(ctx, lease.Command{Argv: []string{"cat"}, Stdin: strings.NewReader("fed")})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(task.Stream(ctx)); err != nil || string(b) != "fed" {
			t.Errorf("cat printed %q, %v", b, err)
		}
		late, err := h.Run(ctx, lease.Command{Argv: []string{"sleep", "600"}, Deadline: time.Now().Add(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		if exit, err := late.Wait(ctx); err != nil || !exit.TimedOut {
			t.Errorf("past its deadline: %+v, %v; want timed out", exit, err)
		}
	})

	t.Run("managed account", func(t *testing.T) {
		ref, err := w.secrets.Put(ctx, "host", "managed_account", "account-canary")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.sys.Handover().PrepareManagedAccount(ctx, w.ops, "acme", ref.String(), w.env.ID, []string{"p1"}); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		task, err := h.Run(ctx, lease.Command{Argv: []string{"cat", "account"}, Dir: dir,
			Secrets: []lease.SecretUse{{Source: lease.SecretFromManagedAccount, Ref: ref.String(), File: "account", Projects: []string{"p1"}}}})
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(task.Stream(ctx)); err != nil || string(b) != "account-canary" {
			t.Errorf("the task read %q, %v", b, err)
		}
		_, err = h.Run(ctx, lease.Command{Argv: []string{"true"},
			Secrets: []lease.SecretUse{{Source: lease.SecretFromManagedAccount, Ref: ref.String(), File: "account", Projects: []string{"other"}}}})
		if !errors.Is(err, handover.ErrMismatch) {
			t.Errorf("an account for other projects: %v, want handover.ErrMismatch", err)
		}
	})

	t.Run("stop with proof", func(t *testing.T) {
		task, err := h.Run(ctx, lease.Command{Argv: []string{"sh", "-c", "echo up; sleep 600"}, StopGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := task.Output(ctx, 0); err != nil { // it runs
			t.Fatal(err)
		}
		proof, err := task.Stop(ctx)
		if err != nil || !proof.Complete || len(proof.Survivors) != 0 || proof.TaskID != task.ID() {
			t.Fatalf("stop: %+v, %v", proof, err)
		}
		again, err := task.Stop(ctx)
		if err != nil || again.VerifiedAt != proof.VerifiedAt {
			t.Errorf("second stop: %+v, %v; want the same proof", again, err)
		}
		if exit, err := task.Wait(ctx); err != nil || exit.Signal == "" {
			t.Errorf("wait after stop: %+v, %v", exit, err)
		}
	})
}

// Issue 49 item 1: Run refuses what it cannot do, starting nothing: a lease
// acquired without a runner, an empty argv, stdin over MaxRunStdin; Exec
// takes the same Command and refuses a task's secrets.
func TestRunRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newRunWorld(t)
	plain := w.acquire(t, false)
	if _, err := plain.Run(ctx, lease.Command{Argv: []string{"true"}}); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("run on a lease without a runner: %v, want ErrUnsupported", err)
	}
	// Exec takes the same Command: a secret is a task's, refused there;
	// a deadline ends the process.
	if _, err := plain.Exec(ctx, lease.Command{Argv: []string{"true"}, Secrets: []lease.SecretUse{{Source: lease.SecretFromEnvironment, Ref: "T", Env: "T"}}}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("exec with secrets: %v, want ErrInvalid", err)
	}
	if res, err := plain.Exec(ctx, lease.Command{Argv: []string{"echo", "ok"}, Deadline: time.Now().Add(time.Minute)}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec before its deadline: %+v, %v", res, err)
	}
	if _, err := plain.Exec(ctx, lease.Command{Argv: []string{"sleep", "600"}, Deadline: time.Now().Add(200 * time.Millisecond)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec past its deadline: %v, want context.DeadlineExceeded", err)
	}
	h := w.acquire(t, true)
	if _, err := h.Run(ctx, lease.Command{}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("run of nothing: %v, want ErrInvalid", err)
	}
	big := strings.NewReader(strings.Repeat("x", leasehook.MaxRunStdin+1))
	if _, err := h.Run(ctx, lease.Command{Argv: []string{"cat"}, Stdin: big}); !errors.Is(err, errcode.ErrInvalid) {
		t.Errorf("run with too much stdin: %v, want ErrInvalid", err)
	}
	// Without a runner binary named, WithRunner builds the runner from
	// berth's source (package runnerbin, into the user's cache) before
	// anything is allocated, and Run runs on it.
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{fake.New(nil)}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	env, err := sys.Catalog().Create(ctx, w.ops, environment.CreateRequest{Name: "built", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	built, err := sys.Leases().Acquire(ctx, w.ops, lease.AcquireRequest{Company: "acme", EnvironmentID: env.ID, WithRunner: true})
	if err != nil {
		t.Fatalf("WithRunner and no runner binary named: %v", err)
	}
	defer built.Release(context.WithoutCancel(ctx), lease.ReleaseOptions{})
	if r := built.Lease().Runner; r == nil || !strings.Contains(r.Binary, filepath.Join("berth", "runner")) {
		t.Errorf("the lease's runner %+v, want the one runnerbin built in the user's cache", r)
	}
	task, err := built.Run(ctx, lease.Command{Argv: []string{"echo", "built"}})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(task.Stream(ctx)); err != nil || string(b) != "built\n" {
		t.Errorf("task printed %q, %v", b, err)
	}
}

// A lease whose runner the host attached itself (Controller.Attach) in
// this process runs tasks with Handle.Run on that runner's session.
func TestRunAfterAHostsOwnAttach(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newRunWorld(t)
	h := w.acquire(t, true)
	att, err := berth.Runners(w.sys).Attach(ctx, w.agent, h, controller.AttachRequest{})
	if err != nil {
		t.Fatal(err)
	}
	task, err := h.Run(ctx, lease.Command{Argv: []string{"echo", "same runner"}})
	if err != nil {
		t.Fatalf("run after attach: %v", err)
	}
	if b, err := io.ReadAll(task.Stream(ctx)); err != nil || string(b) != "same runner\n" {
		t.Errorf("task printed %q, %v", b, err)
	}
	if ids := berth.Runners(w.sys).ConnectedSessions(); len(ids) != 1 || ids[0] != att.Session() {
		t.Errorf("connected sessions %v, want only the attached one %s", ids, att.Session())
	}
}
