package lease_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/lease"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	// LEASE-4 / QUAL-3: identity fields and secret references with their
	// versions count; knobs and metadata do not.
	fk := fake.New(nil)
	other := fake.New(&fake.Options{Name: "fake2"})
	base := config.Config{"region": "r1", "cpus": int64(1), "api_key": config.SecretRef{ID: "k", Version: 1}}
	with := func(k string, v any) config.Config { c := base.Clone(); c[k] = v; return c }
	tests := []struct {
		name string
		d    drivers.Driver
		cfg  config.Config
		same bool
	}{
		{"same config", fk, base.Clone(), true},
		{"knob changed", fk, with("cpus", int64(8)), true},
		{"metadata changed", fk, with("notes", "hello"), true},
		{"startup timeout changed", fk, with("startup_timeout", "5m"), true},
		{"identity changed", fk, with("region", "r2"), false},
		{"image changed", fk, with("image", "busybox:1"), false},
		{"secret version changed", fk, with("api_key", config.SecretRef{ID: "k", Version: 2}), false},
		{"secret reference changed", fk, with("api_key", config.SecretRef{ID: "k2", Version: 1}), false},
		{"other driver", other, base.Clone(), false},
		{"JSON-decoded secret reference", fk, with("api_key", map[string]any{"$secret": "k", "version": float64(1)}), true},
	}
	want, err := lease.Fingerprint(fk, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := lease.Fingerprint(tt.d, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if (got == want) != tt.same {
				t.Errorf("Fingerprint equal to the base: %t, want %t", got == want, tt.same)
			}
		})
	}
}

// A config value without a JSON encoding is an error naming the driver, not
// a panic; a store-decoded config never holds one, so this guards configs
// built in Go.
func TestFingerprintOfNonJSONValueIsAnError(t *testing.T) {
	t.Parallel()
	fk := fake.New(nil)
	for name, v := range map[string]any{"channel": make(chan int), "func": func() {}, "NaN": math.NaN()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fp, err := lease.Fingerprint(fk, config.Config{"region": v})
			if !errors.Is(err, errcode.ErrInvalid) || fp != "" || !strings.Contains(err.Error(), fk.Name()) {
				t.Errorf("Fingerprint = %q, %v; want \"\" and errcode.ErrInvalid naming %q", fp, err, fk.Name())
			}
		})
	}
}

func TestActiveLeaseIsNeverReplacedUnderItsRun(t *testing.T) {
	t.Parallel()
	// LEASE-4 with LEASE-8: a reusable lease in use is not destroyed because
	// the environment changed; it is replaced after its release.
	w := newWorld(t, worldOpts{})
	h := w.acquire(lease.ReuseByEnvironment, "run-1")
	w.env.Config = w.env.Config.Clone()
	w.env.Config["region"] = "elsewhere-2"
	_, err := w.m.Acquire(bg, op, w.req(lease.ReuseByEnvironment, "run-2"))
	if !errors.Is(err, errcode.ErrConflict) {
		t.Fatalf("Acquire with a changed identity while in use: %v, want errcode.ErrConflict", err)
	}
	if st := w.state(h.SandboxID()); st != drivers.StateRunning {
		t.Fatalf("in-use sandbox %s, want running", st)
	}
	if _, err := h.Release(bg, lease.ReleaseOptions{Disposition: lease.Keep}); err != nil {
		t.Fatal(err)
	}
	h2 := w.acquire(lease.ReuseByEnvironment, "run-2")
	if l := h2.Lease(); l.Replaces != h.ID() || l.ReplaceReason != "identity_mismatch" {
		t.Errorf("after release: replaces %q (%s), want %s identity_mismatch", l.Replaces, l.ReplaceReason, h.ID())
	}
}

func TestActiveRunLeaseInAnotherProcess(t *testing.T) {
	t.Parallel()
	// LEASE-8: the same run acquiring through another manager while the
	// lease is active there gets a conflict, not a second sandbox.
	w := newWorld(t, worldOpts{})
	w.acquire(lease.Ephemeral, "run-1")
	_, err := w.newManager(nil).Acquire(bg, op, w.req(lease.Ephemeral, "run-1"))
	if !errors.Is(err, errcode.ErrConflict) {
		t.Errorf("Acquire from another process: %v, want errcode.ErrConflict", err)
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
		t.Errorf("creates = %d, want 1", n)
	}
}

func TestAnotherProcessSharesAnActiveReusableSandbox(t *testing.T) {
	t.Parallel()
	// LEASE-8, LEASE-10: a second replica resumes the same running sandbox.
	w := newWorld(t, worldOpts{})
	h1 := w.acquire(lease.ReuseByEnvironment, "run-1")
	h2, err := w.newManager(nil).Acquire(bg, op, w.req(lease.ReuseByEnvironment, "run-2"))
	if err != nil {
		t.Fatal(err)
	}
	if h2.ID() != h1.ID() || h2.SandboxID() != h1.SandboxID() || !h2.Resumed() {
		t.Errorf("second replica: lease %s sandbox %s; want %s %s resumed", h2.ID(), h2.SandboxID(), h1.ID(), h1.SandboxID())
	}
	if n := fakectl.Of(w.fk).Calls("create"); n != 1 {
		t.Errorf("creates = %d, want 1", n)
	}
}

// secretEnvDriver is the fake with a secret env map in its schema, as the
// docker and daytona drivers have.
type secretEnvDriver struct {
	*fake.Driver
	schema *config.Schema
}

func (d secretEnvDriver) Schema() *config.Schema { return d.schema }

// Issue 11 item 2: rotating (or adding, or removing) a value of a secret
// env map keeps the reuse fingerprint, so a reusable sandbox is not
// replaced; an identity or account change still changes it.
func TestFingerprintLeavesSecretMapsOut(t *testing.T) {
	t.Parallel()
	fk := fake.New(nil)
	s := *fk.Schema()
	s.Fields = append(append([]config.Field(nil), s.Fields...), config.Field{Name: "env", Kind: config.KindSecretMap, Type: config.TypeStringMap})
	d := secretEnvDriver{Driver: fk, schema: &s}
	base := config.Config{"region": "r1", "api_key": config.SecretRef{ID: "k", Version: 1},
		"env": map[string]any{"GITHUB_TOKEN": config.SecretRef{ID: "e", Version: 1}}}
	with := func(k string, v any) config.Config { c := base.Clone(); c[k] = v; return c }
	want, err := lease.Fingerprint(d, base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cfg  config.Config
		same bool
	}{
		{"env value rotated", with("env", map[string]any{"GITHUB_TOKEN": config.SecretRef{ID: "e", Version: 2}}), true},
		{"env value replaced by another secret", with("env", map[string]any{"GITHUB_TOKEN": config.SecretRef{ID: "e2", Version: 1}}), true},
		{"env key added", with("env", map[string]any{"GITHUB_TOKEN": config.SecretRef{ID: "e", Version: 1}, "B": config.SecretRef{ID: "b", Version: 1}}), true},
		{"env JSON form", with("env", map[string]any{"GITHUB_TOKEN": map[string]any{"$secret": "e", "version": float64(1)}}), true},
		{"identity changed", with("region", "r2"), false},
		{"account rotated", with("api_key", config.SecretRef{ID: "k", Version: 2}), false},
	} {
		got, err := lease.Fingerprint(d, tt.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if (got == want) != tt.same {
			t.Errorf("%s: fingerprint equal to the base: %t, want %t", tt.name, got == want, tt.same)
		}
	}
}
