package plugin_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/drivers/plugin"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/daytonafake"
	"github.com/berthdev/berth/internal/retry"
)

// daytonaPlugin builds the Daytona plugin (internal/daytonaplugin) into a
// directory of the test and writes its manifest.
func daytonaPlugin(t *testing.T) plugin.Plugin {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "daytonaplugin")
	if out, err := goBuild(bin, "github.com/berthdev/berth/drivers/plugin/internal/daytonaplugin"); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	p := plugin.Plugin{Binary: bin, SHA256: sum(bin)}
	if err := plugin.WriteManifest(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// manifest returns p's manifest as JSON fields.
func manifest(t *testing.T, p plugin.Plugin) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(p.Binary + plugin.ManifestSuffix)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// Issue 54: drivers.ImageLister crosses the plugin boundary when the
// plugin's driver implements it (the Daytona driver against the fake
// Daytona API: the same images, errors with the same code, reason and
// sentinels as the compiled driver's), and environment's Catalog.ListImages
// lists them through the plugin; the fake implements none, and neither
// does the host's driver of its plugin, which the Catalog refuses as
// unsupported.
func TestImageListerCrossesWhenImplemented(t *testing.T) {
	srv, err := daytonafake.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	base, err := srv.CreateSnapshot("berth-base:1.0", "debian:12.7")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := srv.CreateSnapshot("team-tools", "debian:12")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AgeSnapshot(tools.ID, daytonafake.SnapshotIdleLimit+time.Hour); err != nil {
		t.Fatal(err)
	}
	p := daytonaPlugin(t)
	if m := manifest(t, p); m["images"] != true {
		t.Errorf("the Daytona plugin's manifest says images %v, want true", m["images"])
	}
	through := load(t, p)
	compiled := daytona.New(nil)
	l, err := drivers.DriverAs[drivers.ImageLister](through)
	if err != nil {
		t.Fatalf("the host's driver of the Daytona plugin: %v, want a drivers.ImageLister", err)
	}
	cl := compiled.(drivers.ImageLister)
	ctx := t.Context()
	cfg, err := through.Schema().Normalize(map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey(), "snapshot_id": base.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := drivers.ImageChoice{Value: tools.ID, Name: "team-tools", Source: "debian:12", State: "inactive", Usable: true}
	if got, err := l.ListImages(ctx, cfg, "TEAM"); err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("ListImages(TEAM) through the plugin = %+v, %v; want [%+v]", got, err, want)
	}
	noReactivation := cfg.Clone()
	noReactivation["reactivate_snapshot"] = false
	for _, tc := range []struct {
		cfg   config.Config
		match string
		n     int
	}{{cfg, "", 2}, {cfg, "berth", 1}, {noReactivation, "team", 1}, {cfg, "no-such-image", 0}} {
		got, err := l.ListImages(ctx, tc.cfg, tc.match)
		if err != nil || len(got) != tc.n {
			t.Errorf("ListImages(%q) through the plugin = %+v, %v; want %d images", tc.match, got, err, tc.n)
			continue
		}
		if w, err := cl.ListImages(ctx, tc.cfg, tc.match); err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("ListImages(%q) through the plugin = %+v, compiled %+v, %v", tc.match, got, w, err)
		}
	}

	// Errors cross as the other calls' do: code, reason, sentinels,
	// transience, and no secret in the text.
	const wrong = "dtn-wrong-key-0123456789"
	bad := cfg.Clone()
	bad["api_key"] = wrong
	dead := cfg.Clone()
	dead["api_url"] = "http://127.0.0.1:1/api"
	for what, c := range map[string]config.Config{"a wrong key": bad, "an API nothing serves": dead} {
		_, err := l.ListImages(ctx, c, "")
		_, werr := cl.ListImages(ctx, c, "")
		if err == nil || werr == nil {
			t.Errorf("ListImages with %s: %v through the plugin, %v compiled; want both to fail", what, err, werr)
			continue
		}
		if errcode.Code(err) != errcode.Code(werr) || errcode.ReasonOf(err) != errcode.ReasonOf(werr) ||
			retry.IsTransient(err) != retry.IsTransient(werr) || strings.Contains(err.Error(), wrong) {
			t.Errorf("ListImages with %s through the plugin: %v (code %s, reason %q, transient %t); compiled: %v (code %s, reason %q, transient %t)",
				what, err, errcode.Code(err), errcode.ReasonOf(err), retry.IsTransient(err), werr, errcode.Code(werr), errcode.ReasonOf(werr), retry.IsTransient(werr))
		}
		for _, s := range []error{drivers.ErrAuth, drivers.ErrUnavailable, drivers.ErrTransient} {
			if errors.Is(err, s) != errors.Is(werr, s) {
				t.Errorf("ListImages with %s: errors.Is(%v) is %t through the plugin, %t compiled", what, s, errors.Is(err, s), errors.Is(werr, s))
			}
		}
	}
	if _, err := l.ListImages(ctx, bad, ""); !errors.Is(err, drivers.ErrAuth) {
		t.Errorf("ListImages with a wrong key through the plugin: %v, want ErrAuth", err)
	}

	// The fake lists no images: neither does the host's driver of its plugin.
	fp := load(t, fakePlugin(t))
	if _, ok := drivers.Driver(fake.New(nil)).(drivers.ImageLister); ok {
		t.Error("the fake is a drivers.ImageLister now: its plugin's host driver must be one too; change this test")
	}
	if _, ok := fp.(drivers.ImageLister); ok {
		t.Error("the host's driver of the fake plugin is a drivers.ImageLister, though the fake lists no images")
	}
	if _, err := drivers.DriverAs[drivers.ImageLister](fp); !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("DriverAs[ImageLister] of the fake plugin's driver: %v, want ErrUnsupported", err)
	}
	if m := manifest(t, fakePlugin(t)); m["images"] != nil {
		t.Errorf("the fake plugin's manifest says images %v, want nothing", m["images"])
	}

	// environment's Catalog (a System's) lists a saved environment's and an unsaved
	// config's images through the plugin.
	admin := authz.Principal{ID: "u_admin", Role: authz.RoleInstanceAdmin}
	sys, err := berth.New(ctx, &berth.Options{Drivers: []drivers.Driver{through, fp}, TestMode: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	cat := sys.Catalog()
	v, err := cat.Create(ctx, admin, environment.CreateRequest{Name: "cloud", Driver: "daytona",
		Config: map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey(), "snapshot_id": base.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := cat.ListImages(ctx, admin, environment.ImagesRequest{Environment: v.ID, Match: "team"}); err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("Catalog.ListImages of the saved environment = %+v, %v; want [%+v]", got, err, want)
	}
	got, err := cat.ListImages(ctx, admin, environment.ImagesRequest{Driver: "daytona", Config: map[string]any{"api_url": srv.URL(), "api_key": srv.APIKey()}})
	if err != nil || len(got) != 2 {
		t.Errorf("Catalog.ListImages of an unsaved config = %+v, %v; want both snapshots", got, err)
	}
	_, err = cat.ListImages(ctx, admin, environment.ImagesRequest{Driver: "daytona", Config: map[string]any{"api_url": srv.URL(), "api_key": wrong}})
	if !errors.Is(err, drivers.ErrAuth) || strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), "driver daytona") {
		t.Errorf("Catalog.ListImages with a wrong key = %v, want ErrAuth naming the driver, without the key", err)
	}
	_, err = cat.ListImages(ctx, admin, environment.ImagesRequest{Driver: "fake", Config: map[string]any{"image": fake.DefaultImage}})
	if !errors.Is(err, drivers.ErrUnsupported) {
		t.Errorf("Catalog.ListImages of the fake plugin's driver = %v, want ErrUnsupported", err)
	}
}

// A manifest that says images of a plugin whose driver lists none: the
// host's driver is an ImageLister as the manifest says, and its call is
// refused by the handshake naming the difference, never reaching the
// plugin's driver.
func TestImagesMustAgreeWithManifest(t *testing.T) {
	p := fakePlugin(t)
	bin := filepath.Join(t.TempDir(), "fakeplugin")
	b, err := os.ReadFile(p.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	m := manifest(t, p)
	m["images"] = true
	raw, _ := json.Marshal(m)
	if err := os.WriteFile(bin+plugin.ManifestSuffix, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	d := load(t, plugin.Plugin{Binary: bin, SHA256: p.SHA256})
	l, ok := d.(drivers.ImageLister)
	if !ok {
		t.Fatal("the host's driver of a manifest that says images is no drivers.ImageLister")
	}
	_, err = l.ListImages(t.Context(), config.Config{"image": fake.DefaultImage}, "")
	if !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), "images: the plugin says none, its manifest true") {
		t.Errorf("ListImages through a plugin whose handshake disagrees: %v", err)
	}
}
