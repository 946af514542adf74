package berth_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/prp"
	"github.com/berthdev/berth/prp/controller"
	"github.com/berthdev/berth/store/sqlite"
)

// reattachDirEnv names the directory of a reattach host process: the test
// binary started with it runs reattachHost instead of the tests (TestMain).
const reattachDirEnv = "BERTH_TEST_REATTACH_DIR"

// reattachConfig is what the test hands its host process.
type reattachConfig struct {
	DB, Env, Runner string
}

// reattachSystem composes a host of the reattach test over dir: the
// SQLite file, the runners' output directory and signing key that every
// process of the host shares, the Docker driver.
func reattachSystem(ctx context.Context, dir string, c reattachConfig) (*berth.System, func(), error) {
	db, err := sqlite.Open(ctx, c.DB)
	if err != nil {
		return nil, nil, err
	}
	signer, err := prp.NewSigner("k1", map[string][]byte{"k1": bytes.Repeat([]byte("r"), 32)})
	if err != nil {
		return nil, nil, err
	}
	sys, err := berth.New(ctx, &berth.Options{Stores: db.Stores(), MemorySecrets: true, Drivers: []drivers.Driver{docker.New(nil)},
		RunnerBinary: c.Runner, RunnerSigner: signer,
		Runners: &controller.Options{DataDir: filepath.Join(dir, "output"), Heartbeat: time.Second}})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return sys, func() { sys.Close(); db.Close() }, nil
}

// reattachHost is the first host process: it acquires the lease with a
// runner, runs a task that counts, writes the lease and task ids, reads
// the task's output until 20 lines came and says so, and then waits to be
// killed with -9.
func reattachHost(dir string) error {
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	var c reattachConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	sys, _, err := reattachSystem(ctx, dir, c)
	if err != nil {
		return err
	}
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	h, err := sys.Leases().Acquire(ctx, ops, lease.AcquireRequest{Company: "acme", EnvironmentID: c.Env, WithRunner: true})
	if err != nil {
		return err
	}
	task, err := h.Run(ctx, lease.Command{TaskID: "task_counter", Argv: []string{"sh", "-c", `i=0; while [ $i -lt 100000 ]; do echo $i; i=$((i+1)); sleep 0.02; done`}})
	if err != nil {
		return err
	}
	fmt.Printf("%s %s\n", h.ID(), task.ID())
	r := bufio.NewReader(task.Stream(ctx))
	for range 20 {
		if _, err := r.ReadString('\n'); err != nil {
			return err
		}
	}
	fmt.Println("running")
	select {}
}

// Issue 49 item 2: a task outlives the process that started it. A host
// process acquires a Docker lease with a runner and runs a task that
// counts; it is killed with -9 mid-task. A new process (this test, over
// the same SQLite file, output directory and signing key) opens the lease
// (Manager.Open), reattaches the task (Handle.Reattach: it serves the
// runner's ingress again), and reads the output from the start: every
// line exactly once and in order, across the kill, and more after it;
// reading on from a chunk's seq misses nothing. Stop gives a complete
// proof, the container has one runner (none was started twice), and the
// release destroys the sandbox with proof. Real Docker engine, real
// runner binary.
func TestReattachAfterKill9OnDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	run := randomHex(t)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", run)
	dir := t.TempDir()
	c := reattachConfig{DB: "sqlite://" + filepath.Join(dir, "berth.db"), Runner: testenv.RunnerBinary(t)}
	sys, closeSys, err := reattachSystem(ctx, dir, c)
	if err != nil {
		t.Fatal(err)
	}
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "reattach", Driver: docker.Name,
		Config: map[string]any{docker.FieldImage: img.Ref, docker.FieldNetwork: "none", docker.FieldLabels: map[string]any{"test.berth/run": run}}})
	if err != nil {
		t.Fatal(err)
	}
	closeSys()
	c.Env = env.ID
	b, _ := json.Marshal(c)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	// The first host process, killed with -9 once its task runs.
	child := exec.CommandContext(ctx, os.Args[0])
	child.Env = append(os.Environ(), reattachDirEnv+"="+dir)
	var childErr bytes.Buffer
	child.Stderr = &childErr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	lines := bufio.NewScanner(stdout)
	var ids []string
	for lines.Scan() {
		if lines.Text() == "running" {
			break
		}
		ids = strings.Fields(lines.Text())
	}
	if len(ids) != 2 {
		t.Fatalf("the host process said no lease and task (%v)\nstderr:\n%s", lines.Err(), childErr.String())
	}
	leaseID, taskID := ids[0], ids[1]
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed := time.Now()

	// The new process.
	sys, closeSys, err = reattachSystem(ctx, dir, c)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSys()
	h, err := sys.Leases().Open(ctx, ops, leaseID)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	task, err := h.Reattach(rctx, taskID)
	rcancel()
	if err != nil {
		res, _ := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "tail -c 3000 /.berth/state/runner.log; ps -ef"}})
		if res != nil {
			t.Logf("runner log and processes:\n%s%s", res.Stdout, res.Stderr)
		}
		t.Logf("connected sessions here: %v", sys.Runners().ConnectedSessions())
		t.Fatalf("reattach: %v", err)
	}
	t.Logf("reattached %s %.1fs after the kill", taskID, time.Since(killed).Seconds())
	// Read from the start until 100 lines past the kill's have come.
	var out []byte
	var seqs []uint64
	for after := uint64(0); countLines(out) < 200; {
		cs, err := task.Output(ctx, after)
		if err != nil {
			t.Fatalf("output after seq %d: %v", after, err)
		}
		for _, ch := range cs {
			if ch.Stream != prp.Stdout {
				t.Fatalf("stderr output %q", ch.Data)
			}
			out = append(out, ch.Data...)
			seqs = append(seqs, ch.Seq)
			after = ch.Seq
		}
	}
	for i, l := range strings.Split(strings.TrimSuffix(string(out[:bytes.LastIndexByte(out, '\n')+1]), "\n"), "\n") {
		if l != strconv.Itoa(i) {
			t.Fatalf("line %d of the output is %q: a line lost or repeated across the kill", i, l)
		}
	}
	// Reading on from a chunk's seq gives the bytes after it exactly.
	mid := len(seqs) / 2
	var head []byte
	cs, err := task.Output(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range cs {
		if ch.Seq > seqs[mid] {
			break
		}
		head = append(head, ch.Data...)
	}
	more, err := task.Output(ctx, seqs[mid])
	if err != nil || len(more) == 0 || !bytes.HasPrefix(out[len(head):], more[0].Data) {
		t.Errorf("output after seq %d does not continue byte-exact: %v", seqs[mid], err)
	}
	proof, err := task.Stop(ctx)
	if err != nil || !proof.Complete || len(proof.Survivors) != 0 {
		t.Fatalf("stop after the reattach: %+v, %v", proof, err)
	}
	if exit, err := task.Wait(ctx); err != nil || exit.Signal == "" {
		t.Errorf("wait after the stop: %+v, %v", exit, err)
	}
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c",
		`n=0; for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" in /.berth/bin/berth-runner*) n=$((n+1));; esac; done; echo $n`}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "1" {
		t.Errorf("runner processes in the container: %q, %v; want 1", res.Stdout, err)
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != lease.CleanupConfirmed {
		t.Errorf("release: %+v, %v", l, err)
	}
	t.Logf("%d lines, %d chunks read across the kill", countLines(out), len(seqs))
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the test ran out of time")
	}
}

func countLines(b []byte) int { return bytes.Count(b, []byte("\n")) }
