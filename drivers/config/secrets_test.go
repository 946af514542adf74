package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/secretcfg"
)

// secretMapSchema is testSchema with an env field whose values are secrets
// (issue 11 item 2, CFG-3).
func secretMapSchema() *config.Schema {
	s := testSchema()
	s.Fields = append(s.Fields, config.Field{Name: "env", Kind: config.KindSecretMap, Type: config.TypeStringMap})
	return s
}

func TestSecretMapNormalize(t *testing.T) {
	t.Parallel()
	s := secretMapSchema()
	ref := config.SecretRef{ID: "sec_1", Version: 3}
	for _, tc := range []struct {
		name string
		raw  string
		want map[string]any // the normalized env, nil for an error
		errs []string       // substrings of the error
	}{
		{"pasted values", `{"host":"h","key":"k","env":{"A":"` + canary + `","B":""}}`,
			map[string]any{"A": canary, "B": ""}, nil},
		{"references in their JSON form", `{"host":"h","key":"k","env":{"A":{"$secret":"sec_1","version":3},"B":"x"}}`,
			map[string]any{"A": ref, "B": "x"}, nil},
		{"a number", `{"host":"h","key":"k","env":{"A":5}}`, nil,
			[]string{`field "env"`, `key "A"`, "want a string or a secret reference, got number"}},
		{"an object that is no reference", `{"host":"h","key":"k","env":{"A":{"$secret":"s","version":1,"x":1}}}`, nil,
			[]string{`field "env"`, `key "A"`}},
		{"not an object", `{"host":"h","key":"k","env":["` + canary + `"]}`, nil,
			[]string{`field "env"`, "got array"}},
		{"a NUL byte", `{"host":"h","key":"k","env":{"A":"` + canary + `\u0000"}}`, nil,
			[]string{`field "env"`, `key "A"`, "NUL"}},
		{"too long", `{"host":"h","key":"k","env":{"A":"` + canary + strings.Repeat("x", config.MaxStringLen) + `"}}`, nil,
			[]string{`field "env"`, `key "A"`, "longer than"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := s.Normalize(fromJSON(t, tc.raw))
			if tc.want != nil {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, cfg["env"]); diff != "" {
					t.Errorf("env (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("Normalize accepted %s", tc.raw)
			}
			for _, w := range tc.errs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), canary) {
				t.Errorf("error %q contains the secret value", err)
			}
		})
	}
	// Invalid UTF-8 cannot be written in JSON text; it comes from Go.
	_, err := s.Normalize(map[string]any{"host": "h", "key": "k", "env": map[string]any{"A": canary + "\xff"}})
	if err == nil || !strings.Contains(err.Error(), "UTF-8") || strings.Contains(err.Error(), canary) {
		t.Errorf("invalid UTF-8: %v", err)
	}
}

// Issue 11 item 2: Redact shows the keys with redacted values, PlainSecrets
// reports pasted values, Partition leaves secret maps out of fingerprints,
// ResolveSecrets resolves each reference and StringMap reads the result.
func TestSecretMapRedactPartitionResolve(t *testing.T) {
	t.Parallel()
	s := secretMapSchema()
	ref := config.SecretRef{ID: "sec_env", Version: 2}
	keyRef := config.SecretRef{ID: "sec_key", Version: 1}
	cfg, err := s.Normalize(map[string]any{"host": "h", "key": keyRef, "env": map[string]any{"TOKEN": ref, "PASTED": canary}})
	if err != nil {
		t.Fatal(err)
	}
	red := s.Redact(cfg)
	if diff := cmp.Diff(map[string]any{"TOKEN": ref, "PASTED": config.Redacted}, red["env"]); diff != "" {
		t.Errorf("Redact env (-want +got):\n%s", diff)
	}
	if b, _ := json.Marshal(red); strings.Contains(string(b), canary) {
		t.Errorf("Redact leaks the value: %s", b)
	}
	if cfg["env"].(map[string]any)["PASTED"] != canary {
		t.Errorf("Redact changed its input")
	}
	if diff := cmp.Diff([]string{"env"}, secretcfg.PlainSecrets(s, cfg)); diff != "" {
		t.Errorf("PlainSecrets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"PASTED"}, secretcfg.PlainSecretKeys(cfg, "env")); diff != "" {
		t.Errorf("PlainSecretKeys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]config.SecretRef{"TOKEN": ref}, cfg.SecretMapRefs("env")); diff != "" {
		t.Errorf("SecretMapRefs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]config.SecretRef{ref, keyRef}, secretcfg.SecretRefs(cfg)); diff != "" {
		t.Errorf("SecretRefs (-want +got):\n%s", diff)
	}
	if got := cfg.StringMap("env"); got != nil {
		t.Errorf("StringMap of an unresolved secret map = %v, want nil", got)
	}

	// Rotating the env secret or pasting a value keeps the parts; the
	// account's secret still counts.
	p := secretcfg.Partition(s, cfg)
	rotated := cfg.Clone()
	rotated["env"] = map[string]any{"TOKEN": config.SecretRef{ID: "sec_env", Version: 3}, "PASTED": "other"}
	if diff := cmp.Diff(p, secretcfg.Partition(s, rotated)); diff != "" {
		t.Errorf("Partition changed with a rotated env secret (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]config.SecretRef{"key": keyRef}, p.Secrets); diff != "" {
		t.Errorf("Partition secrets (-want +got):\n%s", diff)
	}
	if _, ok := p.Knobs["env"]; ok {
		t.Errorf("Partition kept the secret map as a knob")
	}

	// JSON round trip (a store), then resolution.
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var stored map[string]any
	if err := json.Unmarshal(b, &stored); err != nil {
		t.Fatal(err)
	}
	values := map[config.SecretRef]string{ref: "tok-value", keyRef: "key-value"}
	got, err := secretcfg.ResolveSecrets(context.Background(), s, config.Config(stored), func(_ context.Context, r config.SecretRef) (string, error) {
		return values[r], nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"TOKEN": "tok-value", "PASTED": canary}, got.StringMap("env")); diff != "" {
		t.Errorf("resolved StringMap (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{canary, "tok-value"}, secretcfg.SecretValues(s, got)[1:]); diff != "" || secretcfg.SecretValues(s, got)[0] != "key-value" {
		t.Errorf("SecretValues = %q", secretcfg.SecretValues(s, got))
	}
	if _, err := s.Normalize(got); err != nil {
		t.Errorf("a resolved config does not normalize: %v", err)
	}

	// A failing lookup names field and key, never a value.
	_, err = secretcfg.ResolveSecrets(context.Background(), s, cfg, func(_ context.Context, r config.SecretRef) (string, error) {
		if r == ref {
			return canary, errors.New("store down")
		}
		return "key-value", nil
	})
	if err == nil || !strings.Contains(err.Error(), `field "env": key "TOKEN"`) || strings.Contains(err.Error(), canary) {
		t.Errorf("ResolveSecrets error = %v", err)
	}
}
