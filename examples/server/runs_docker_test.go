package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/internal/syncbuf"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// serverChildEnv holds the JSON argument list of a server process: the
// test binary started with it runs the server (run) instead of the
// tests, prints "listening ADDR" and serves until it is killed.
const serverChildEnv = "BERTH_TEST_SERVER_ARGS"

// serverChildMain is TestMain's branch for a server process.
func serverChildMain() int {
	var args []string
	if err := json.Unmarshal([]byte(os.Getenv(serverChildEnv)), &args); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ready := make(chan string, 1)
	go func() { fmt.Printf("listening %s\n", <-ready) }()
	if err := run(context.Background(), args, os.Stderr, ready); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		return 1
	}
	return 0
}

// serverProc is a server in a process of its own.
type serverProc struct {
	*tenv
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
}

// startServerProc starts the server with the Docker driver over data,
// the runners' directory runners (output and signing key; "": in data)
// and store ("" for SQLite in data), maintenance every second and run
// claims of 3 s.
func startServerProc(t *testing.T, data, runners, store string) *serverProc {
	t.Helper()
	tokens := filepath.Join(data, "tokens.json")
	if err := os.WriteFile(tokens, []byte(testTokens), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-data", data, "-drivers", "docker", "-listen", "127.0.0.1:0", "-tokens", tokens,
		"-sweep-interval", "1s", "-run-claim", "3s", "-xterm-dir", ""}
	if store != "" {
		args = append(args, "-store", store)
	}
	if runners != "" {
		args = append(args, "-runner-dir", runners)
	}
	b, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), serverChildEnv+"="+string(b), RunnerBinaryEnv+"="+testenv.RunnerBinary(t))
	p := &serverProc{cmd: cmd, stderr: &syncbuf.Buffer{}}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("server process %d log:\n%s", cmd.Process.Pid, p.stderr.String())
		}
	})
	sc := bufio.NewScanner(out)
	addr := ""
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			addr = a
			break
		}
	}
	if addr == "" {
		t.Fatalf("the server process did not start:\n%s", p.stderr.String())
	}
	go func() {
		for sc.Scan() {
		}
	}()
	p.tenv = &tenv{t: t, ts: &httptest.Server{URL: "http://" + addr}, router: docRouter(t)}
	return p
}

// kill9 kills the server process with SIGKILL and waits for it.
func (p *serverProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// counter counts lines, 50 a second, for 100000 lines.
var counter = []string{"sh", "-c", `i=0; while [ $i -lt 100000 ]; do echo $i; i=$((i+1)); sleep 0.02; done`}

// readLines reads a run's output from seq 0 as JSON pages until at least
// n lines came, and returns the text and the seq of each chunk's end.
func (e *tenv) readLines(t *testing.T, company, id string, n int) (string, []uint64, []int) {
	t.Helper()
	var text strings.Builder
	var seqs []uint64
	var ends []int
	from := uint64(0)
	deadline := time.Now().Add(3 * time.Minute)
	for strings.Count(text.String(), "\n") < n {
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %d lines of output, want %d", id, strings.Count(text.String(), "\n"), n)
		}
		var page struct {
			Items []outputChunk `json:"items"`
			Ended bool          `json:"ended"`
		}
		e.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/" + company + "/runs/" + id + "/output?from=" + strconv.FormatUint(from, 10), token: tokAdmin}).decode(t, &page)
		for _, c := range page.Items {
			text.WriteString(c.Text)
			seqs, ends = append(seqs, c.Seq), append(ends, text.Len())
			from = c.Seq
		}
		if page.Ended {
			break
		}
		if len(page.Items) == 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	return text.String(), seqs, ends
}

// checkCount fails unless out is the counter's lines 0, 1, … in order
// (its last line may be cut).
func checkCount(t *testing.T, out string) int {
	t.Helper()
	lines := strings.Split(out[:strings.LastIndexByte(out, '\n')+1], "\n")
	lines = lines[:len(lines)-1]
	for i, l := range lines {
		if l != strconv.Itoa(i) {
			t.Fatalf("line %d of the output is %q: a line lost or repeated", i, l)
		}
	}
	return len(lines)
}

// dockerRunEnv saves a Docker environment labelled mark on p.
func dockerRunEnv(t *testing.T, p *serverProc, name, image, mark string) string {
	t.Helper()
	var v environment.View
	p.must(t, http.StatusCreated, call{method: "POST", path: "/api/v1/environments", token: tokAdmin,
		body: map[string]any{"name": name, "driver": "docker", "config": map[string]any{"image": image, "network": "none", "labels": map[string]string{"test.berth/run": mark}}}}).decode(t, &v)
	return v.ID
}

func containersOf(t *testing.T, cli *client.Client, mark string) []container.Summary {
	t.Helper()
	left, err := cli.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", "test.berth/run="+mark))})
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// describeContainers names containers with their state and berth lease
// label, for a failure's message.
func describeContainers(cs []container.Summary) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s (%s, %s, labels %v)", strings.Join(c.Names, ","), c.State, c.Status, c.Labels))
	}
	return strings.Join(parts, "; ")
}

