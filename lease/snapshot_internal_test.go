package lease

import (
	"reflect"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
)

// TestSameConfig: sameConfig is value equality as reflect.DeepEqual has it,
// for every type a normalized config holds and for others.
func TestSameConfig(t *testing.T) {
	base := func() config.Config {
		return config.Config{
			"s": "x", "i": int64(1), "b": true, "d": (2 * time.Second).String(),
			"list": []string{"a", "b"}, "map": map[string]string{"k": "v"},
			"ref":    config.SecretRef{ID: "sec_1", Version: 2},
			"nested": map[string]any{"$secret": "sec_2", "version": int64(1)},
			"any":    []any{"a", int64(1)},
		}
	}
	changes := map[string]func(config.Config){
		"string":                 func(c config.Config) { c["s"] = "y" },
		"int":                    func(c config.Config) { c["i"] = int64(2) },
		"int of another type":    func(c config.Config) { c["i"] = 1 },
		"bool":                   func(c config.Config) { c["b"] = false },
		"list element":           func(c config.Config) { c["list"] = []string{"a", "c"} },
		"list length":            func(c config.Config) { c["list"] = []string{"a"} },
		"nil list":               func(c config.Config) { c["list"] = []string(nil) },
		"map value":              func(c config.Config) { c["map"] = map[string]string{"k": "w"} },
		"nil map":                func(c config.Config) { c["map"] = map[string]string(nil) },
		"secret version":         func(c config.Config) { c["ref"] = config.SecretRef{ID: "sec_1", Version: 3} },
		"nested value":           func(c config.Config) { c["nested"] = map[string]any{"$secret": "sec_2", "version": int64(2)} },
		"slice of any":           func(c config.Config) { c["any"] = []any{"a", int64(2)} },
		"key removed":            func(c config.Config) { delete(c, "s") },
		"key added":              func(c config.Config) { c["extra"] = "" },
		"key renamed, same size": func(c config.Config) { delete(c, "s"); c["t"] = "x" },
	}
	if a, b := base(), base(); !sameConfig(a, b) || !reflect.DeepEqual(a, b) {
		t.Fatal("two equal configs are not the same")
	}
	if sameConfig(config.Config{"list": []string{}}, config.Config{"list": []string(nil)}) {
		t.Error("an empty list is the same as a nil one")
	}
	for name, change := range changes {
		a, b := base(), base()
		change(b)
		if sameConfig(a, b) || sameConfig(b, a) {
			t.Errorf("%s: still the same config", name)
		}
		if reflect.DeepEqual(a, b) {
			t.Errorf("%s: the change changes nothing (test bug)", name)
		}
	}
}

// TestSnapshotShared: the acquisitions of one revision of an environment
// record one config map (read-only, see Store), compared, not assumed:
// the same revision with another config (a store that did not bump it)
// gets its own, and so does the next revision.
func TestSnapshotShared(t *testing.T) {
	var m Manager
	d := fake.New(nil)
	cfg := func(region string) config.Config {
		c, err := d.Schema().Normalize(map[string]any{"region": region})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	env := func(rev int64) *environment.Environment {
		return &environment.Environment{ID: "env-1", Driver: d.Name(), Revision: rev}
	}
	same := func(a, b config.Config) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	snap := func(rev int64, c config.Config) (string, config.Config) {
		t.Helper()
		fp, got, err := m.fingerprint(d, env(rev), c)
		if err != nil {
			t.Fatal(err)
		}
		if want, _ := reuseFingerprint(d, c); fp != want {
			t.Fatalf("revision %d, config %v: fingerprint %s, want %s", rev, c, fp, want)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("revision %d: snapshot %v, want %v", rev, got, c)
		}
		return fp, got
	}
	_, first := snap(1, cfg("r1"))
	if _, again := snap(1, cfg("r1")); !same(again, first) {
		t.Error("a second acquisition of revision 1 got a config map of its own")
	}
	other := cfg("r2")
	if _, got := snap(1, other); !same(got, other) {
		t.Error("revision 1 with another config got the cached one")
	}
	next := cfg("r2")
	if _, got := snap(2, next); !same(got, next) || same(got, first) {
		t.Error("revision 2 got a cached config")
	}
	draft := &environment.Environment{Driver: d.Name()}
	c := cfg("r1")
	if _, got, err := m.fingerprint(d, draft, c); err != nil || !same(got, c) {
		t.Errorf("an unsaved environment's config: %v, %v; want its own", got, err)
	}
}
