package plugin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
)

// dockerHarness is the Docker driver served by internal/dockerplugin.
type dockerHarness struct {
	d      drivers.Driver
	cfg    config.Config
	kernel string
	broken *brokenDocker
}

// brokenDocker are the targets of the error table, as the Docker driver's
// own harness makes them: an engine socket nothing listens on, and an
// image in a registry that wants credentials.
type brokenDocker struct {
	deadHost string
	authImg  string
	noImage  string
}

const (
	authUser     = "berth"
	authPassword = "conformance-password"
)

func newBrokenDocker(t *testing.T, reg *testenv.Registry) *brokenDocker {
	cli := testenv.Docker(t)
	var locked atomic.Bool
	authReg := testenv.StartRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); locked.Load() && (!ok || u != authUser || p != authPassword) {
				w.Header().Set("WWW-Authenticate", `Basic realm="berth-conformance"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	img := testimage.Busybox(t, authReg, nil)
	locked.Store(true)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, authReg.Host)
	return &brokenDocker{deadHost: "unix://" + filepath.Join(t.TempDir(), "dead.sock"), authImg: img.Ref,
		noImage: reg.Host + "/berth/no-such-image@sha256:" + strings.Repeat("0", 64)}
}

// Broken implements drivertest.FailureHarness: every failure the Docker
// driver has lives in its config, so it crosses the boundary as the
// driver's own error.
func (h *dockerHarness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	raw := map[string]any{}
	for k, v := range h.cfg {
		raw[k] = v
	}
	switch f {
	case drivertest.FailUnreachable:
		raw["host"] = h.broken.deadHost
		return drivertest.Broken{Config: raw, Layer: drivers.ErrUnavailable}, true
	case drivertest.FailBadCredentials:
		raw["image"], raw["registry_auth"] = h.broken.authImg, authUser+":not-"+authPassword
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailMissingCredentials:
		raw["image"], raw["registry_auth"] = h.broken.authImg, map[string]any{"$secret": "conformance-registry", "version": 1}
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailUnknownImage:
		raw["image"] = h.broken.noImage
		return drivertest.Broken{Config: raw}, true
	}
	return drivertest.Broken{}, false
}

func (h *dockerHarness) Driver() drivers.Driver { return h.d }
func (h *dockerHarness) Config() config.Config  { return h.cfg.Clone() }
func (h *dockerHarness) Close()                 {}
func (h *dockerHarness) Parallel() int          { return 8 }

// ConfigWithImage implements drivertest.ImageHarness.
func (h *dockerHarness) ConfigWithImage(id images.Identity) (config.Config, bool) {
	c := h.cfg.Clone()
	c["image"] = id.String()
	return c, true
}

// RunnerSpec implements drivertest.RunnerHarness: the static runner
// binary, built once.
func (h *dockerHarness) RunnerSpec(tb testing.TB) drivers.RunnerSpec {
	p, sum := testenv.RunnerBinarySum(tb)
	return drivers.RunnerSpec{Binary: p, SHA256: sum}
}

// RunnersAreHostProcesses implements drivertest.HostProcessHarness: the
// engine runs on this host.
func (h *dockerHarness) RunnersAreHostProcesses() bool { return true }

// HostKernel implements drivertest.IsolationHarness: the engine's kernel.
func (h *dockerHarness) HostKernel(context.Context) (string, error) { return h.kernel, nil }

// dockerWirePass names the conformance subtests that run with the Docker
// driver through its plugin: those where a real engine and real processes
// put on the wire what the fake only scripts. They are the declared
// capabilities of the Docker driver's own combination against the
// generated types; a destroy's receipt; a stream with stdin, both output
// streams and an exit code; every shared signal delivered to a real
// process; a terminal on a real pty; runner ingress, the reference runner
// in a container reaching the test's controller through the plugin's
// bridge on the broker; and the engine's and the registry's failures,
// whose codes and layers cross the wire.
//
// The rest runs through the fake's plugin (wirePass: the same wire code,
// the tar streams of the files are bytes it does not read) and with the
// Docker driver compiled in (drivers/docker's TestConformance); list,
// destroy by id and receipts after a crash run below, in the kill -9
// subtests.
var dockerWirePass = []string{
	"capabilities are static and cheap",
	"declared capabilities equal those of a live sandbox",
	"acquire exec release",
	"stream exec",
	"stream exec signals are the shared set",
	"terminal",
	"runner ingress",
	"error table: unreachable",
	"error table: bad credentials",
	"error table: missing credentials",
	"error table: unknown image",
}

// The Docker driver's conformance suite (the subtests of dockerWirePass),
// against the real engine, through a plugin: the plugin declares exec,
// stream_exec, reuse, list, destroy_by_id, image_identity,
// template_capture, template_delete, terminal, files and runner_ingress;
// the runner in a container reaches the test's controller through the
// plugin's bridge.
func TestDockerConformanceThroughPlugin(t *testing.T) {
	cli := testenv.Docker(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	const runLabel = "test.berth/run"
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	run := hex.EncodeToString(b)
	testenv.RemoveRegistryImagesAtCleanup(t, cli, reg.Host)
	testenv.RemoveImagesAtCleanup(t, cli, runLabel, run)
	testenv.RemoveContainersAtCleanup(t, cli, runLabel, run)
	info, err := cli.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "dockerplugin")
	start := time.Now()
	if out, err := goBuild(bin, "github.com/berthdev/berth/drivers/plugin/internal/dockerplugin"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := plugin.Plugin{Binary: bin, SHA256: sum(bin)}
	if err := plugin.WriteManifest(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	t.Logf("built the Docker plugin and wrote its manifest in %s", time.Since(start).Round(time.Millisecond))
	d := load(t, p)
	want := drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList, drivers.CapDestroyByID,
		drivers.CapImageIdentity, drivers.CapTemplateCapture, drivers.CapTemplateDelete, drivers.CapTerminal, drivers.CapFiles,
		drivers.CapRunnerIngress)
	if got := d.Capabilities().Declared; got != want&docker.New(nil).Capabilities().Declared {
		t.Errorf("the Docker plugin declares %s, want %s", got, want&docker.New(nil).Capabilities().Declared)
	}
	// No capability is faked: the host's driver lists the provider's
	// images exactly when the Docker driver does (it does not: the
	// engine's images are no picker's yet).
	_, compiledImages := docker.New(nil).(drivers.ImageLister)
	if _, ok := d.(drivers.ImageLister); ok != compiledImages {
		t.Errorf("the host's driver of the Docker plugin is a drivers.ImageLister: %t; the Docker driver: %t", ok, compiledImages)
	}
	cfg, err := d.Schema().Normalize(map[string]any{"image": img.Ref, "labels": map[string]any{runLabel: run}, "startup_timeout": "2m"})
	if err != nil {
		t.Fatal(err)
	}
	_ = d.(io.Closer).Close() // the subtests' plugins are the only ones running
	broken := newBrokenDocker(t, reg)

	drivertest.RunConformanceTests(t, testenv.Subset(t, func(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
		return &dockerHarness{d: load(tb, p), cfg: cfg, kernel: info.KernelVersion, broken: broken}, nil
	}, dockerWirePass))
	t.Run("a stream's output on the handed-over connection: whole before Wait, cancelled, kill -9", func(t *testing.T) { testDockerOutputConn(t, p, cfg) })
	t.Run("kill -9 during exec, then release through the new process", func(t *testing.T) { testDockerKillExec(t, p, cfg) })
	t.Run("kill -9 during acquire, then a sweep through the new process", func(t *testing.T) { testDockerKillAcquire(t, p, cfg) })
	t.Run("kill -9 during a stream and during a release", func(t *testing.T) { testDockerKillStreamRelease(t, p, cfg) })
	t.Run("kill -9 during a terminal and during a sweep", func(t *testing.T) { testDockerKillTerminalSweep(t, p, cfg) })
	t.Run("kill -9 with a runner reaching the host: its ingress is opened again", func(t *testing.T) { testDockerKillRunner(t, p, cfg) })
}

// A runner in a container keeps reaching the host after its plugin is
// killed: the host opens the ingress again through the new process (the
// container resumed, the socket where the runner looks), and Accept goes
// on returning the runner's connections without the host opening
// anything. The host answers each exchange 503, so the real runner keeps
// retrying, as it does while a controller restarts.
func testDockerKillRunner(t *testing.T, p plugin.Plugin, cfg config.Config) {
	ctx := t.Context()
	d := load(t, p)
	bin, sum := testenv.RunnerBinarySum(t)
	spec := drivers.RunnerSpec{Binary: bin, SHA256: sum}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: map[string]string{"test.berth/case": "kill-runner"}, Runner: &spec})
	if err != nil {
		t.Fatal(err)
	}
	in, err := sb.(drivers.RunnerHost).HostRunner(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var exchanges atomic.Int64
	seen := make(chan struct{}, 64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/exchange") {
			exchanges.Add(1)
			select {
			case seen <- struct{}{}:
			default:
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"code":"unavailable","message":"the controller restarts"}`)
	})}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(in) }()
	defer srv.Close()
	if err := in.Launch(ctx, drivers.RunnerLaunch{Lease: "kill-runner", Ticket: strings.Repeat("ab", 32)}); err != nil {
		t.Fatal(err)
	}
	awaitExchange := func(what string) {
		t.Helper()
		select {
		case <-seen:
		case err := <-served:
			t.Fatalf("%s: serving the ingress ended: %v", what, err)
		case <-time.After(60 * time.Second):
			tail, _ := in.LogTail(ctx, 2<<10)
			t.Fatalf("%s: no exchange within 60 s (%d so far); runner log: %s", what, exchanges.Load(), tail)
		}
	}
	awaitExchange("before the kill")
	killPlugin(t, p.Binary)
	for len(seen) > 0 { // what the old process bridged before it died
		<-seen
	}
	time.Sleep(300 * time.Millisecond) // the process is gone, and with it what it bridged
	before := exchanges.Load()
	awaitExchange("after the kill")
	t.Logf("%d exchanges before the kill, %d after", before, exchanges.Load()-before)
	// Calls go to the new process too (the Docker driver reads the log of
	// a runner launched through its own ingress only, so this one is
	// empty, as after a host's restart).
	if _, err := in.LogTail(ctx, 2<<10); err != nil {
		t.Errorf("LogTail through the new process: %v", err)
	}
	var r drivers.Receipt
	if err := eventually(func() (err error) { r, err = sb.Release(ctx, drivers.Destroy); return err }); err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		t.Fatalf("Release: %+v, %v", r, err)
	}
	select {
	case err := <-served:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("serving the ingress ended with %v after the release, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("serving the ingress goes on 10 s after the release")
	}
}

