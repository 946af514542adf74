package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/internal/controller"
	"github.com/berthdev/berth/internal/proctest"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/lease/leasetest"
)

// operator may act on co-1's runners.
var operator = authz.Principal{ID: "op-1", Role: authz.RoleAgent, Companies: []string{"co-1"}}

// companyPolicy allows ActionLease to principals with a grant for the
// resource's company.
var companyPolicy = authz.AuthorizerFunc(func(_ context.Context, p authz.Principal, a authz.Action, r authz.Resource) error {
	if a == authz.ActionLease && p.HasCompany(r.Company) {
		return nil
	}
	return authz.Denied(p, a, r)
})

// trackingListener remembers the connections it accepted, so that a test
// can cut them (the controller hijacks them for WebSockets, out of the
// http.Server's reach).
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// cut closes every connection accepted so far and returns how many.
func (l *trackingListener) cut() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.conns)
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.conns = nil
	return n
}

// prpHost is a real internal/controller (memory store) served on a container's
// runner ingress.
type prpHost struct {
	t      testing.TB
	c      *controller.Controller
	leases lease.Store
	host   drivers.RunnerHost
	spec   drivers.RunnerSpec

	mu  sync.Mutex
	in  drivers.RunnerIngress
	ln  *trackingListener
	srv *http.Server
}