func randomMark() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// A run survives kill -9 of its server (real Docker engine, real runner):
// the server restarted on the same data directory takes the run over
// (Manager.Open, Handle.Reattach) once its old claim lapsed; the output
// read through the new server is the counter's lines from 0, each once
// and in order, across the kill, and reading on from a chunk's seq read
// before the kill continues exactly there; a run whose task ended while
// no server was up shows the exit the controller stored; the stop gives a
// complete proof and the lease's confirmed receipt, and no container is
// left.
func TestRunSurvivesKill9OfItsServerOnDocker(t *testing.T) {
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	mark := randomMark()
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", mark)
	data := t.TempDir()
	a := startServerProc(t, data, "", "")
	env := dockerRunEnv(t, a, "box", img.Ref, mark)
	run := a.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": env, "argv": counter, "timeoutSeconds": 600})
	short := a.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": env, "argv": []string{"sh", "-c", "sleep 4; echo bye; exit 7"}, "timeoutSeconds": 600})
	before, seqs, ends := a.readLines(t, "acme", run.ID, 20)
	a.waitRun(t, "acme", short.ID, tokAdmin, func(v runView) bool { return v.Status == runRunning })
	a.kill9(t)
	time.Sleep(5 * time.Second) // the short task ends while no server is up

	b := startServerProc(t, data, "", "")
	out, _, _ := b.readLines(t, "acme", run.ID, checkCountAtLeast(before)+200)
	n := checkCount(t, out)
	if !strings.HasPrefix(out, before[:ends[len(ends)-1]]) {
		t.Errorf("the output read after the restart does not start with what was read before")
	}
	// Reading on from the last seq read before the kill continues there.
	var page struct {
		Items []outputChunk `json:"items"`
	}
	last := seqs[len(seqs)-1]
	b.must(t, http.StatusOK, call{method: "GET", path: "/api/v1/companies/acme/runs/" + run.ID + "/output?from=" + strconv.FormatUint(last, 10), token: tokAdmin}).decode(t, &page)
	if len(page.Items) == 0 || !strings.HasPrefix(out[ends[len(ends)-1]:], page.Items[0].Text) || page.Items[0].Seq <= last {
		t.Errorf("output after seq %d: %+v; want the bytes after %d of the output", last, page.Items, ends[len(ends)-1])
	}
	done := b.waitRun(t, "acme", short.ID, tokAdmin, ended)
	if done.Status != runExited || done.Exit == nil || done.Exit.Code != 7 {
		t.Errorf("the run whose task ended while no server was up: %+v (error %+v)", done, done.Error)
	}
	var stopped runView
	b.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + run.ID + "/stop", token: tokAdmin}).decode(t, &stopped)
	if stopped.Status != runStopped || len(stopped.Proofs) != 1 || !stopped.Proofs[0].Complete || len(stopped.Proofs[0].Survivors) != 0 ||
		stopped.Receipt == nil || stopped.Receipt.Cleanup != "confirmed" {
		t.Errorf("the stop after the restart: %+v (error %+v)", stopped, stopped.Error)
	}
	if left := containersOf(t, cli, mark); len(left) != 0 {
		t.Errorf("%d containers left after the runs ended: %s; the ended run's receipt %+v, error %+v", len(left), describeContainers(left), done.Receipt, done.Error)
	}
	t.Logf("%d lines read across the kill (%d before it)", n, strings.Count(before, "\n"))
}

