package plugin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/retry"
	"github.com/berthdev/berth/internal/testenv"
)

// built is the fake plugin binary, built once per test binary, and its
// manifest written beside it.
var built struct {
	once sync.Once
	p    plugin.Plugin
	err  error
}

// fakePlugin returns the pinned fake plugin (internal/fakeplugin), built
// with go build into a directory of this test binary's.
func fakePlugin(t testing.TB) plugin.Plugin {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "berth-plugin-test-")
		if err != nil {
			built.err = err
			return
		}
		built.p, built.err = buildPlugin(dir)
	})
	if built.err != nil {
		t.Fatalf("building the fake plugin: %v", built.err)
	}
	return built.p
}

func buildPlugin(dir string) (plugin.Plugin, error) {
	bin := filepath.Join(dir, "fakeplugin")
	out, err := goBuild(bin, "github.com/berthdev/berth/drivers/plugin/internal/fakeplugin")
	if err != nil {
		return plugin.Plugin{}, fmt.Errorf("go build: %v\n%s", err, out)
	}
	p := plugin.Plugin{Binary: bin, SHA256: sum(bin)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return p, plugin.WriteManifest(ctx, p)
}

func sum(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	_, _ = io.Copy(h, f)
	return hex.EncodeToString(h.Sum(nil))
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.p.Binary != "" {
		os.RemoveAll(filepath.Dir(built.p.Binary))
	}
	os.Exit(code)
}

// load loads p and closes it at the end of the test.
//
// The plugin's stderr goes to the test: the plugins are built with -race
// when the test binary is, and a race report (or a panic) of a plugin
// process fails the test that loaded it, once the driver is closed.
func load(t testing.TB, p plugin.Plugin) drivers.Driver {
	t.Helper()
	stderr := &pluginStderr{}
	d, err := plugin.Load(p, &plugin.Options{Logger: slog.New(stderr)})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() {
		if bad := stderr.failures(); len(bad) > 0 {
			t.Errorf("the plugin %s wrote a race report or a panic to its stderr:\n%s", p.Binary, strings.Join(bad, "\n"))
		}
	})
	t.Cleanup(func() { _ = d.(io.Closer).Close() })
	return d
}

// pluginStderr is a slog.Handler that keeps the lines plugins write to
// their stderr (plugin.Options.Logger) from the first race report or panic
// on, at most 200 of them.
type pluginStderr struct {
	mu    sync.Mutex
	lines []string
	bad   bool
}

func (h *pluginStderr) Enabled(context.Context, slog.Level) bool { return true }
func (h *pluginStderr) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *pluginStderr) WithGroup(string) slog.Handler            { return h }

func (h *pluginStderr) Handle(_ context.Context, r slog.Record) error {
	line := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "line" {
			line = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	if strings.Contains(line, "WARNING: DATA RACE") || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
		h.bad = true
	}
	if h.bad && len(h.lines) < 200 {
		h.lines = append(h.lines, line)
	}
	return nil
}

func (h *pluginStderr) failures() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines...)
}

type harness struct {
	d  drivers.Driver
	tb testing.TB // the subtest's: a broken driver's plugin ends at its end
}

func (h *harness) Driver() drivers.Driver { return h.d }

func (h *harness) Config() config.Config {
	cfg, err := h.d.Schema().Normalize(map[string]any{"image": fake.DefaultImage})
	if err != nil {
		panic(err)
	}
	return cfg
}

// ConfigWithImage implements drivertest.ImageHarness, as the fake's own
// harness does.
func (h *harness) ConfigWithImage(id images.Identity) (config.Config, bool) {
	ref := id.String()
	if id.SnapshotID() != "" {
		ref = "snapshot:" + id.SnapshotID()
	}
	cfg := h.Config()
	cfg["image"] = ref
	return cfg, true
}

// RunnerSpec implements drivertest.RunnerHarness, as the fake's own
// harness does: the fake checks the spec and runs its runner in its own
// process (here the plugin's), never the binary.
func (h *harness) RunnerSpec(testing.TB) drivers.RunnerSpec {
	return drivers.RunnerSpec{Binary: "/nonexistent/berth-runner", SHA256: strings.Repeat("0", 64)}
}

// Close does nothing: the maker ends the plugin in a cleanup of the
// subtest's, which runs after the suite's own cleanups have released the
// sandboxes through it.
func (h *harness) Close() {}