func newPRPHost(t testing.TB, sb drivers.Sandbox, spec drivers.RunnerSpec) *prpHost {
	t.Helper()
	signer, err := prp.NewSigner("k1", map[string][]byte{"k1": []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	leases := lease.NewMemoryStore()
	c, _, err := controller.New(signer, leases, nil, &controller.Options{Authorizer: companyPolicy, DataDir: t.TempDir(),
		Heartbeat: time.Second, Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	host, err := drivers.SandboxAs[drivers.RunnerHost](sb, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := &prpHost{t: t, c: c, leases: leases, host: host, spec: spec}
	t.Cleanup(func() {
		h.stop()
		c.Close()
	})
	return h
}

// serve opens the ingress (HostRunner) and serves the controller on it.
func (h *prpHost) serve(ctx context.Context) drivers.RunnerIngress {
	h.t.Helper()
	in, err := h.host.HostRunner(ctx, h.spec)
	if err != nil {
		h.t.Fatalf("HostRunner: %v", err)
	}
	ln := &trackingListener{Listener: in}
	srv := &http.Server{Handler: h.c}
	go func() { _ = srv.Serve(ln) }()
	h.mu.Lock()
	h.in, h.ln, h.srv = in, ln, srv
	h.mu.Unlock()
	return in
}

// stop stops serving, closes the ingress and cuts every connection the
// runner had made through it.
func (h *prpHost) stop() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv == nil {
		return 0
	}
	_ = h.srv.Close()
	_ = h.in.Close()
	n := h.ln.cut()
	h.srv, h.in, h.ln = nil, nil, nil
	return n
}

// launch mints a ticket for lease and launches the runner with it.
func (h *prpHost) launch(ctx context.Context, in drivers.RunnerIngress, lease string) string {
	h.t.Helper()
	leasetest.RecordActive(h.t, h.leases, lease, "co-1")
	tk, _, err := h.c.MintTicket(ctx, operator, controller.TicketRequest{Lease: lease, Run: "run-1", Company: "co-1", Scope: prp.ScopeTask})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: lease, Ticket: tk.String(), Env: map[string]string{"BERTH_LEASE": lease}}); err != nil {
		h.t.Fatalf("Launch: %v", err)
	}
	return tk.String()
}

// session waits until a runner is connected and returns its session.
func (h *prpHost) session(ctx context.Context, sb drivers.Sandbox) string {
	h.t.Helper()
	for ctx.Err() == nil {
		if ids := h.c.ConnectedSessions(); len(ids) > 0 {
			return ids[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	res, _ := sb.Exec(context.Background(), drivers.Command{Argv: []string{"cat", docker.RunnerStateDir + "/" + "runner.log"}})
	if res != nil {
		h.t.Logf("runner log:\n%s%s", res.Stdout, res.Stderr)
	}
	h.t.Fatal("no runner connected through the ingress")
	return ""
}

// runnerSpec is the reference runner, built static once per test binary.
func runnerSpec(t testing.TB) drivers.RunnerSpec {
	p, sum := testenv.RunnerBinarySum(t)
	return drivers.RunnerSpec{Binary: p, SHA256: sum}
}

// hardenedRunnerConfig is the strictest config: no network, a read-only
// root and a non-root user.
func (e *env) hardenedRunnerConfig() config.Config {
	return e.config(e.img.Ref, map[string]any{"network": "none", docker.FieldReadonlyRootfs: true,
		docker.FieldWorkdir: "/workspace", docker.FieldUser: "1234:2345", docker.FieldMemory: "256m"})
}

// Issue 17: the real runner, bind-mounted into a container with no
// network, a read-only root and a non-root user, reaches a real controller
// served on the ingress; a task's output is byte-exact and its exit code
// propagated; docker inspect shows no ticket and read-only mounts.
func TestRunnerInAHardenedContainerRunsATask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	spec := runnerSpec(t)
	sb := e.acquire(ctx, e.hardenedRunnerConfig(), drivers.AcquireRequest{LeaseID: "lease-1", Runner: &spec})
	h := newPRPHost(t, sb, spec)
	in := h.serve(ctx)
	if got, want := in.Endpoint(), "unix:"+docker.RunnerSocketDir+"/"+docker.RunnerSocketName; got != want {
		t.Errorf("Endpoint = %q, want %q", got, want)
	}
	ticket := h.launch(ctx, in, "lease-1")
	session := h.session(ctx, sb)

	// 20000 numbered lines, bytes 0xff 0xfe 0x00 and a newline, then
	// stderr and exit 7.
	var want bytes.Buffer
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	want.Write([]byte{0xff, 0xfe, 0x00, '\n'})
	att, err := h.c.Reattach(ctx, operator, session)
	if err != nil {
		t.Fatal(err)
	}
	task, err := att.Start(ctx, operator, controller.TaskSpec{TaskStart: prp.TaskStart{TaskID: "t1",
		Argv: []string{"sh", "-c", `seq 1 20000; printf '\377\376\000\n'; printf 'to stderr' >&2; id -u >/workspace/uid; exit 7`}}})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := task.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if exit.Code != 7 {
		t.Fatalf("exit = %+v, want exit code 7", exit)
	}
	if got, err := h.c.Output(ctx, operator, session, "t1", prp.Stdout); err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Errorf("stdout: %d bytes, %v; want the %d bytes, identical", len(got), err, want.Len())
	}
	if got, err := h.c.Output(ctx, operator, session, "t1", prp.Stderr); err != nil || string(got) != "to stderr" {
		t.Errorf("stderr = %q, %v; want %q", got, err, "to stderr")
	}
	if got := run(t, ctx, sb, "cat", "/workspace/uid"); got != "1234\n" {
		t.Errorf("the task ran as uid %q, want 1234", got)
	}

	// The ticket is nowhere the engine shows: not in the container's env,
	// entrypoint or command.
	ins, err := e.cli.ContainerInspect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	shown := strings.Join(append(append(append([]string{}, ins.Config.Env...), ins.Config.Entrypoint...), ins.Config.Cmd...), "\n") + ins.Path + strings.Join(ins.Args, " ")
	if strings.Contains(shown, ticket) {
		t.Error("docker inspect shows the ticket")
	}
	// Nor in any process's argv or environment, in the container or on
	// this host (read from the host's /proc, which shows the container's
	// processes too). The control is a process in the container with a
	// marker in its environment, which the scan must find.
	marker := "berth-control-" + randomID()
	sctx, stop := context.WithCancel(ctx)
	p, err := sb.(drivers.StreamExecer).Start(sctx, drivers.Command{Argv: []string{"sleep", "60"}, Env: map[string]string{"CONTROL": marker}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; len(proctest.LivePIDs(marker)) == 0; i++ {
		if i == 100 {
			t.Error("control: the scan of /proc does not find a marker in a container process's environment")
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if leaks := proctest.LivePIDs(ticket); len(leaks) > 0 {
		t.Errorf("the ticket is in %v", leaks)
	}
	stop()
	_, _ = p.Wait(ctx)
	// The binary and the socket directory are read-only bind mounts; the
	// state directory is a tmpfs; the network is none.
	ro := map[string]bool{}
	for _, m := range ins.Mounts {
		ro[m.Destination] = !m.RW
		if m.Destination == docker.RunnerSocketDir {
			checkHostLayout(t, m.Source)
		}
	}
	for _, p := range []string{docker.RunnerBinaryPath, docker.RunnerSocketDir} {
		if v, ok := ro[p]; !ok || !v {
			t.Errorf("mount %s: present %v, read-only %v; want a read-only bind mount", p, ok, v)
		}
	}
	if _, ok := ins.HostConfig.Tmpfs[docker.RunnerStateDir]; !ok {
		t.Errorf("no tmpfs at %s: %v", docker.RunnerStateDir, ins.HostConfig.Tmpfs)
	}
	if ins.HostConfig.NetworkMode != "none" || !ins.HostConfig.ReadonlyRootfs || ins.Config.User != "1234:2345" {
		t.Errorf("network %q, read-only root %v, user %q; want none, true, 1234:2345", ins.HostConfig.NetworkMode, ins.HostConfig.ReadonlyRootfs, ins.Config.User)
	}
	for _, p := range []string{docker.RunnerBinaryPath, docker.RunnerSocketDir + "/x"} {
		if res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", `echo x >>"$1"`, "sh", p}}); err != nil || res.ExitCode == 0 {
			t.Errorf("writing %s from the container: %v, exit %v; want a failure", p, err, res)
		}
	}
	if got := run(t, ctx, sb, "sh", "-c", "cat /proc/net/dev | grep -c :"); got != "1\n" {
		t.Errorf("network interfaces in the container: %q, want only lo", got)
	}
}

// checkHostLayout checks the host side of the ingress: a 0700 directory
// owned by this process's user holding the 0711 run directory with the
// 0666 socket.
func checkHostLayout(t *testing.T, run string) {
	t.Helper()
	for _, c := range []struct {
		path string
		want os.FileMode
	}{{filepath.Dir(run), 0o700}, {run, 0o711}, {filepath.Join(run, docker.RunnerSocketName), 0o666}} {
		fi, err := os.Lstat(c.path)
		if err != nil {
			t.Errorf("host layout: %v", err)
			continue
		}
		if fi.Mode().Perm() != c.want {
			t.Errorf("host layout: %s has mode %s, want %s", c.path, fi.Mode().Perm(), c.want)
		}
	}
}

// Issue 17: cutting the connection (not the runner) mid-task, and closing
// the ingress for a while, loses nothing: the task runs on, the runner
// reconnects through a new ingress at the same socket, the output is
// complete.
func TestRunnerReconnectsAfterTheConnectionIsCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	spec := runnerSpec(t)
	sb := e.acquire(ctx, e.hardenedRunnerConfig(), drivers.AcquireRequest{LeaseID: "lease-1", Runner: &spec})
	h := newPRPHost(t, sb, spec)
	in := h.serve(ctx)
	h.launch(ctx, in, "lease-1")
	session := h.session(ctx, sb)
	const lines = 60
	att, err := h.c.Reattach(ctx, operator, session)
	if err != nil {
		t.Fatal(err)
	}
	// The handle's writer gets every line once, across the reconnect.
	var followed bytes.Buffer
	task, err := att.Start(ctx, operator, controller.TaskSpec{Stdout: &followed, TaskStart: prp.TaskStart{TaskID: "t1",
		Argv: []string{"sh", "-c", fmt.Sprintf(`i=1; while [ $i -le %d ]; do echo "line $i"; i=$((i+1)); sleep 0.05; done; exit 3`, lines)}}})
	if err != nil {
		t.Fatal(err)
	}
	// Cut once some output arrived.
	for {
		got, _ := h.c.Output(ctx, operator, session, "t1", prp.Stdout)
		if bytes.Count(got, []byte("\n")) >= 5 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no output before the cut")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := h.stop(); n == 0 {
		t.Fatal("no connection to cut")
	}
	waitDisconnected(t, ctx, h.c)
	time.Sleep(time.Second) // the runner finds no socket for a while; the task runs on
	h.serve(ctx)
	exit, err := task.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if exit.Code != 3 {
		t.Fatalf("exit = %+v, want exit code 3", exit)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if followed.String() != want.String() {
		t.Errorf("the handle's stdout writer got %q; want %d complete lines, once", followed.String(), lines)
	}
	if got, err := h.c.Output(ctx, operator, session, "t1", prp.Stdout); err != nil || string(got) != want.String() {
		t.Errorf("stdout after the reconnect = %q, %v; want %d complete lines", got, err, lines)
	}
	if ids := h.c.ConnectedSessions(); len(ids) != 1 || ids[0] != session {
		t.Errorf("connected sessions %v, want the same session %s", ids, session)
	}
}

// waitDisconnected waits until the controller sees no runner connected.
func waitDisconnected(t *testing.T, ctx context.Context, c *controller.Controller) {
	t.Helper()
	for len(c.ConnectedSessions()) > 0 {
		if ctx.Err() != nil {
			t.Fatal("the controller still sees the runner connected after the cut")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 17: a tcp:// engine does not share this host's filesystem:
// runner_ingress is narrowed away and an Acquire with a Runner is refused
// before the engine is contacted (nothing listens at the address: any
// engine call would fail as unavailable instead).
func TestTCPEngineNarrowsRunnerIngressAway(t *testing.T) {
	t.Parallel()
	d := docker.NewConcrete(&docker.Options{Host: "unix:///var/run/docker.sock"})
	defer d.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tcp, err := d.Schema().Normalize(map[string]any{"host": "tcp://" + addr, "image": "busybox:1"})
	if err != nil {
		t.Fatal(err)
	}
	unix, err := d.Schema().Normalize(map[string]any{"image": "busybox:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Capabilities().Declared.Has(drivers.CapRunnerIngress) {
		t.Fatal("docker does not declare runner_ingress")
	}
	if n := drivers.ConfigNarrowing(d, tcp); !n.Has(drivers.CapRunnerIngress) || drivers.Effective(d, n).Has(drivers.CapRunnerIngress) {
		t.Errorf("tcp:// engine: narrowed %s, effective %s; want runner_ingress narrowed away", n, drivers.Effective(d, n))
	}
	if n := drivers.ConfigNarrowing(d, unix); n != 0 {
		t.Errorf("unix:// engine: narrowed %s, want nothing", n)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "berth-runner")
	if err := os.WriteFile(bin, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := drivers.RunnerSpec{Binary: bin, SHA256: "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"} // sha256("x")
	allocated := false
	_, err = d.Acquire(context.Background(), tcp, drivers.AcquireRequest{Runner: &spec,
		Allocated: func(context.Context, string) error { allocated = true; return nil }})
	if !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), drivers.CapRunnerIngress.String()) || allocated {
		t.Errorf("Acquire with a Runner on a tcp:// engine: err = %v (allocated %v), want ErrUnsupported naming runner_ingress, nothing allocated", err, allocated)
	}
	if errors.Is(err, drivers.ErrUnavailable) {
		t.Errorf("the refusal came from contacting the engine: %v", err)
	}
}

// A container acquired without a Runner refuses HostRunner; a spec whose
// binary does not have its sum is refused before anything is created, naming
// the field; a resumed container keeps its mounts and refuses another sum;
// Destroy removes the container's host directory.
func TestRunnerRefusalsResumeAndCleanup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := testCtx(t)
	spec := runnerSpec(t)
	cfg := e.config(e.img.Ref, nil)

	plain := e.acquire(ctx, cfg, drivers.AcquireRequest{})
	if _, err := plain.(drivers.RunnerHost).HostRunner(ctx, spec); !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), "AcquireRequest.Runner") {
		t.Errorf("HostRunner on a container acquired without a Runner: %v, want ErrUnsupported saying why", err)
	}

	bad := spec
	bad.SHA256 = strings.Repeat("0", 64)
	labels := map[string]string{"test.berth/which": "bad-sum-" + randomID()}
	if _, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: labels, Runner: &bad}); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("Acquire with a wrong sum: %v, want an error naming sha256", err)
	}
	if infos, err := e.drv.List(ctx, cfg, labels); err != nil || len(infos) != 0 {
		t.Errorf("List after the refused Acquire = %v, %v; want nothing", infos, err)
	}

	sb := e.acquire(ctx, cfg, drivers.AcquireRequest{Runner: &spec})
	ins, err := e.cli.ContainerInspect(ctx, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	hostDir := ""
	for _, m := range ins.Mounts {
		if m.Destination == docker.RunnerSocketDir {
			hostDir = filepath.Dir(m.Source)
		}
	}
	if hostDir == "" {
		t.Fatalf("no mount at %s: %+v", docker.RunnerSocketDir, ins.Mounts)
	}
	if _, err := sb.Release(ctx, drivers.Stop); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hostDir); err != nil {
		t.Errorf("a stopped container lost its host directory: %v", err)
	}
	again, err := e.drv.Resume(ctx, cfg, sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	other := spec
	other.SHA256 = strings.Repeat("1", 64)
	if _, err := again.(drivers.RunnerHost).HostRunner(ctx, other); !errors.Is(err, drivers.ErrUnsupported) || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("HostRunner with another sum on the resumed container: %v, want ErrUnsupported naming sha256", err)
	}
	in, err := again.(drivers.RunnerHost).HostRunner(ctx, spec)
	if err != nil {
		t.Fatalf("HostRunner on the resumed container: %v", err)
	}
	if _, err := again.(drivers.RunnerHost).HostRunner(ctx, spec); err == nil {
		t.Error("a second HostRunner while the ingress is open succeeded")
	}
	if got := run(t, ctx, again, "sh", "-c", "test -S "+docker.RunnerSocketDir+"/"+docker.RunnerSocketName+" && test -x "+docker.RunnerBinaryPath+" && echo ok"); got != "ok\n" {
		t.Errorf("the resumed container does not see the socket: %q", got)
	}
	if r, err := again.Release(ctx, drivers.Destroy); err != nil || r.State != drivers.StateDestroyed {
		t.Fatalf("Destroy: %+v, %v", r, err)
	}
	if _, err := in.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Release: %v, want net.ErrClosed", err)
	}
	if _, err := os.Stat(hostDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host directory %s survived Destroy: %v", hostDir, err)
	}
	// Destroy by id (the sweep's way) removes the host directory too.
	sb2 := e.acquire(ctx, cfg, drivers.AcquireRequest{Runner: &spec})
	ins2, err := e.cli.ContainerInspect(ctx, sb2.ID())
	if err != nil {
		t.Fatal(err)
	}
	dir2 := hostDirOf(ins2)
	if _, err := e.drv.Destroy(ctx, cfg, sb2.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir2); dir2 == "" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host directory %q survived Destroy by id: %v", dir2, err)
	}
}

func hostDirOf(ins container.InspectResponse) string {
	for _, m := range ins.Mounts {
		if m.Destination == docker.RunnerSocketDir {
			return filepath.Dir(m.Source)
		}
	}
	return ""
}