// A terminal whose plugin is killed ends with code unavailable; a sweep
// (list by labels, destroy by id) whose plugin is killed in the middle is
// run again through the new process, and nothing is left.
func testDockerKillTerminalSweep(t *testing.T, p plugin.Plugin, cfg config.Config) {
	ctx := t.Context()
	d := load(t, p)
	labels := map[string]string{"test.berth/case": "kill-terminal-sweep"}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := sb.(drivers.Terminal).OpenTerminal(ctx, drivers.TerminalRequest{Argv: []string{"sh"}, Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(ts, "echo ready\n"); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, ts) }()
	time.Sleep(300 * time.Millisecond)
	killPlugin(t, p.Binary)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = ts.Wait(wctx)
	cancel()
	if errcode.Code(err) != errcode.Unavailable {
		t.Fatalf("Wait on a terminal of the killed plugin: %v, want unavailable", err)
	}
	_ = ts.Close()
	// Two more sandboxes, as if leaked; then a sweep killed in its middle.
	for range 2 {
		if err := eventually(func() error { _, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: labels}); return err }); err != nil {
			t.Fatal(err)
		}
	}
	sweep := func() (int, error) {
		infos, err := d.(drivers.Lister).List(ctx, cfg, labels)
		if err != nil {
			return 0, err
		}
		for _, in := range infos {
			r, err := d.(drivers.Destroyer).Destroy(ctx, cfg, in.ProviderLeaseID)
			if err != nil {
				return 0, err
			}
			if !r.Proves(in.ProviderLeaseID, drivers.Destroy) {
				return 0, fmt.Errorf("destroy %s: receipt %+v proves nothing", in.ProviderLeaseID, r)
			}
		}
		return len(infos), nil
	}
	if left := listed(t, d, cfg, labels); len(left) != 3 {
		t.Fatalf("before the sweep, a list by labels finds %d sandboxes, want 3", len(left))
	}
	sweptc := make(chan error, 1)
	go func() { _, err := sweep(); sweptc <- err }()
	time.Sleep(150 * time.Millisecond)
	killPlugin(t, p.Binary)
	if err := <-sweptc; err != nil && errcode.Code(err) != errcode.Unavailable {
		t.Errorf("the sweep through the killed plugin: %v, want unavailable or done", err)
	}
	if err := eventually(func() error { _, err := sweep(); return err }); err != nil {
		t.Fatalf("the sweep through the new process: %v", err)
	}
	if left := listed(t, d, cfg, labels); len(left) != 0 {
		t.Errorf("after the sweep, a list by labels finds %v", left)
	}
}

