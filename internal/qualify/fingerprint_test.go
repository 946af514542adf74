package qualify

import (
	"reflect"
	"regexp"
	"testing"
	"time"
)

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
const digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func baseInput() FingerprintInput {
	return FingerprintInput{
		Driver:   "ssh",
		Target:   map[string]any{"host": "10.0.0.7", "port": 22, "user": "runner", "tags": []any{"a", "b"}, "opts": map[string]any{"z": 1, "a": true}},
		Secrets:  map[string]SecretRef{"privateKey": {ID: "sec-1", Version: 3}},
		Image:    "index.docker.io/library/alpine@" + digestA,
		Template: "snapshot:fake/tpl-1",
	}
}

// QUAL-3: the fingerprint covers target, account (secret ref + version),
// image and template; equal inputs give equal fingerprints.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := Fingerprint(baseInput())
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(base) {
		t.Fatalf("Fingerprint = %q, want sha256:<64 hex>", base)
	}
	tests := []struct {
		name    string
		mutate  func(in *FingerprintInput)
		changes bool
	}{
		{"same input gives the same fingerprint", func(*FingerprintInput) {}, false},
		{"map order does not matter", func(in *FingerprintInput) {
			in.Target = map[string]any{"opts": map[string]any{"a": true, "z": 1}, "user": "runner", "tags": []any{"a", "b"}, "port": 22, "host": "10.0.0.7"}
		}, false},
		{"a number read back from JSON as float64 is the same number", func(in *FingerprintInput) { in.Target["port"] = float64(22) }, false},
		{"an unnormalized spelling of the same image is the same image", func(in *FingerprintInput) { in.Image = "docker.io/alpine@" + digestA }, false},
		{"changing the target host makes it stale", func(in *FingerprintInput) { in.Target["host"] = "10.0.0.8" }, true},
		{"changing the port makes it stale", func(in *FingerprintInput) { in.Target["port"] = 2222 }, true},
		{"port as string differs from port as number", func(in *FingerprintInput) { in.Target["port"] = "22" }, true},
		{"list order counts", func(in *FingerprintInput) { in.Target["tags"] = []any{"b", "a"} }, true},
		{"a new secret version (account change) makes it stale", func(in *FingerprintInput) {
			in.Secrets = map[string]SecretRef{"privateKey": {ID: "sec-1", Version: 4}}
		}, true},
		{"another secret makes it stale", func(in *FingerprintInput) {
			in.Secrets = map[string]SecretRef{"privateKey": {ID: "sec-2", Version: 3}}
		}, true},
		{"another image digest makes it stale", func(in *FingerprintInput) { in.Image = "alpine@" + digestB }, true},
		{"another active template makes it stale", func(in *FingerprintInput) { in.Template = "snapshot:fake/tpl-2" }, true},
		{"no template differs from a template", func(in *FingerprintInput) { in.Template = "" }, true},
		{"another driver makes it stale", func(in *FingerprintInput) { in.Driver = "docker" }, true},
		{"a field moved between target and image is not the same config", func(in *FingerprintInput) {
			in.Target["image"] = in.Image
			in.Image = ""
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := baseInput()
			tt.mutate(&in)
			got := Fingerprint(in)
			if (got != base) != tt.changes {
				t.Errorf("fingerprint changed = %v, want %v", got != base, tt.changes)
			}
		})
	}
}

type textish struct{ s string }

func (t textish) MarshalText() ([]byte, error) { return []byte(t.s), nil }

// Unusual values never make Fingerprint fail or vary between calls.
func TestFingerprintOddValues(t *testing.T) {
	t.Parallel()
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	in := FingerprintInput{Driver: "x", Target: map[string]any{
		"nil": nil, "dur": 5 * time.Second, "text": textish{"v"}, "fn": func() {}, "cyc": cyclic,
		"struct": struct{ A int }{1}, "ptr": new(int), "strmap": map[string]string{"k": "v"},
	}}
	a, b := Fingerprint(in), Fingerprint(in)
	if a != b {
		t.Errorf("fingerprint of the same odd input differs: %s vs %s", a, b)
	}
	in.Target["text"] = textish{"w"}
	if Fingerprint(in) == a {
		t.Error("a text marshaler's value does not count")
	}
}

// QUAL-3: knobs and metadata are not inputs: there is no field for them, so
// a caller that classified the config correctly cannot let them in. This
// test pins that FingerprintInput has exactly the documented fields.
func TestFingerprintInputHasNoKnobsOrMetadata(t *testing.T) {
	t.Parallel()
	var in FingerprintInput
	got := fieldNames(in)
	want := []string{"Driver", "Target", "Secrets", "Image", "Template"}
	if len(got) != len(want) {
		t.Fatalf("FingerprintInput fields = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("FingerprintInput fields = %v, want %v", got, want)
		}
	}
}

func fieldNames(v any) []string {
	t := reflect.TypeOf(v)
	var out []string
	for i := range t.NumField() {
		out = append(out, t.Field(i).Name)
	}
	return out
}

// IMG-6: the source fingerprint is the fingerprint without its template
// part: a template change keeps it, an image, target or account change
// changes it, and it differs from the full fingerprint of a templated
// input.
func TestSourceFingerprint(t *testing.T) {
	t.Parallel()
	base := SourceFingerprint(baseInput())
	tests := []struct {
		name    string
		mutate  func(in *FingerprintInput)
		changes bool
	}{
		{"another template keeps it", func(in *FingerprintInput) { in.Template = "snapshot:fake/tpl-2" }, false},
		{"no template keeps it", func(in *FingerprintInput) { in.Template = "" }, false},
		{"another image changes it", func(in *FingerprintInput) { in.Image = "alpine@" + digestB }, true},
		{"another host changes it", func(in *FingerprintInput) { in.Target["host"] = "10.0.0.8" }, true},
		{"a new account secret version changes it", func(in *FingerprintInput) {
			in.Secrets["privateKey"] = SecretRef{ID: "sec-1", Version: 4}
		}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := baseInput()
			tc.mutate(&in)
			if got := SourceFingerprint(in); (got != base) != tc.changes {
				t.Errorf("SourceFingerprint changed = %v, want %v", got != base, tc.changes)
			}
		})
	}
	in := baseInput()
	if Fingerprint(in) == base {
		t.Error("the full fingerprint of a templated input equals its source fingerprint")
	}
	in.Template = ""
	if Fingerprint(in) != base {
		t.Error("without a template, the source fingerprint differs from the full one")
	}
}