// Broken implements drivertest.FailureHarness as the fake's own harness
// does, the fake's faults configured through the plugin's faults file
// (internal/fakeplugin): a dead control plane is an injected create fault
// wrapping drivers.ErrUnavailable, and credentials are checked by a fake
// configured with an API key. It has no host keys.
func (h *harness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	raw := map[string]any{"image": fake.DefaultImage}
	switch f {
	case drivertest.FailUnreachable:
		p := faultyPlugin(h.tb, "unreachable", `{"faults": [{"op": "create", "error": "unavailable"}]}`)
		return drivertest.Broken{Driver: load(h.tb, p), Config: raw, Layer: drivers.ErrUnavailable}, true
	case drivertest.FailBadCredentials:
		raw["api_key"] = "not-" + fakeAPIKey
		return drivertest.Broken{Driver: load(h.tb, faultyPlugin(h.tb, "apikey", `{"apiKey": "`+fakeAPIKey+`"}`)), Config: raw}, true
	case drivertest.FailMissingCredentials:
		return drivertest.Broken{Driver: load(h.tb, faultyPlugin(h.tb, "apikey", `{"apiKey": "`+fakeAPIKey+`"}`)), Config: raw}, true
	case drivertest.FailUnknownImage:
		raw["image"] = "registry.example/berth/no-such-image:1"
		return drivertest.Broken{Config: raw}, true
	}
	return drivertest.Broken{}, false
}

// fakeAPIKey is the key of the fake plugin configured for the credential
// failures.
const fakeAPIKey = "fake-conformance-key"

// faulty holds the fake plugin's copies with a faults file, by name.
var faulty struct {
	mu sync.Mutex
	p  map[string]plugin.Plugin
}