// The container outlives the killed plugin: the sandbox is resumed
// through the new process (exec works again) and released through it,
// and a list by its labels finds nothing after.
func testDockerKillExec(t *testing.T, p plugin.Plugin, cfg config.Config) {
	ctx := t.Context()
	d := load(t, p)
	labels := map[string]string{"test.berth/case": "kill-exec"}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sleep", "300"}})
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	killPlugin(t, p.Binary)
	if err := <-errc; errcode.Code(err) != errcode.Unavailable {
		t.Fatalf("Exec through the killed plugin: %v, want unavailable", err)
	}
	var res *drivers.Result
	if err := eventually(func() (err error) {
		res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"echo", "resumed"}})
		return err
	}); err != nil || string(res.Stdout) != "resumed\n" {
		t.Fatalf("Exec after the restart: %+v, %v", res, err)
	}
	killPlugin(t, p.Binary)
	var r drivers.Receipt
	if err := eventually(func() (err error) { r, err = sb.Release(ctx, drivers.Destroy); return err }); err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		t.Fatalf("Release after a second kill: %+v, %v", r, err)
	}
	if left := listed(t, d, cfg, labels); len(left) != 0 {
		t.Errorf("after the release, a list by labels finds %v", left)
	}
}

// A plugin killed while it creates a container leaves at most that
// container, which a sweep (list by labels, destroy by id) through the
// new process removes.
func testDockerKillAcquire(t *testing.T, p plugin.Plugin, cfg config.Config) {
	ctx := t.Context()
	d := load(t, p)
	labels := map[string]string{"test.berth/case": "kill-acquire"}
	// Start the plugin, so that the kill lands in the acquisition.
	if _, err := d.(drivers.Lister).List(ctx, cfg, labels); err != nil {
		t.Fatal(err)
	}
	allocated := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		_, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: labels, Allocated: func(context.Context, string) error {
			close(allocated)
			time.Sleep(time.Second) // the lease store's write, during which the plugin dies
			return nil
		}})
		errc <- err
	}()
	select {
	case <-allocated:
	case err := <-errc:
		t.Fatalf("Acquire returned before the allocation: %v", err)
	}
	killPlugin(t, p.Binary)
	if err := <-errc; errcode.Code(err) != errcode.Unavailable {
		t.Fatalf("Acquire through the killed plugin: %v, want unavailable", err)
	}
	var left []drivers.SandboxInfo
	if err := eventually(func() (err error) { left, err = d.(drivers.Lister).List(ctx, cfg, labels); return err }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 {
		t.Errorf("the killed acquisition left %d containers, want the one allocated", len(left))
	}
	for _, sb := range left {
		r, err := d.(drivers.Destroyer).Destroy(ctx, cfg, sb.ProviderLeaseID)
		if err != nil || !r.Proves(sb.ProviderLeaseID, drivers.Destroy) {
			t.Errorf("sweep: destroy %s: %+v, %v", sb.ProviderLeaseID, r, err)
		}
	}
	if left := listed(t, d, cfg, labels); len(left) != 0 {
		t.Errorf("after the sweep, a list by labels finds %v", left)
	}
}

