package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/reason"
	"github.com/berthdev/berth/internal/secretcfg"
)

const canary = "canary-secret-value-8c1f"

func testSchema() *config.Schema {
	return &config.Schema{
		Driver:     "test",
		ImageField: "image",
		Fields: []config.Field{
			{Name: "host", Kind: config.KindIdentity, Type: config.TypeString, Required: true},
			{Name: "port", Kind: config.KindIdentity, Type: config.TypeInt, Default: int64(22)},
			{Name: "image", Kind: config.KindIdentity, Type: config.TypeString},
			{Name: "mode", Kind: config.KindKnob, Type: config.TypeString, Enum: []string{"fast", "safe"}, Default: "safe"},
			{Name: "verbose", Kind: config.KindKnob, Type: config.TypeBool},
			{Name: "timeout", Kind: config.KindKnob, Type: config.TypeDuration, Default: "30s"},
			{Name: "tags", Kind: config.KindMetadata, Type: config.TypeStringList},
			{Name: "labels", Kind: config.KindMetadata, Type: config.TypeStringMap},
			{Name: "key", Kind: config.KindSecret, Type: config.TypeString, Required: true},
			{Name: "token", Kind: config.KindSecret, Type: config.TypeString,
				Check: func(v any) error {
					if s, ok := v.(string); ok && len(s) < 4 {
						return errors.New("too short")
					}
					return nil
				}},
		},
	}
}

func fromJSON(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		raw  string
		want config.Config
	}{
		{"defaults applied", `{"host":"h","key":"k"}`,
			config.Config{"host": "h", "port": int64(22), "mode": "safe", "timeout": "30s", "key": "k"}},
		{"values normalized", `{"host":"h","port":2222,"mode":"fast","verbose":true,"timeout":"1m30s","tags":["a"],"labels":{"x":"y"},"key":{"$secret":"s1","version":3}}`,
			config.Config{"host": "h", "port": int64(2222), "mode": "fast", "verbose": true, "timeout": "1m30s",
				"tags": []string{"a"}, "labels": map[string]string{"x": "y"}, "key": config.SecretRef{ID: "s1", Version: 3}}},
		{"null means absent", `{"host":"h","key":"k","port":null}`,
			config.Config{"host": "h", "port": int64(22), "mode": "safe", "timeout": "30s", "key": "k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := testSchema().Normalize(fromJSON(t, tc.raw))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// A normalized config normalizes to itself, also after JSON.
			b, _ := json.Marshal(got)
			again, err := testSchema().Normalize(fromJSON(t, string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("not idempotent through JSON (-first +second):\n%s", diff)
			}
		})
	}
}

// CFG-8: every config error names the field.
func TestNormalizeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		raw         string
		fields      []string
		credentials bool
	}{
		{"unknown field", `{"host":"h","key":"k","hots":"x"}`, []string{"hots"}, false},
		{"wrong type string", `{"host":7,"key":"k"}`, []string{"host"}, false},
		{"wrong type int", `{"host":"h","key":"k","port":"22"}`, []string{"port"}, false},
		{"fractional int", `{"host":"h","key":"k","port":22.5}`, []string{"port"}, false},
		{"wrong type bool", `{"host":"h","key":"k","verbose":"yes"}`, []string{"verbose"}, false},
		{"bad duration", `{"host":"h","key":"k","timeout":"soon"}`, []string{"timeout"}, false},
		{"negative duration", `{"host":"h","key":"k","timeout":"-1s"}`, []string{"timeout"}, false},
		{"enum", `{"host":"h","key":"k","mode":"reckless"}`, []string{"mode"}, false},
		{"list element", `{"host":"h","key":"k","tags":["a",1]}`, []string{"tags"}, false},
		{"map value", `{"host":"h","key":"k","labels":{"a":1}}`, []string{"labels"}, false},
		{"reserved label prefix", `{"host":"h","key":"k","labels":{"berth.lease":"x"}}`, []string{"labels"}, false},
		{"empty label key", `{"host":"h","key":"k","labels":{"":"x"}}`, []string{"labels"}, false},
		{"missing required", `{"key":"k"}`, []string{"host"}, false},
		{"missing secret", `{"host":"h"}`, []string{"key"}, true},
		{"empty secret", `{"host":"h","key":""}`, []string{"key"}, false},
		{"secret wrong type", `{"host":"h","key":42}`, []string{"key"}, false},
		{"several", `{"port":"x","zzz":1,"key":"k"}`, []string{"zzz", "host", "port"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := testSchema().Normalize(fromJSON(t, tc.raw))
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("err = %v, want config.ErrInvalid", err)
			}
			if errors.Is(err, config.ErrCredentialsMissing) != tc.credentials {
				t.Errorf("errors.Is(ErrCredentialsMissing) = %v, want %v (%v)", !tc.credentials, tc.credentials, err)
			}
			var fields []string
			for _, e := range flatten(err) {
				var ce *config.Error
				if errors.As(e, &ce) {
					fields = append(fields, ce.Field)
					if ce.Driver != "test" || !strings.Contains(ce.Error(), fmt.Sprintf("%q", ce.Field)) {
						t.Errorf("error %q does not name driver and field", ce)
					}
				}
			}
			if diff := cmp.Diff(tc.fields, fields); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
		})
	}
}