// faultyPlugin returns a copy of the fake plugin (the same pinned binary)
// in a directory of its own, beside a faults file of contents faults, its
// manifest written: one per name and test binary.
func faultyPlugin(t testing.TB, name, faults string) plugin.Plugin {
	t.Helper()
	base := fakePlugin(t)
	faulty.mu.Lock()
	defer faulty.mu.Unlock()
	if p, ok := faulty.p[name]; ok {
		return p
	}
	dir := filepath.Join(filepath.Dir(base.Binary), name)
	bin := filepath.Join(dir, filepath.Base(base.Binary))
	b, err := os.ReadFile(base.Binary)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(bin, b, 0o755)
	}
	if err == nil {
		err = os.WriteFile(bin+".faults.json", []byte(faults), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := plugin.Plugin{Binary: bin, SHA256: base.SHA256}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := plugin.WriteManifest(ctx, p); err != nil {
		t.Fatalf("the fake plugin with faults %s: %v", faults, err)
	}
	if faulty.p == nil {
		faulty.p = map[string]plugin.Plugin{}
	}
	faulty.p[name] = p
	return p
}

// wirePass names the conformance subtests that run through the fake
// plugin: each one's calls and results cross the plugin boundary in a way
// of their own (a message or field of the protocol, a stream, the broker),
// and the fake behind the wire behaves as drivers/fake's TestConformance
// proves, so a failure here is the wire's. They are the declared
// capabilities against the generated sandbox and driver types (combos);
// acquisition with its allocated callback and a cancelled context;
// commands' fields and results (streams apart, exit codes, env and dir,
// stdin, the output limit and its truncation flag, ErrReleased after a
// release, cancellation); concurrent calls over one connection; every
// failure's code and layer (the error table); release receipts of stop and
// keep with a resume; list and destroy by id; image identity, capture and
// delete; streaming exec with stdin, every shared signal, cancellation,
// Wait's context and the stdin pump's end; the terminal; runner ingress
// over the broker's bridge; and the files tar streams both ways (64 MiB),
// with the codes of refused and missing paths.
//
// Left out, as the driver's and not the wire's (drivers/fake's
// TestConformance runs them): a planted symlink (the fake's tree refuses
// to follow it; through the plugin it is the refusal's code, which the
// refused paths carry), a resume of an unknown id (TestErrorsCrossTheBoundary
// checks its code), a KILL alone (the shared set sends it), and the
// subtests the fake skips (measured isolation, a runner as a host
// process, the refusal without runner ingress, host keys).
var wirePass = []string{
	"capabilities are static and cheap",
	"declared capabilities equal those of a live sandbox",
	"acquire exec release",
	"allocated callback",
	"acquire honours a cancelled context",
	"stdout and stderr are kept apart",
	"exit codes",
	"env and dir are honoured",
	"stdin",
	"output limit truncates",
	"exec after release",
	"cancellation stops a running command promptly",
	"parallel acquire exec release",
	"error table: unreachable",
	"error table: bad credentials",
	"error table: missing credentials",
	"error table: unknown image",
	"stop then resume",
	"keep then resume",
	"list by labels",
	"destroy by id is idempotent",
	"image identity",
	"stream exec",
	"stream exec signals are the shared set",
	"stream exec cancellation",
	"stream exec Wait honours its context",
	"stream exec stdin copy ends with the process",
	"terminal",
	"capture and delete template",
	"runner ingress",
	"files round trip",
	"files outside the workdir are refused",
}

// The conformance suite's subtests of wirePass pass on the fake driver
// served by a plugin: every capability the plugin declares is implemented
// by the driver the host sees, and none it does not carry is declared.
func TestConformanceThroughPlugin(t *testing.T) {
	p := fakePlugin(t)
	drivertest.RunConformanceTests(t, testenv.Subset(t, func(_ context.Context, tb testing.TB) (drivertest.Harness, error) {
		return &harness{d: load(tb, p), tb: tb}, nil
	}, wirePass))
}

// What the plugin declares is what protocol version 1 carries of the
// fake's capabilities, and the host's driver implements exactly those.
func TestDeclaredIsCarried(t *testing.T) {
	d := load(t, fakePlugin(t))
	want := drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReattach, drivers.CapReuse, drivers.CapList, drivers.CapDestroyByID,
		drivers.CapImageIdentity, drivers.CapTemplateCapture, drivers.CapTemplateDelete, drivers.CapTerminal, drivers.CapFiles,
		drivers.CapRunnerIngress)
	if got := d.Capabilities().Declared; got != want {
		t.Errorf("declared %s, want %s", got, want)
	}
	if _, ok := d.(drivers.Lister); !ok {
		t.Error("the host's driver is no drivers.Lister")
	}
	if _, ok := d.(drivers.TemplateDeleter); !ok {
		t.Error("the host's driver is no drivers.TemplateDeleter")
	}
	sb, err := d.Acquire(t.Context(), config.Config{"image": fake.DefaultImage}, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(t.Context(), drivers.Destroy)
	if _, ok := sb.(drivers.RunnerHost); !ok {
		t.Error("the host's sandbox is no drivers.RunnerHost, though the plugin declares runner_ingress")
	}
	ar, ok := d.(drivers.ArchReporter)
	if !ok {
		t.Fatal("the host's driver is no drivers.ArchReporter, though the fake reports its runners' architecture")
	}
	if a, err := ar.RunnerArch(t.Context(), config.Config{"image": fake.DefaultImage}); err != nil || a != runtime.GOARCH {
		t.Errorf("RunnerArch = %q, %v; want %q", a, err, runtime.GOARCH)
	}
}

// mark makes the fake plugin create a file when it starts and returns
// whether it did, so far.
func mark(t *testing.T) func() bool {
	path := filepath.Join(t.TempDir(), "started")
	t.Setenv("BERTH_FAKEPLUGIN_MARK", path)
	return func() bool { _, err := os.Stat(path); return err == nil }
}

// Listing a plugin driver reads its manifest: no process starts.
func TestListingStartsNothing(t *testing.T) {
	p := fakePlugin(t) // built and its manifest written before the mark
	started := mark(t)
	d := load(t, p)
	info := drivers.NewRegistry(d).List()
	if len(info) != 1 || info[0].Name != "fake" || !info[0].Available || info[0].Effective != d.Capabilities().Declared {
		t.Errorf("listing: %+v", info)
	}
	if len(info) == 1 && (info[0].Plugin == nil || *info[0].Plugin != (drivers.PluginInfo{Binary: p.Binary, Version: "1.0.0", SHA256: p.SHA256})) {
		t.Errorf("listing: plugin %+v, want the binary, its manifest's version and the pin", info[0].Plugin)
	}
	if f, ok := d.Schema().Field("region"); !ok || f.Default != "local-1" {
		t.Errorf("schema field region: %+v %v", f, ok)
	}
	if f, _ := d.Schema().Field("cpus"); f.Default != int64(1) {
		t.Errorf("schema field cpus: default %#v, want int64(1)", f.Default)
	}
	if started() {
		t.Fatal("listing started the plugin")
	}
	// The check can fail: validating a config runs the driver's checks,
	// which are code, in the plugin.
	if _, err := d.Schema().Normalize(map[string]any{"cpus": 0}); !errors.Is(err, config.ErrInvalid) || errcode.FieldOf(err) != "cpus" {
		t.Errorf("Normalize(cpus 0) = %v, want a config error naming cpus", err)
	}
	if !started() {
		t.Error("validating a config did not start the plugin")
	}
}

// A binary that does not match its pin is never started, whatever its
// manifest says; a manifest recorded for another pin is refused at Load.
func TestPinMismatchNeverStarts(t *testing.T) {
	p := fakePlugin(t)
	started := mark(t)
	if _, err := plugin.Load(plugin.Plugin{Binary: p.Binary, SHA256: strings.Repeat("0", 64)}, nil); err == nil ||
		!errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), "pin") {
		t.Errorf("Load with another pin: %v, want a refusal naming the pin", err)
	}
	// Another binary under the pinned one's manifest.
	other := filepath.Join(t.TempDir(), "fakeplugin")
	b, err := os.ReadFile(p.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(b, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(p.Binary + plugin.ManifestSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other+plugin.ManifestSuffix, m, 0o644); err != nil {
		t.Fatal(err)
	}
	d := load(t, plugin.Plugin{Binary: other, SHA256: p.SHA256})
	_, err = d.Acquire(t.Context(), config.Config{"image": fake.DefaultImage}, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), "do not match the pin") {
		t.Errorf("Acquire through a binary that does not match its pin: %v", err)
	}
	if started() {
		t.Fatal("a binary that does not match its pin was started")
	}
	// The check can fail: the pinned binary does start.
	d = load(t, p)
	if _, err := d.(drivers.Lister).List(t.Context(), config.Config{}, nil); err != nil {
		t.Fatalf("List through the pinned binary: %v", err)
	}
	if !started() {
		t.Error("the pinned binary did not mark its start")
	}
}

