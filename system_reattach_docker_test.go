package berth_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/ssh"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/leasehook"
	"github.com/berthdev/berth/internal/leasetune"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/store/sqlite"
)

// reattachDirEnv names the directory of a reattach host process: the test
// binary started with it runs reattachHost instead of the tests (TestMain).
const reattachDirEnv = "BERTH_TEST_REATTACH_DIR"

// reattachConfig is what the test hands its host process.
type reattachConfig struct {
	DB, Env, Runner string
}

// reattachHeartbeat is the host lease heartbeat of the reattach test's
// processes: a killed holder's claim on an SSH lease expires after three
// of them (lease.Manager.Open waits for that).
const reattachHeartbeat = time.Second

// reattachSystem composes a host of the reattach test over dir: the
// SQLite file, the secret files, the runners' output directory and
// signing key that every process of the host shares, the Docker and ssh
// drivers.
func reattachSystem(ctx context.Context, dir string, c reattachConfig) (*berth.System, func(), error) {
	db, err := sqlite.Open(ctx, c.DB)
	if err != nil {
		return nil, nil, err
	}
	lo := &lease.Options{}
	leasehook.Tune(lo, func(k *leasetune.Knobs) { k.HostHeartbeat = reattachHeartbeat })
	sys, err := berth.New(ctx, &berth.Options{Stores: db.Stores(), Secrets: fileSecrets(filepath.Join(dir, "secrets")),
		Drivers: []drivers.Driver{docker.New(nil), ssh.New(nil)}, Leases: lo,
		RunnerBinary: c.Runner, RunnerKeys: [][]byte{bytes.Repeat([]byte("r"), 32)},
		RunnerDir: filepath.Join(dir, "output"), RunnerHeartbeat: time.Second})
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

// Issue 49 item 2: a task outlives the process that started it, on Docker
// and on SSH (the test sshd on this host). A host process acquires a lease
// with a runner and runs a task that counts; it is killed with -9
// mid-task. A new process (this test, over the same SQLite file, secret
// files, output directory and signing key) opens the lease
// (Manager.Open: a Docker container is resumed by id; an SSH lease is
// taken over once the killed holder's claim expired, over a fresh session
// whose lease directory is the first one's), reattaches the task
// (Handle.Reattach: it serves the runner's ingress again, the Docker
// socket or the SSH forward at the same path), and reads the output from
// the start: every line exactly once and in order, across the kill, and
// more after it; reading on from a chunk's seq misses nothing. Stop gives
// a complete proof, the target has one runner of the lease (none was
// started twice), and the release ends the lease with proof. Real Docker
// engine, real sshd, real runner binary.
func TestReattachAfterKill9OnDocker(t *testing.T) {
	_, img, run := dockerRig(t)
	testReattachAfterKill9(t, "docker", map[string]any{"image": img.Ref, "network": "none", "labels": map[string]any{"test.berth/run": run}})
}

// TestReattachAfterKill9OnSSH is TestReattachAfterKill9OnDocker on an SSH
// lease of the test sshd (testenv.SSHD), whose runner's ingress is a unix
// socket forward.
func TestReattachAfterKill9OnSSH(t *testing.T) {
	srv := testenv.SSHD(t)
	testReattachAfterKill9(t, "ssh", map[string]any{
		"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir()})
}

// TestReattachAfterKill9OnDropbear is TestReattachAfterKill9OnSSH on
// Dropbear, which forwards no unix socket: the runner's ingress is a TCP
// port on the server's loopback, which the lease directory records so that
// the new process forwards the same port (max_sessions 2, as for the
// driver's Dropbear suite).
func TestReattachAfterKill9OnDropbear(t *testing.T) {
	srv := testenv.Dropbear(t)
	testReattachAfterKill9(t, "ssh", map[string]any{
		"host": srv.Host(), "port": srv.Port(), "user": srv.User(),
		"private_key": srv.ClientKeyPEM(), "known_hosts": []any{srv.KnownHostsLine()}, "workdir": t.TempDir(),
		"max_sessions": 2})
}

func testReattachAfterKill9(t *testing.T, driver string, cfg map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	c := reattachConfig{DB: "sqlite://" + filepath.Join(dir, "berth.db"), Runner: testenv.RunnerBinary(t)}
	sys, closeSys, err := reattachSystem(ctx, dir, c)
	if err != nil {
		t.Fatal(err)
	}
	ops := authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}
	env, err := sys.Catalog().Create(ctx, ops, environment.CreateRequest{Name: "reattach", Driver: driver, Config: cfg})
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
	var childErr syncbuf.Buffer
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
	opened := time.Since(killed)
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	task, err := h.Reattach(rctx, taskID)
	rcancel()
	if err != nil {
		res, _ := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "tail -c 3000 /.berth/state/runner.log; ps -ef"}})
		if res != nil {
			t.Logf("runner log and processes:\n%s%s", res.Stdout, res.Stderr)
		}
		t.Logf("connected sessions here: %v", berth.Runners(sys).ConnectedSessions())
		t.Fatalf("reattach: %v", err)
	}
	t.Logf("%s: reattached %s %.1fs after the kill (opened %.1fs after it)", driver, taskID, time.Since(killed).Seconds(), opened.Seconds())
	// Read from the start: what was stored until Output returns less
	// than a full batch (the lines before the kill and those the runner
	// kept while no process served it), then 100 lines more, which come
	// through the new connection.
	var out []byte
	var seqs []uint64
	caughtUp, want := 0, 0
	for after := uint64(0); want == 0 || countLines(out) < want; {
		cs, err := task.Output(ctx, after)
		if err != nil {
			t.Fatalf("output after seq %d: %v", after, err)
		}
		if want == 0 && len(cs) < 256 {
			caughtUp = countLines(out) + countChunkLines(cs)
			want = caughtUp + 100
		}
		for _, ch := range cs {
			if ch.Stream != "stdout" {
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
	// The runners of the lease, by their argument --lease=ID (the [x]
	// keeps grep's own argument from matching), zombies left out.
	arg := "--lease=" + leaseID
	pat := arg[:len(arg)-1] + "[" + arg[len(arg)-1:] + "]"
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c",
		`n=0; for p in /proc/[0-9]*; do s=$(cat $p/stat 2>/dev/null) || continue; case "$s" in *") Z "*) continue;; esac; tr '\0' '\n' < $p/cmdline 2>/dev/null | grep -qx -- '` + pat + `' && n=$((n+1)); done; echo $n`}})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "1" {
		t.Errorf("runner processes of the lease: %q, %v; want 1", res.Stdout, err)
	}
	l, err := h.Release(ctx, lease.ReleaseOptions{})
	if err != nil || l.Status != lease.StatusReleased || l.Cleanup != "confirmed" {
		t.Errorf("release: %+v, %v", l, err)
	}
	if l != nil {
		t.Logf("%s: %d lines (%d bytes), %d chunks read across the kill, %d of the lines stored when the reader caught up; release: %s, %s",
			driver, countLines(out), len(out), len(seqs), caughtUp, l.Cleanup, l.CleanupEvidenceKind)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the test ran out of time")
	}
}

