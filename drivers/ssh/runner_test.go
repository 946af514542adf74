package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/driverkit"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/proctest"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

var runnerOperator = authz.Principal{ID: "op-1", Role: authz.RoleAgent, Companies: []string{"co-1"}}

// runnerRig is a lease on the test sshd with an open runner ingress on
// which a real controller (memory store) is served.
type runnerRig struct {
	e    *env
	sb   *sandbox
	in   *ingress
	ctrl *controller.Controller
}

func newRunnerRig(t *testing.T) *runnerRig {
	t.Helper()
	e := newEnv(t)
	sb := e.acquire(t, e.config(t, nil))
	bin, sum := testenv.RunnerBinarySum(t)
	ctx := testCtx(t)
	ri, err := sb.HostRunner(ctx, drivers.RunnerSpec{Binary: bin, SHA256: sum})
	if err != nil {
		t.Fatalf("HostRunner: %v", err)
	}
	in := ri.(*ingress)
	signer, err := prp.NewSigner("k1", map[string][]byte{"k1": bytes.Repeat([]byte("k"), 32)})
	if err != nil {
		t.Fatal(err)
	}
	leases := lease.NewMemoryStore()
	leasetest.RecordActive(t, leases, "lease-1", "co-1")
	ctrl, _, err := controller.New(signer, leases, nil, &controller.Options{
		Store: controller.NewMemoryStore(), DataDir: t.TempDir(),
		Authorizer: authz.AuthorizerFunc(func(_ context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
			if a == authz.ActionLease && p.HasCompany(r.Company) {
				return nil
			}
			return authz.Denied(p, a, r)
		}),
		Heartbeat: time.Second, Poll: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: ctrl}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(in) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
		if err := in.Close(); err != nil {
			t.Errorf("closing the ingress: %v", err)
		}
		ctrl.Close()
	})
	return &runnerRig{e: e, sb: sb, in: in, ctrl: ctrl}
}

// launch mints a ticket, launches the runner through the ingress and
// waits until its session is connected. The runner is killed at cleanup.
func (r *runnerRig) launch(t *testing.T) (session, ticket string) {
	t.Helper()
	ctx := testCtx(t)
	tk, _, err := r.ctrl.MintTicket(ctx, runnerOperator, controller.TicketRequest{Lease: "lease-1", Run: "run-1", Company: "co-1", Scope: prp.ScopeTask})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range runnerPIDs(r.in.sock) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			b, _ := os.ReadFile(r.stateDir("lease-1") + "/" + "runner.log")
			t.Logf("runner.log:\n%s", b)
		}
	})
	if err := r.in.Launch(ctx, drivers.RunnerLaunch{Lease: "lease-1", Ticket: tk.String(), Env: map[string]string{"BERTH_LEASE": "lease-1"}}); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	return r.waitSession(t, ""), tk.String()
}

func (r *runnerRig) stateDir(lease string) string { return r.in.dir + "/state-" + shortHash(lease) }