func checkCountAtLeast(s string) int { return strings.Count(s, "\n") }

// With two replicas on one PostgreSQL, kill -9 of the one running two
// runs: the other takes both over once the dead one's claims lapsed (its
// maintenance, every second; claims of 3 s). The long run's output goes
// on, read through the survivor, its lines each once and in order; the
// run with a deadline of 10 s ends at it (the runner times its task out)
// and its lease is released with a confirmed receipt: its container is
// gone when it reads as ended.
func TestReplicaTakesOverRunsOfAKilledReplicaOnDocker(t *testing.T) {
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	markLong, markShort := randomMark(), randomMark()
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", markLong)
	testenv.RemoveContainersAtCleanup(t, cli, "test.berth/run", markShort)
	dsn := testenv.Postgres(t)
	// Each replica has its data directory; they share the database and
	// the runners' directory.
	runners := t.TempDir()
	a := startServerProc(t, t.TempDir(), runners, dsn)
	b := startServerProc(t, t.TempDir(), runners, dsn)
	envLong := dockerRunEnv(t, a, "long", img.Ref, markLong)
	envShort := dockerRunEnv(t, a, "short", img.Ref, markShort)
	long := a.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": envLong, "argv": counter, "timeoutSeconds": 600})
	short := a.startRun(t, "acme", tokAdmin, map[string]any{"environmentId": envShort, "argv": []string{"sleep", "600"}, "timeoutSeconds": 10})
	t.Logf("started at %s", time.Now().UTC().Format(time.RFC3339Nano))
	before, _, _ := b.readLines(t, "acme", long.ID, 20)
	a.waitRun(t, "acme", short.ID, tokAdmin, func(v runView) bool { return v.Status == runRunning })
	a.kill9(t)
	t.Logf("killed at %s", time.Now().UTC().Format(time.RFC3339Nano))

	out, _, _ := b.readLines(t, "acme", long.ID, strings.Count(before, "\n")+200)
	checkCount(t, out)
	done := b.waitRun(t, "acme", short.ID, tokAdmin, ended)
	// Ended at its deadline: by the runner (the task's deadline, an exit
	// that says so) or, had the runner not ended it, by the survivor's
	// stop with a proof; either way its lease released with a receipt.
	byRunner := done.Status == runExited && done.Exit != nil && done.Exit.TimedOut
	byStop := done.Status == runStopped && len(done.Proofs) == 1 && done.Proofs[0].Complete
	if !byRunner && !byStop || done.Receipt == nil || done.Receipt.Cleanup != "confirmed" {
		t.Errorf("the run past its deadline after its replica died: %+v (exit %+v, error %+v)", done, done.Exit, done.Error)
	}
	if left := containersOf(t, cli, markShort); len(left) != 0 {
		t.Errorf("%d containers of the run past its deadline left after it ended", len(left))
	}
	var stopped runView
	b.must(t, http.StatusOK, call{method: "POST", path: "/api/v1/companies/acme/runs/" + long.ID + "/stop", token: tokAdmin}).decode(t, &stopped)
	if stopped.Status != runStopped || len(stopped.Proofs) != 1 || !stopped.Proofs[0].Complete || stopped.Receipt == nil || stopped.Receipt.Cleanup != "confirmed" {
		t.Errorf("the long run stopped on the survivor: %+v (error %+v)", stopped, stopped.Error)
	}
	if left := containersOf(t, cli, markLong); len(left) != 0 {
		t.Errorf("%d containers of the long run left", len(left))
	}
	if !strings.Contains(b.stderr.String(), "took a run over") {
		t.Errorf("the survivor's log does not say it took the runs over")
	}
}
