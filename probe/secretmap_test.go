package probe

import (
	"testing"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
)

// secretEnvDriver is the fake with a secret env map in its schema, as the
// docker and daytona drivers have.
type secretEnvDriver struct {
	*fake.Driver
	schema *config.Schema
}

func (d secretEnvDriver) Schema() *config.Schema { return d.schema }

// Issue 11 item 2, QUAL-3: the qualification fingerprint leaves secret env
// maps out, so rotating a token in env keeps a qualification; changing an
// identity field or the account's secret version still makes it stale.
func TestQualificationFingerprintLeavesSecretMapsOut(t *testing.T) {
	t.Parallel()
	fk := fake.New(nil)
	s := *fk.Schema()
	s.Fields = append(append([]config.Field(nil), s.Fields...), config.Field{Name: "env", Kind: config.KindSecretMap, Type: config.TypeStringMap})
	d := secretEnvDriver{Driver: fk, schema: &s}
	base := config.Config{"region": "r1", "image": "registry.example/img@sha256:" + sha('a'),
		"api_key": config.SecretRef{ID: "k", Version: 1},
		"env":     map[string]any{"GITHUB_TOKEN": config.SecretRef{ID: "e", Version: 1}}}
	fp := func(cfg config.Config) string {
		subj, problem := subjectOf(d, &environment.Environment{ID: "env_1", Config: cfg}, "acme")
		if problem != "" {
			t.Fatal(problem)
		}
		return subj.Fingerprint
	}
	want := fp(base)
	with := func(k string, v any) config.Config { c := base.Clone(); c[k] = v; return c }
	for _, tt := range []struct {
		name string
		cfg  config.Config
		same bool
	}{
		{"env value rotated", with("env", map[string]any{"GITHUB_TOKEN": config.SecretRef{ID: "e", Version: 2}}), true},
		{"env key removed", with("env", map[string]any{}), true},
		{"identity changed", with("region", "r2"), false},
		{"account rotated", with("api_key", config.SecretRef{ID: "k", Version: 2}), false},
	} {
		if got := fp(tt.cfg); (got == want) != tt.same {
			t.Errorf("%s: fingerprint equal to the base: %t, want %t", tt.name, got == want, tt.same)
		}
	}
}

func sha(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}