// waitSession waits until a session other than not is connected.
func (r *runnerRig) waitSession(t *testing.T, not string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, id := range r.ctrl.ConnectedSessions() {
			if id != not || not == "" {
				return id
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no runner connected through the ingress within a minute")
	return ""
}

// runnerPIDs returns the live processes whose argv is a runner dialing
// the socket sock.
func runnerPIDs(sock string) []int {
	return proctest.LivePIDs("\x00--controller\x00" + "unix:" + sock + "\x00")
}

// PRP over SSH: a real runner, uploaded and launched through the ingress,
// reaches a real controller served on it; a task's output arrives byte
// for byte with its exit code. The ticket is in no process's argv, nor in
// the runner's environment, and its file is gone once the runner read it.
func TestRunnerThroughSSHIngressRunsATask(t *testing.T) {
	t.Parallel()
	r := newRunnerRig(t)
	if fi, err := os.Stat(r.in.dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("lease directory %s: %v, %v; want mode 0700", r.in.dir, fi.Mode(), err)
	}
	if got := r.in.Endpoint(); got != "unix:"+r.in.dir+"/prp.sock" {
		t.Errorf("Endpoint = %q", got)
	}
	session, ticket := r.launch(t)

	// The ticket: no argv of any process, not the runner's environment,
	// its file removed.
	pids := runnerPIDs(r.in.sock)
	if len(pids) != 1 {
		t.Fatalf("runner processes dialing %s: %v, want one", r.in.sock, pids)
	}
	ents, _ := os.ReadDir("/proc")
	scanned := 0
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil {
			scanned++
			if bytes.Contains(b, []byte(ticket)) {
				t.Errorf("process %s has the ticket in its argv", e.Name())
			}
		}
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/stat"); err != nil {
		t.Fatal(err)
	} else if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) < 4 || f[3] != strconv.Itoa(pids[0]) {
		t.Errorf("the runner (pid %d) is in session %v, want a session of its own", pids[0], f)
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/environ")
	if err != nil {
		t.Fatalf("reading the runner's environment: %v", err)
	}
	if bytes.Contains(env, []byte(ticket)) {
		t.Errorf("the runner's environment holds the ticket")
	}
	if !bytes.Contains(env, []byte("BERTH_LEASE=lease-1\x00")) {
		t.Errorf("the runner's environment lacks Launch's Env")
	}
	if left, _ := filepath.Glob(r.stateDir("lease-1") + "/ticket-*"); len(left) != 0 {
		t.Errorf("ticket files left after the runner read them: %v", left)
	}
	t.Logf("scanned the argv of %d processes", scanned)

	// A task through the ingress: bytes that are not UTF-8, exit 7.
	want := make([]byte, 256<<10)
	rand.Read(want)
	want = append(want, 0xff, 0x00, '\n')
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, want, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	att, err := r.ctrl.Reattach(ctx, runnerOperator, session)
	if err != nil {
		t.Fatal(err)
	}
	task, err := att.Start(ctx, runnerOperator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "t1", Argv: []string{"sh", "-c", `cat "$1"; printf err >&2; exit 7`, "sh", file}}})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := task.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 7 {
		t.Fatalf("exit = %+v, want exit code 7", exit)
	}
	got, err := r.ctrl.Output(ctx, runnerOperator, session, "t1", prp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("stdout: %d bytes, want the file's %d bytes, identical", len(got), len(want))
	}
	if got, err := r.ctrl.Output(ctx, runnerOperator, session, "t1", prp.Stderr); err != nil || string(got) != "err" {
		t.Errorf("stderr = %q, %v; want %q", got, err, "err")
	}
}

