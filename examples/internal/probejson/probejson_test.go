package probejson

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/qualification"
)

// jsonNames returns the JSON names of t's fields, in order.
func jsonNames(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// Every field of probe.Result and probe.Stage is here with its JSON name
// and options, in the library's order, and the host's own fields are the
// ones envctl and the server have always printed.
func TestFieldsFollowTheLibrary(t *testing.T) {
	for _, tc := range []struct {
		lib, view reflect.Type
		extra     []string
	}{
		{reflect.TypeFor[probe.Result](), reflect.TypeFor[Result](), []string{"draft"}},
		{reflect.TypeFor[probe.Stage](), reflect.TypeFor[Stage](), []string{"skipped", "running"}},
	} {
		tags := map[string]string{}
		for f := range tc.view.Fields() {
			tags[f.Name] = f.Tag.Get("json")
		}
		for f := range tc.lib.Fields() {
			if got, want := tags[f.Name], f.Tag.Get("json"); got != want {
				t.Errorf("%s.%s: json tag %q, the library's is %q", tc.view, f.Name, got, want)
			}
		}
		lib := jsonNames(tc.lib)
		view := slices.DeleteFunc(jsonNames(tc.view), func(n string) bool { return slices.Contains(tc.extra, n) })
		if !slices.Equal(lib, view) {
			t.Errorf("%s fields %q, the library's %q", tc.view, view, lib)
		}
	}
}

func TestOf(t *testing.T) {
	img := images.MustParseIdentity("registry.example/app@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	res := &probe.Result{OK: false, Driver: "fake", Target: "provider fake", Code: "timeout",
		Stages: []probe.Stage{{Name: "resolve", OK: true, Duration: time.Second}, {Name: "acquire", Code: "timeout", Error: "slow"},
			{Name: "detect", Note: "skipped: stage acquire failed (timeout)"}},
		ImageIdentity: img, Platform: qualification.Platform{OS: "linux", Arch: "amd64", Libc: qualification.LibcUnknown},
		Cleanup: &probe.Cleanup{LeaseStatus: lease.StatusReleased, Confirmed: true}, QualificationDiagnostic: &qualification.Diagnostic{Code: "not_saved"}}
	b, err := json.Marshal(Of(res))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["draft"] != true || got["platformQualificationRecorded"] != false || got["code"] != "timeout" {
		t.Errorf("result %s", b)
	}
	stages := got["stages"].([]any)
	if s := stages[2].(map[string]any); s["skipped"] != true || s["ok"] != false {
		t.Errorf("skipped stage %v", s)
	}
	if s := stages[1].(map[string]any); s["skipped"] != nil || s["code"] != "timeout" {
		t.Errorf("failed stage %v", s)
	}
	if b, _ := json.Marshal(StageOf(probe.Stage{Name: "acquire"}, true)); string(b) != `{"name":"acquire","duration":0,"ok":false,"running":true}` {
		t.Errorf("a starting stage: %s", b)
	}
	res.Environment = "env_1"
	if Of(res).Draft {
		t.Error("a saved environment's probe is a draft")
	}
}