func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, isCE := err.(*config.Error); !isCE {
			var out []error
			for _, e := range j.Unwrap() {
				out = append(out, flatten(e)...)
			}
			return out
		}
	}
	return []error{err}
}

// CFG-3: a secret value never appears in an error.
func TestSecretNeverInErrors(t *testing.T) {
	t.Parallel()
	s := testSchema()
	for _, raw := range []map[string]any{
		{"host": "h", "key": canary, "token": "abc"},       // check failure of another secret
		{"host": 5, "key": canary},                         // unrelated error
		{"host": "h", "key": map[string]any{"x": canary}},  // malformed reference
		{"host": "h", "key": canary, "token": []any{"ab"}}, // wrong type
	} {
		_, err := s.Normalize(raw)
		if err == nil {
			t.Fatalf("Normalize(%v) succeeded", raw)
		}
		if msg := err.Error(); strings.Contains(msg, canary) {
			t.Errorf("error contains the secret: %s", msg)
		}
	}
	_, err := secretcfg.ResolveSecrets(context.Background(), s, config.Config{"key": config.SecretRef{ID: "s", Version: 1}},
		func(context.Context, config.SecretRef) (string, error) { return canary, errors.New("store down") })
	if err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), `"key"`) {
		t.Errorf("ResolveSecrets error = %v, want the field named and no value", err)
	}
}