// A dropped SSH connection (sshd's process for it killed, not the runner)
// mid-task: the ingress redials and forwards the same socket path again,
// the runner reconnects through it and the task's output is complete.
// The test sshd keeps sshd's default StreamLocalBindUnlink (no), so the
// old forward's socket file is left behind for the ingress to remove.
func TestRunnerIngressSurvivesADroppedConnection(t *testing.T) {
	t.Parallel()
	r := newRunnerRig(t)
	conf, err := os.ReadFile(filepath.Join(r.e.srv.Dir(), "sshd_config"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(bytes.ToLower(conf), []byte("streamlocalbindunlink")) {
		t.Fatalf("the test sshd sets StreamLocalBindUnlink; this test needs the default (no)")
	}
	session, _ := r.launch(t)
	runnerPID := runnerPIDs(r.in.sock)
	ctx := testCtx(t)
	const lines = 3000
	script := `i=1; while [ $i -le ` + strconv.Itoa(lines) + ` ]; do echo "line $i"; i=$((i+1)); if [ $((i % 100)) -eq 0 ]; then sleep 0.05; fi; done`
	att, err := r.ctrl.Reattach(ctx, runnerOperator, session)
	if err != nil {
		t.Fatal(err)
	}
	task, err := att.Start(ctx, runnerOperator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "t1", Argv: []string{"sh", "-c", script}}})
	if err != nil {
		t.Fatal(err)
	}
	// Mid-task: some output is in, the task still runs.
	deadline := time.Now().Add(time.Minute)
	var atDrop int
	for {
		out, _ := r.ctrl.Output(ctx, runnerOperator, session, "t1", prp.Stdout)
		if atDrop = len(out); atDrop > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no output within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.sb.c.mu.Lock()
	gen := r.sb.c.gen
	r.sb.c.mu.Unlock()
	if out, err := exec.Command("pkill", "-KILL", "-P", strconv.Itoa(r.e.srv.PID())).CombinedOutput(); err != nil {
		t.Fatalf("pkill sshd's connection processes: %v %s", err, out)
	}
	exit, err := task.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if exit.Code != 0 {
		t.Fatalf("exit = %+v, want exit code 0", exit)
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		want.WriteString("line " + strconv.Itoa(i) + "\n")
	}
	got, err := r.ctrl.Output(ctx, runnerOperator, session, "t1", prp.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("stdout: %d bytes, want %d identical", len(got), want.Len())
	}
	if atDrop >= want.Len() {
		t.Errorf("the connection dropped after all %d bytes had arrived; want it mid-task", atDrop)
	}
	r.in.mu.Lock()
	forwards := r.in.forwards
	r.in.mu.Unlock()
	r.sb.c.mu.Lock()
	newGen := r.sb.c.gen
	r.sb.c.mu.Unlock()
	if forwards < 2 || newGen <= gen {
		t.Errorf("forwards opened %d, connection generation %d -> %d; want the forward re-opened on a redialed connection", forwards, gen, newGen)
	}
	if fi, err := os.Stat(r.in.sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the socket %s after the redial: %v, %v; want a socket at the same path", r.in.sock, fi, err)
	}
	if after := runnerPIDs(r.in.sock); len(after) != 1 || len(runnerPID) != 1 || after[0] != runnerPID[0] {
		t.Errorf("runner processes before the drop %v, after %v; want the same one", runnerPID, after)
	}
	t.Logf("dropped at %d bytes; %d forwards, %d bytes compared", atDrop, forwards, want.Len())
}

// Why the ingress removes the old socket: with the test sshd's default
// StreamLocalBindUnlink, a forward on a new connection at the path of a
// dropped one is refused while the old socket file is there.
func TestStaleForwardSocketBlocksANewForward(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(t, nil)
	tg, err := parseTarget(e.d.schema, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	dialed := func() *xssh.Client {
		c, err := dial(testCtx(t), tg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c1 := dialed()
	if _, err := c1.ListenUnix(sock); err != nil {
		t.Fatalf("first forward: %v", err)
	}
	if out, err := exec.Command("pkill", "-KILL", "-P", strconv.Itoa(e.srv.PID())).CombinedOutput(); err != nil {
		t.Fatalf("pkill: %v %s", err, out)
	}
	_ = c1.Wait()
	c2 := dialed()
	if ln, err := c2.ListenUnix(sock); err == nil {
		ln.Close()
		t.Fatalf("a forward over the stale socket %s succeeded; want it refused (StreamLocalBindUnlink no)", sock)
	}
	if err := os.Remove(sock); err != nil {
		t.Fatalf("the stale socket: %v", err)
	}
	ln, err := c2.ListenUnix(sock)
	if err != nil {
		t.Fatalf("a forward after removing the stale socket: %v", err)
	}
	ln.Close()
}

// The runner is uploaded once per SHA-256: a second lease with the same
// sum copies nothing; a file with the wrong contents is replaced; a spec
// whose sum is not the binary's is refused naming sha256, a binary for
// another machine with drivers.ErrUnsupported, a file that is no ELF
// executable naming binary, all before any upload.
func TestRunnerUploadedOncePerSum(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bin, sum := testenv.RunnerBinarySum(t)
	spec := drivers.RunnerSpec{Binary: bin, SHA256: sum}
	ctx := testCtx(t)
	host := func() time.Duration {
		t.Helper()
		sb := e.acquire(t, e.config(t, nil))
		start := time.Now()
		in, err := sb.HostRunner(ctx, spec)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("HostRunner: %v", err)
		}
		if err := in.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if _, err := os.Stat(in.(*ingress).sock); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the socket after Close: %v, want it removed", err)
		}
		return took
	}
	remote := filepath.Join(e.srv.Home(), ".cache", "berth", "runner", sum)
	fileSum := func() string {
		b, err := os.ReadFile(remote)
		if err != nil {
			t.Fatalf("the uploaded runner: %v", err)
		}
		h := sha256.Sum256(b)
		return hex.EncodeToString(h[:])
	}

	cold := host()
	if n := e.d.uploads.Load(); n != 1 {
		t.Fatalf("uploads after the first lease = %d, want 1", n)
	}
	if got := fileSum(); got != sum {
		t.Fatalf("uploaded file's sum %s, want %s", got, sum)
	}
	if fi, err := os.Stat(filepath.Dir(remote)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("runner directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	warm := host()
	if n := e.d.uploads.Load(); n != 1 {
		t.Errorf("uploads after a second lease with the same sum = %d, want still 1", n)
	}

	if err := os.WriteFile(remote, []byte("#!/bin/sh\necho corrupted\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	host()
	if n := e.d.uploads.Load(); n != 2 {
		t.Errorf("uploads after corrupting the installed file = %d, want 2", n)
	}
	if got := fileSum(); got != sum {
		t.Errorf("the replaced file's sum %s, want %s", got, sum)
	}
	fi, _ := os.Stat(bin)
	t.Logf("HostRunner with an upload of %d bytes: %v; with the binary present: %v (%.1fx)", fi.Size(), cold, warm, float64(cold)/float64(warm))
	if left, _ := filepath.Glob(remote + ".tmp.*"); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}

	sb := e.acquire(t, e.config(t, nil))
	bad := drivers.RunnerSpec{Binary: bin, SHA256: strings.Repeat("0", 64)}
	if _, err := sb.HostRunner(ctx, bad); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("HostRunner with a wrong sum = %v, want an error naming sha256", err)
	}
	if _, err := sb.HostRunner(ctx, drivers.RunnerSpec{Binary: bin + ".missing", SHA256: sum}); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Errorf("HostRunner with a missing binary = %v, want an error naming binary", err)
	}
	// A binary for another machine (its ELF header says aarch64; the test
	// sshd is this x86_64 host), and a file that is no ELF executable.
	other := filepath.Join(t.TempDir(), "runner-other")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if elf.Machine(binary.LittleEndian.Uint16(b[18:])) != elf.EM_X86_64 {
		t.Skip("the test expects an x86_64 host")
	}
	binary.LittleEndian.PutUint16(b[18:], uint16(elf.EM_AARCH64))
	script := filepath.Join(t.TempDir(), "runner-script")
	for path, content := range map[string][]byte{other: b, script: []byte("#!/bin/sh\n")} {
		if err := os.WriteFile(path, content, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	otherSum := sha256.Sum256(b)
	if _, err := sb.HostRunner(ctx, drivers.RunnerSpec{Binary: other, SHA256: hex.EncodeToString(otherSum[:])}); !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), "EM_AARCH64") {
		t.Errorf("HostRunner with an aarch64 binary = %v, want ErrUnsupported naming the machine", err)
	}
	scriptSum := sha256.Sum256([]byte("#!/bin/sh\n"))
	if _, err := sb.HostRunner(ctx, drivers.RunnerSpec{Binary: script, SHA256: hex.EncodeToString(scriptSum[:])}); err == nil || !strings.Contains(err.Error(), "runner spec: binary") {
		t.Errorf("HostRunner with a shell script = %v, want an error naming binary", err)
	}
	if n := e.d.uploads.Load(); n != 2 {
		t.Errorf("uploads after refused specs = %d, want still 2", n)
	}
}

// Release ends the runners the lease launched, with the processes that
// inherited their mark (a task that left the runner's process group, here
// emulated by a setsid'd sleep), although they are in sessions of their
// own; it removes the lease directory (socket and runner state) on the
// server and leaves the uploaded binary. On an unprivileged account too,
// where nothing of the account can read the environment of the runner (it
// is not dumpable): Release finds it by its command line.
func TestReleaseEndsRunnersAndRemovesTheLeaseDirectory(t *testing.T) {
	t.Parallel()
	for _, unprivileged := range []bool{false, true} {
		t.Run(map[bool]string{false: "login", true: "unprivileged"}[unprivileged], func(t *testing.T) {
			t.Parallel()
			testReleaseEndsRunners(t, unprivileged)
		})
	}
}

func testReleaseEndsRunners(t *testing.T, unprivileged bool) {
	e := newEnv(t)
	bin, sum := testenv.RunnerBinarySum(t)
	ctx := testCtx(t)
	home := e.srv.Home()
	cfg := e.config(t, nil)
	if unprivileged {
		acct, h := e.srv.UnprivilegedLogin(t)
		home = h
		cfg = e.config(t, func(raw map[string]any) { raw[fieldUser], raw[fieldWorkdir] = acct.Name, h })
	}
	sb := e.acquire(t, cfg)
	ri, err := sb.HostRunner(ctx, drivers.RunnerSpec{Binary: bin, SHA256: sum})
	if err != nil {
		t.Fatal(err)
	}
	in := ri.(*ingress)
	t.Cleanup(func() {
		for _, pid := range runnerPIDs(in.sock) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// Nobody serves the ingress: the runner waits for the controller.
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: "lease-1", Ticket: "not-a-real-ticket"}); err != nil {
		t.Fatal(err)
	}
	res, err := sb.Exec(ctx, drivers.Command{
		Argv: []string{"sh", "-c", `setsid sleep 300 </dev/null >/dev/null 2>&1 &`},
		Env:  map[string]string{driverkit.RunnerMarkEnv: sb.dirKey},
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("start the escapee: %v, %+v", err, res)
	}
	var runners []int
	for deadline := time.Now().Add(30 * time.Second); len(runners) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runners = runnerPIDs(in.sock)
	}
	if len(runners) != 1 {
		t.Fatalf("runner processes %v, want one", runners)
	}
	marked := markedPIDs(sb.dirKey)
	t.Cleanup(func() {
		for _, pid := range marked {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if len(marked) != 2 {
		t.Fatalf("marked processes %v, want the runner and the escapee", marked)
	}
	start := time.Now()
	rc, err := sb.Release(ctx, drivers.Destroy)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Release took %v", time.Since(start))
	if left := runnerPIDs(in.sock); len(left) != 0 {
		t.Errorf("runner processes after Release: %v", left)
	}
	if left := markedPIDs(sb.dirKey); len(left) != 0 {
		t.Errorf("marked processes after Release: %v", left)
	}
	if !rc.Confirmed || !strings.Contains(rc.Evidence, "2 runner processes ended") {
		t.Errorf("receipt %+v, want confirmed with 2 runner processes ended", rc)
	}
	if _, err := os.Stat(in.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lease directory %s after Release: %v, want it removed", in.dir, err)
	}
	if _, err := os.Stat(filepath.Join(home, ".cache", "berth", "runner", sum)); err != nil {
		t.Errorf("the uploaded runner after Release: %v, want it kept", err)
	}
	if _, err := in.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Release = %v, want net.ErrClosed", err)
	}
}

// markedPIDs returns the live processes whose environment holds the entry
// driverkit.RunnerMarkEnv=nonce.
func markedPIDs(nonce string) []int {
	return proctest.LivePIDs("\x00" + driverkit.RunnerMarkEnv + "=" + nonce + "\x00")
}