// fileSecrets is a host's environment.SecretStore in files of dir, which
// the processes of the reattach test share (an SSH lease's private key is
// read again by the process that reattaches).
type fileSecrets string

func (d fileSecrets) file(ref config.SecretRef) string {
	return filepath.Join(string(d), fmt.Sprintf("%s.%d", ref.ID, ref.Version))
}

func (d fileSecrets) Put(ctx context.Context, owner, field, value string) (config.SecretRef, error) {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return config.SecretRef{}, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	ref := config.SecretRef{ID: "sec_" + hex.EncodeToString(b[:]), Version: 1}
	return ref, os.WriteFile(d.file(ref), []byte(value), 0o600)
}

func (d fileSecrets) Replace(ctx context.Context, ref config.SecretRef, value string) (config.SecretRef, error) {
	for v := int64(1); ; v++ {
		next := config.SecretRef{ID: ref.ID, Version: v}
		if _, err := os.Stat(d.file(next)); errors.Is(err, os.ErrNotExist) {
			if v == 1 {
				return config.SecretRef{}, fmt.Errorf("secret %s: %w", ref.ID, errcode.ErrNotFound)
			}
			return next, os.WriteFile(d.file(next), []byte(value), 0o600)
		}
	}
}

func (d fileSecrets) Get(ctx context.Context, ref config.SecretRef) (string, error) {
	b, err := os.ReadFile(d.file(ref))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("secret %s: %w", ref, errcode.ErrNotFound)
	}
	return string(b), err
}

func (d fileSecrets) Delete(ctx context.Context, ref config.SecretRef) error {
	if ref.Version != 0 {
		if err := os.Remove(d.file(ref)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	fs, _ := filepath.Glob(filepath.Join(string(d), ref.ID+".*"))
	for _, f := range fs {
		_ = os.Remove(f)
	}
	return nil
}

func countLines(b []byte) int { return bytes.Count(b, []byte("\n")) }

func countChunkLines(cs []lease.OutputChunk) int {
	n := 0
	for _, c := range cs {
		n += countLines(c.Data)
	}
	return n
}