func TestRedactPartitionResolve(t *testing.T) {
	t.Parallel()
	s := testSchema()
	ref := config.SecretRef{ID: "tok-1", Version: 2}
	cfg := config.Config{"host": "h", "port": int64(22), "mode": "safe", "tags": []string{"t"}, "key": canary, "token": ref, "stray": "x"}

	red := s.Redact(cfg)
	if red["key"] != config.Redacted || red["token"] != ref || cfg["key"] != canary {
		t.Errorf("Redact = %v (input %v)", red, cfg)
	}
	if b, _ := json.Marshal(red); strings.Contains(string(b), canary) {
		t.Errorf("redacted JSON contains the secret: %s", b)
	}
	if diff := cmp.Diff([]string{"key"}, secretcfg.PlainSecrets(s, cfg)); diff != "" {
		t.Errorf("PlainSecrets (-want +got):\n%s", diff)
	}

	want := secretcfg.Parts{
		Identity: map[string]any{"host": "h", "port": int64(22)},
		Secrets:  map[string]config.SecretRef{"token": ref}, // plain values take no part
		Knobs:    map[string]any{"mode": "safe"},
		Metadata: map[string]any{"tags": []string{"t"}},
	}
	if diff := cmp.Diff(want, secretcfg.Partition(s, cfg)); diff != "" {
		t.Errorf("Partition (-want +got):\n%s", diff)
	}

	var asked []config.SecretRef
	got, err := secretcfg.ResolveSecrets(context.Background(), s, cfg, func(_ context.Context, r config.SecretRef) (string, error) {
		asked = append(asked, r)
		return "resolved-" + r.ID, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got["token"] != "resolved-tok-1" || got["key"] != canary || cfg["token"] != ref {
		t.Errorf("ResolveSecrets = %v (input %v)", got, cfg)
	}
	if diff := cmp.Diff([]config.SecretRef{ref}, asked); diff != "" {
		t.Errorf("lookups (-want +got):\n%s", diff)
	}
	if s := ref.String(); s != "secret:tok-1@v2" {
		t.Errorf("SecretRef.String = %q", s)
	}
}

// LEASE-7: only a confirmed receipt for the same sandbox in the asked state is proof.
func TestReceiptProves(t *testing.T) {
	t.Parallel()
	ok := func(st drivers.State) drivers.Receipt {
		return drivers.Receipt{ProviderLeaseID: "sb-1", State: st, Confirmed: true}
	}
	for _, tc := range []struct {
		name string
		r    drivers.Receipt
		id   string
		d    drivers.Disposition
		want bool
	}{
		{"keep needs no proof", drivers.Receipt{}, "sb-1", drivers.Keep, true},
		{"confirmed stop", ok(drivers.StateStopped), "sb-1", drivers.Stop, true},
		{"destroyed satisfies stop", ok(drivers.StateDestroyed), "sb-1", drivers.Stop, true},
		{"confirmed destroy", ok(drivers.StateDestroyed), "sb-1", drivers.Destroy, true},
		{"stopped is not destroyed", ok(drivers.StateStopped), "sb-1", drivers.Destroy, false},
		{"running is not stopped", ok(drivers.StateRunning), "sb-1", drivers.Stop, false},
		{"stop accepted is not proof", drivers.Receipt{ProviderLeaseID: "sb-1", State: drivers.StateStopped}, "sb-1", drivers.Stop, false},
		{"another sandbox", ok(drivers.StateDestroyed), "sb-2", drivers.Destroy, false},
		{"empty ids", drivers.Receipt{State: drivers.StateDestroyed, Confirmed: true}, "", drivers.Destroy, false},
		{"unknown disposition", ok(drivers.StateDestroyed), "sb-1", drivers.Disposition(9), false},
		{"the runner's word is no proof", drivers.Receipt{ProviderLeaseID: "sb-1", State: drivers.StateDestroyed, Confirmed: true,
			EvidenceKind: drivers.EvidenceRunnerAttested}, "sb-1", drivers.Destroy, false},
		{"a host check", drivers.Receipt{ProviderLeaseID: "sb-1", State: drivers.StateDestroyed, Confirmed: true,
			EvidenceKind: drivers.EvidenceTagScan}, "sb-1", drivers.Destroy, true},
	} {
		if got := tc.r.Proves(tc.id, tc.d); got != tc.want {
			t.Errorf("%s: Proves = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCodeOf(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("ssh a@b:22: %w", err) }
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, reason.OK},
		{wrap(drivers.ErrUnreachable), reason.Unreachable},
		{wrap(drivers.ErrAuth), reason.AuthFailed},
		{wrap(drivers.ErrHostKeyMismatch), reason.HostKeyMismatch},
		{wrap(drivers.ErrHostKeyUnknown), reason.HostKeyUnknown},
		{wrap(config.ErrCredentialsMissing), reason.MissingCredentials},
		{wrap(drivers.ErrImageNotFound), reason.ImageNotFound},
		{wrap(drivers.ErrImageInactive), reason.ImageInactive},
		{wrap(drivers.ErrTLSUnverified), reason.TLSUnverified},
		// A certificate failure is an identity failure, never an auth failure
		// or a transient one, whatever else the error carries.
		{errors.Join(drivers.ErrAuth, drivers.ErrTLSUnverified), reason.TLSUnverified},
		{errors.Join(drivers.ErrTransient, drivers.ErrTLSUnverified), reason.TLSUnverified},
		{wrap(errcode.ErrNotFound), reason.NotFound},
		{wrap(drivers.ErrTransient), reason.Transient},
		{wrap(drivers.ErrUnsupported), reason.Unsupported},
		{wrap(drivers.ErrUnavailable), reason.ProviderUnavailable},
		{wrap(drivers.ErrTimeout), reason.Timeout},
		{wrap(context.DeadlineExceeded), reason.Timeout},
		{wrap(context.Canceled), reason.Cancelled},
		{wrap(config.ErrInvalid), reason.InvalidConfig},
		{errors.New("boom"), reason.Internal},
		// A missing secret is a config error but reported as missing credentials.
		{&config.Error{Driver: "d", Field: "key", Reason: "required"}, reason.InvalidConfig},
		{errors.Join(drivers.ErrTransient, drivers.ErrHostKeyMismatch), reason.HostKeyMismatch},
	} {
		if got := reason.Of(tc.err); got != tc.want {
			t.Errorf("CodeOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	_, err := testSchema().Normalize(map[string]any{"host": "h"})
	if got := reason.Of(err); got != reason.MissingCredentials {
		t.Errorf("CodeOf(missing secret) = %q, want %q", got, reason.MissingCredentials)
	}
}

// Issue 11 item 5: every string of a config (String and secret values, list
// elements, map keys and values) is bounded by MaxStringLen, lists and
// maps by MaxEntries, and NUL bytes and invalid UTF-8 are refused; the
// error names the field and never quotes a secret.
func TestNormalizeRefusesOversizedAndMalformedStrings(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", config.MaxStringLen+1)
	many := func() []any {
		l := make([]any, config.MaxEntries+1)
		for i := range l {
			l[i] = "t"
		}
		return l
	}
	manyKeys := func() map[string]any {
		m := map[string]any{}
		for i := range config.MaxEntries + 1 {
			m[fmt.Sprint(i)] = "v"
		}
		return m
	}
	for _, tc := range []struct {
		name, field, reason string
		set                 any
	}{
		{"long string", "host", "longer than 65536 bytes", long},
		{"NUL in a string", "host", "contains a NUL byte", "h\x00st"},
		{"invalid UTF-8 string", "host", "not valid UTF-8", "h\xffst"},
		{"long enum value is not quoted", "mode", "not one of", long},
		{"long secret", "key", "longer than 65536 bytes", canary + long},
		{"NUL in a secret", "key", "contains a NUL byte", canary + "\x00"},
		{"invalid UTF-8 secret", "key", "not valid UTF-8", canary + "\xc3"},
		{"list element", "tags", "element 1: contains a NUL byte", []any{"a", "b\x00"}},
		{"long list", "tags", "more than 1024 elements", many()},
		{"map value", "labels", `key "a": not valid UTF-8`, map[string]any{"a": "\xff"}},
		{"map key", "labels", "a key: contains a NUL byte", map[string]any{"a\x00": "v"}},
		{"big map", "labels", "more than 1024 entries", manyKeys()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := map[string]any{"host": "h", "key": "k"}
			raw[tc.field] = tc.set
			_, err := testSchema().Normalize(raw)
			var ce *config.Error
			if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Normalize: %v, want a *config.Error wrapping config.ErrInvalid", err)
			}
			if ce.Field != tc.field || !strings.Contains(ce.Reason, tc.reason) {
				t.Errorf("error names field %q, reason %q; want %q, %q", ce.Field, ce.Reason, tc.field, tc.reason)
			}
			if msg := err.Error(); strings.Contains(msg, canary) || len(msg) > 1024 {
				t.Errorf("error quotes the value (%d bytes): %.200s", len(msg), msg)
			}
		})
	}
	// At the limits, values are kept as given.
	atLimit := strings.Repeat("é", config.MaxStringLen/2)
	cfg, err := testSchema().Normalize(map[string]any{"host": atLimit, "key": "k"})
	if err != nil || cfg.String("host") != atLimit {
		t.Errorf("a %d-byte UTF-8 host: %v", len(atLimit), err)
	}
}