// A handshake that disagrees with the manifest refuses the plugin, naming
// the difference, and the driver is listed as unavailable after.
func TestHandshakeMustAgreeWithManifest(t *testing.T) {
	p := fakePlugin(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakeplugin")
	b, err := os.ReadFile(p.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p.Binary + plugin.ManifestSuffix)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["version"] = "9.9.9"
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(bin+plugin.ManifestSuffix, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	d := load(t, plugin.Plugin{Binary: bin, SHA256: p.SHA256})
	if d.Name() != "fake" {
		t.Errorf("Name() = %q", d.Name())
	}
	_, err = d.(drivers.Lister).List(t.Context(), config.Config{}, nil)
	if !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), `version: the plugin says "1.0.0", its manifest "9.9.9"`) {
		t.Errorf("List through a plugin whose handshake disagrees: %v", err)
	}
	if info := drivers.NewRegistry(d).List()[0]; info.Available || !strings.Contains(info.Reason, "9.9.9") {
		t.Errorf("listing after the refusal: %+v", info)
	}
}

// A manifest of another protocol version is refused, naming both.
func TestProtocolVersionOfManifest(t *testing.T) {
	p := fakePlugin(t)
	bin := filepath.Join(t.TempDir(), "fakeplugin")
	raw, err := os.ReadFile(p.Binary + plugin.ManifestSuffix)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	m["protocolVersion"] = 2
	raw, _ = json.Marshal(m)
	if err := os.WriteFile(bin+plugin.ManifestSuffix, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = plugin.Load(plugin.Plugin{Binary: bin, SHA256: p.SHA256}, nil)
	if err == nil || !strings.Contains(err.Error(), "protocol version 2, this host speaks version 1") {
		t.Errorf("Load of a manifest of protocol version 2: %v", err)
	}
}

// A driver's errors cross the boundary as code, reason and message and
// are rebuilt so that errors.Is with the contract's sentinels and
// transience work as for a compiled driver.
func TestErrorsCrossTheBoundary(t *testing.T) {
	d := load(t, fakePlugin(t))
	ctx := t.Context()
	sb, err := d.Acquire(ctx, config.Config{"image": fake.DefaultImage}, drivers.AcquireRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Release(ctx, drivers.Destroy)
	for _, tc := range []struct {
		reason   string
		sentinel error
		code     errcode.ErrorCode
	}{
		{"auth_failed", drivers.ErrAuth, errcode.AuthFailed},
		{"transient", drivers.ErrTransient, errcode.Unavailable},
		{"image_not_found", drivers.ErrImageNotFound, errcode.NotFound},
	} {
		_, err := sb.Exec(ctx, drivers.Command{Argv: []string{"fail", tc.reason}})
		if !errors.Is(err, tc.sentinel) || errcode.Code(err) != tc.code || errcode.ReasonOf(err) != tc.reason {
			t.Errorf("fail %s: err %v (code %s, reason %q), want %v", tc.reason, err, errcode.Code(err), errcode.ReasonOf(err), tc.sentinel)
		}
		if got, want := retry.IsTransient(err), tc.sentinel == drivers.ErrTransient; got != want {
			t.Errorf("fail %s: IsTransient = %v, want %v", tc.reason, got, want)
		}
		if !strings.Contains(err.Error(), "failing as asked") {
			t.Errorf("fail %s: the detail %q lost the plugin's chain", tc.reason, err)
		}
	}
	// Resume of an unknown id is errcode's not found.
	if _, err := d.(drivers.Resumer).Resume(ctx, config.Config{}, "fake-999"); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("Resume(fake-999): %v, want not found", err)
	}
}

// A plugin's stderr goes to the host's logger, line by line, bounded: a
// line at 1 KiB, 1000 lines per process, then one warning.
func TestStderrGoesToTheLogger(t *testing.T) {
	p := fakePlugin(t)
	t.Setenv("BERTH_FAKEPLUGIN_STDERR", "1005")
	var mu sync.Mutex
	var buf strings.Builder
	log := slog.New(slog.NewJSONHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(b)
	}), nil))
	d, err := plugin.Load(p, &plugin.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer d.(io.Closer).Close()
	if _, err := d.(drivers.Lister).List(t.Context(), config.Config{}, nil); err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		text := buf.String()
		mu.Unlock()
		got = got[:0]
		for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil {
				got = append(got, m)
			}
		}
		if len(got) >= 1001 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) != 1001 {
		t.Fatalf("%d log records, want 1000 lines and one warning", len(got))
	}
	if got[0]["line"] != "fakeplugin line 0" || got[0]["plugin"] != p.Binary {
		t.Errorf("first record: %v", got[0])
	}
	if got[999]["line"] != "fakeplugin line 999" {
		t.Errorf("record 1000: %v", got[999])
	}
	if got[1000]["level"] != "WARN" || !strings.Contains(fmt.Sprint(got[1000]["msg"]), "dropped") {
		t.Errorf("last record: %v, want the warning that lines are dropped", got[1000])
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// A directory's pins file, as sha256sum writes it, lists its plugins.
func TestLoadDir(t *testing.T) {
	p := fakePlugin(t)
	dir := filepath.Dir(p.Binary)
	pins := filepath.Join(dir, plugin.PinsFile)
	t.Cleanup(func() { os.Remove(pins) })
	write := func(s string) {
		if err := os.WriteFile(pins, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# reviewed\n" + p.SHA256 + "  " + filepath.Base(p.Binary) + "\n")
	ds, err := plugin.LoadDir(dir, nil)
	if err != nil || len(ds) != 1 || ds[0].Name() != "fake" {
		t.Fatalf("LoadDir: %v, %v", ds, err)
	}
	_ = ds[0].(io.Closer).Close()
	for _, bad := range []string{
		strings.Repeat("0", 64) + "  " + filepath.Base(p.Binary) + "\n", // another pin
		p.SHA256 + "  ../" + filepath.Base(p.Binary) + "\n",             // outside the directory
		p.SHA256 + "\n", // no name
	} {
		write(bad)
		if _, err := plugin.LoadDir(dir, nil); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("LoadDir with %q: %v, want an error naming line 1", bad, err)
		}
	}
}

// A plugin that answers the handshake with another protocol version is
// refused, naming both versions.
func TestProtocolVersionOfHandshake(t *testing.T) {
	p := fakePlugin(t)
	t.Setenv("BERTH_FAKEPLUGIN_PROTOCOL", "2")
	d := load(t, p)
	_, err := d.(drivers.Lister).List(t.Context(), config.Config{}, nil)
	if !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), "this host's 1") || !strings.Contains(err.Error(), "Plugin version: 2") {
		t.Errorf("List through a plugin of protocol version 2: %v, want a refusal naming versions 2 and 1", err)
	}
}

// load's check of a plugin's stderr sees a race report, and the lines
// after it, and nothing before it.
func TestPluginStderrCheckSeesARaceReport(t *testing.T) {
	h := &pluginStderr{}
	log := slog.New(h)
	log.Info("plugin stderr", "plugin", "p", "line", "listening")
	if got := h.failures(); len(got) != 0 {
		t.Fatalf("an ordinary line counts as a failure: %q", got)
	}
	log.Info("plugin stderr", "plugin", "p", "line", "WARNING: DATA RACE")
	log.Info("plugin stderr", "plugin", "p", "line", "Write at 0x00c000 by goroutine 7:")
	if got := h.failures(); len(got) != 2 || got[0] != "WARNING: DATA RACE" {
		t.Errorf("failures after a race report: %q", got)
	}
}