// A Docker plugin's streaming exec hands its output's connection to the
// host (outsock.go), and every guarantee of the stream holds: stdout and
// stderr whole, each in its order, before Wait returns with the exit
// code; a cancelled stream's Wait says so and nothing is written after
// it; a plugin killed in the middle of the output fails the call as
// unavailable, writes nothing after Wait and leaves no descriptor open.
func testDockerOutputConn(t *testing.T, p plugin.Plugin, cfg config.Config) {
	ctx := t.Context()
	d := load(t, p)
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: map[string]string{"test.berth/case": "output-conn"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = eventually(func() error { _, err := sb.Release(context.WithoutCancel(ctx), drivers.Destroy); return err })
	}()
	se := sb.(drivers.StreamExecer)

	const lines, zeros = 2000, 8 << 20
	before := plugin.OutputConnsTaken()
	var out, errb afterWait
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done; head -c %d /dev/zero; exit 3`, lines, zeros)
	pr, err := se.Start(ctx, drivers.Command{Argv: []string{"sh", "-c", script}}, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pr.Wait(ctx)
	out.waited()
	errb.waited()
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("Wait: %+v, %v; want exit code 3", res, err)
	}
	var wantOut, wantErr strings.Builder
	for i := range lines {
		fmt.Fprintf(&wantOut, "out %d\n", i)
		fmt.Fprintf(&wantErr, "err %d\n", i)
	}
	wantOut.WriteString(strings.Repeat("\x00", zeros))
	if got := out.String(); got != wantOut.String() {
		t.Errorf("stdout: %d bytes, want %d (the lines, then the zeros)", len(got), wantOut.Len())
	}
	if got := errb.String(); got != wantErr.String() {
		t.Errorf("stderr: %d bytes, want %d: %.100q", len(got), wantErr.Len(), got)
	}
	if n := plugin.OutputConnsTaken() - before; n != 1 {
		t.Errorf("the stream's output came on %d handed-over connections, want 1", n)
	}

	// Cancelled in the middle of its output: Wait says so, and nothing
	// is written after it.
	loop := []string{"sh", "-c", "while :; do echo " + strings.Repeat("y", 1000) + "; done"}
	cctx, cancel := context.WithCancel(ctx)
	var loopOut afterWait
	pr, err = se.Start(cctx, drivers.Command{Argv: loop}, &loopOut, nil)
	if err != nil {
		t.Fatal(err)
	}
	loopOut.atLeast(t, 1<<20)
	cancel()
	_, err = pr.Wait(ctx)
	loopOut.waited()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Wait of a cancelled stream: %v, want context.Canceled", err)
	}

	// The plugin killed in the middle of the output: the descriptors the
	// stream opened (the engine connection's duplicate) are closed.
	before2 := openFDs(t)
	var killed afterWait
	pr, err = se.Start(ctx, drivers.Command{Argv: loop}, &killed, nil)
	if err != nil {
		t.Fatal(err)
	}
	killed.atLeast(t, 1<<20)
	var opened []string
	for fd := range openFDs(t) {
		if !before2[fd] {
			opened = append(opened, fd)
		}
	}
	if len(opened) == 0 {
		t.Errorf("the stream opened no descriptor in the host: its output did not come on a connection")
	}
	killPlugin(t, p.Binary)
	_, err = pr.Wait(ctx)
	killed.waited()
	if errcode.Code(err) != errcode.Unavailable {
		t.Errorf("Wait of a stream whose plugin was killed: %v, want unavailable", err)
	}
	after := openFDs(t)
	for _, fd := range opened {
		if after[fd] {
			t.Errorf("after Wait, the stream's descriptor %s is still open", fd)
		}
	}
	time.Sleep(200 * time.Millisecond)
	for _, w := range []*afterWait{&out, &errb, &loopOut, &killed} {
		if n := w.late.Load(); n != 0 {
			t.Errorf("%d writes after Wait returned", n)
		}
	}
}

// afterWait records the output and counts the writes after waited.
type afterWait struct {
	mu   sync.Mutex
	b    strings.Builder
	n    atomic.Int64
	done atomic.Bool
	late atomic.Int64
}

func (w *afterWait) Write(p []byte) (int, error) {
	if w.done.Load() {
		w.late.Add(1)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.b.Len() < 64<<20 {
		w.b.Write(p)
	}
	w.n.Add(int64(len(p)))
	return len(p), nil
}

func (w *afterWait) waited() { w.done.Store(true) }

func (w *afterWait) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// atLeast waits up to a minute for n bytes.
func (w *afterWait) atLeast(t *testing.T, n int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); w.n.Load() < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of output in a minute, want %d", w.n.Load(), n)
		}
	}
}

// openFDs returns what this process's open descriptors are
// ("socket:[INODE]", a path, ...).
func openFDs(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil {
			out[l] = true
		}
	}
	return out
}

// A stream whose plugin is killed ends with code unavailable; a release
// whose plugin is killed is retried through the new process (the sandbox
// resumed, or destroyed by id when it is gone already), and nothing is
// left.
func testDockerKillStreamRelease(t *testing.T, p plugin.Plugin, cfg config.Config) {
	ctx := t.Context()
	d := load(t, p)
	labels := map[string]string{"test.berth/case": "kill-stream"}
	sb, err := d.Acquire(ctx, cfg, drivers.AcquireRequest{Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	pr, err := sb.(drivers.StreamExecer).Start(ctx, drivers.Command{Argv: []string{"sleep", "300"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	killPlugin(t, p.Binary)
	if _, err := pr.Wait(ctx); errcode.Code(err) != errcode.Unavailable {
		t.Fatalf("Wait on a stream of the killed plugin: %v, want unavailable", err)
	}
	// Start the new process, then kill it in the middle of the release.
	if err := eventually(func() error { _, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}}); return err }); err != nil {
		t.Fatalf("Exec after the restart: %v", err)
	}
	relc := make(chan error, 1)
	go func() { _, err := sb.Release(ctx, drivers.Destroy); relc <- err }()
	time.Sleep(100 * time.Millisecond)
	killPlugin(t, p.Binary)
	if err := <-relc; err != nil {
		var r drivers.Receipt
		if err := eventually(func() (err error) { r, err = sb.Release(ctx, drivers.Destroy); return err }); err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
			t.Fatalf("Release after a kill in the middle of one: %+v, %v", r, err)
		}
	}
	var left []drivers.SandboxInfo
	if err := eventually(func() (err error) { left, err = d.(drivers.Lister).List(ctx, cfg, labels); return err }); err != nil || len(left) != 0 {
		t.Errorf("after the release, a list by labels finds %v (%v)", left, err)
	}
}

func listed(t *testing.T, d drivers.Driver, cfg config.Config, labels map[string]string) []drivers.SandboxInfo {
	t.Helper()
	infos, err := d.(drivers.Lister).List(t.Context(), cfg, labels)
	if err != nil {
		t.Fatal(err)
	}
	return infos
}

// goBuild builds pkg into bin (with -race when this test binary has it).
func goBuild(bin, pkg string) ([]byte, error) { return testenv.GoBuild(bin, pkg) }
