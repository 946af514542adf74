package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/docker"
	"github.com/berthdev/berth/internal/reason"
)

const pinned = "127.0.0.1:5000/berth/busybox@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestSchemaDefaults(t *testing.T) {
	t.Parallel()
	d := docker.NewConcrete(&docker.Options{Host: "unix:///run/test.sock"})
	cfg, err := d.Schema().Normalize(map[string]any{"image": pinned})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Config{
		"host": "unix:///run/test.sock", "image": pinned, "pull_policy": "missing", "memory": "1g",
		"pids_limit": int64(512), "network": "none", "readonly_rootfs": false, "workdir": "/", "startup_timeout": "1m0s",
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("normalized defaults (-want +got):\n%s", diff)
	}
}

// QUAL-3: which fields are identity, secret, knob or metadata.
func TestSchemaKinds(t *testing.T) {
	t.Parallel()
	s := docker.NewConcrete(nil).Schema()
	if s.ImageField != "image" {
		t.Errorf("ImageField = %q", s.ImageField)
	}
	want := map[string]config.Kind{"host": config.KindIdentity, "image": config.KindIdentity, "registry_auth": config.KindSecret,
		"memory": config.KindKnob, "network": config.KindKnob, "labels": config.KindMetadata}
	for f, k := range want {
		got, ok := s.Field(f)
		if !ok || got.Kind != k {
			t.Errorf("field %q: kind %v (present %v), want %v", f, got.Kind, ok, k)
		}
	}
}

func TestSchemaRefusesUnsafeOrInvalidValues(t *testing.T) {
	t.Parallel()
	d := docker.NewConcrete(nil)
	for _, tc := range []struct {
		name  string
		raw   map[string]any
		field string
	}{
		{"host network", map[string]any{"image": pinned, "network": "host"}, "network"},
		{"another container's network", map[string]any{"image": pinned, "network": "container:abc"}, "network"},
		{"ports without a network", map[string]any{"image": pinned, "ports": []any{"80"}}, "ports"},
		{"bad port", map[string]any{"image": pinned, "network": "bridge", "ports": []any{"http"}}, "ports"},
		{"bad memory", map[string]any{"image": pinned, "memory": "lots"}, "memory"},
		{"tiny memory", map[string]any{"image": pinned, "memory": "1k"}, "memory"},
		{"bad cpus", map[string]any{"image": pinned, "cpus": "-1"}, "cpus"},
		{"zero pids", map[string]any{"image": pinned, "pids_limit": 0}, "pids_limit"},
		{"reserved label", map[string]any{"image": pinned, "labels": map[string]any{"berth.managed": "x"}}, "labels"},
		{"bad image", map[string]any{"image": "Not A Reference"}, "image"},
		{"missing image", map[string]any{}, "image"},
		{"relative workdir", map[string]any{"image": pinned, "workdir": "work"}, "workdir"},
		{"bad host", map[string]any{"image": pinned, "host": "docker.example:2375"}, "host"},
		{"bad pull policy", map[string]any{"image": pinned, "pull_policy": "sometimes"}, "pull_policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := d.Schema().Normalize(tc.raw)
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Field != tc.field || !errors.Is(err, config.ErrInvalid) {
				t.Errorf("Normalize(%v): err = %v, want a ConfigError on %q", tc.raw, err, tc.field)
			}
		})
	}
}

// CFG-3: a registry credential never appears in an error.
func TestRegistryAuthNeverInErrors(t *testing.T) {
	t.Parallel()
	d := docker.NewConcrete(nil)
	const secret = "robot:hunter2-very-secret"
	_, err := d.Schema().Normalize(map[string]any{"image": pinned, "registry_auth": secret + "\n", "network": "host"})
	if err == nil {
		t.Fatal("Normalize accepted a credential with a newline")
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error reveals the credential: %v", err)
	}
	cfg, err := d.Schema().Normalize(map[string]any{"image": pinned, "registry_auth": secret})
	if err != nil {
		t.Fatal(err)
	}
	if red := d.Schema().Redact(cfg); red["registry_auth"] != config.Redacted {
		t.Errorf("Redact kept %v", red["registry_auth"])
	}
}

// An engine that cannot be reached (DOCKER_HOST at a dead unix socket) is
// the provider's control plane being down: ErrUnavailable, code
// provider_unavailable, naming the host (PRB-5).
func TestDeadEngineIsProviderUnavailable(t *testing.T) {
	t.Parallel()
	d := docker.NewConcrete(nil)
	defer d.Close()
	host := "unix://" + t.TempDir() + "/no-docker.sock"
	cfg, err := d.Schema().Normalize(map[string]any{"image": pinned, "host": host})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err = d.Acquire(ctx, cfg, drivers.AcquireRequest{})
	if !errors.Is(err, drivers.ErrUnavailable) || errors.Is(err, drivers.ErrUnreachable) || !strings.Contains(err.Error(), host) {
		t.Errorf("Acquire: err = %v, want ErrUnavailable (not ErrUnreachable) naming %s", err, host)
	}
	if got := reason.Of(err); got != reason.ProviderUnavailable {
		t.Errorf("CodeOf(Acquire error) = %s, want %s", got, reason.ProviderUnavailable)
	}
	if _, err := d.List(ctx, cfg, nil); !errors.Is(err, drivers.ErrUnavailable) {
		t.Errorf("List: err = %v, want ErrUnavailable", err)
	}
	if _, err := d.Destroy(ctx, cfg, "abc"); !errors.Is(err, drivers.ErrUnavailable) {
		t.Errorf("Destroy: err = %v, want ErrUnavailable", err)
	}
}
