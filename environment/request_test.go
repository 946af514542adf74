package environment_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/google/go-cmp/cmp"
)

// TestDecodeCreateRequest (CFG-5): payloads are decoded strictly; every
// error wraps errcode.ErrInvalid and names the field; none quotes a value.
func TestDecodeCreateRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string
		want    []string // parts of the error text; nil = must decode
	}{
		{"valid", `{"name":"a","driver":"remote","config":{"host":"h","port":2222,"apiKey":"` + canary + `"},"env":{"A":"1"},"metadata":{"team":"x"}}`, nil},
		{"malformed", `{"name":"a",`, []string{"malformed JSON"}},
		{"not JSON", `name=a`, []string{"malformed JSON"}},
		{"empty", ``, []string{"empty payload"}},
		{"null", `null`, []string{"want an object"}},
		{"array", `[1]`, []string{"want an object"}},
		{"two values", `{"name":"a"} {"name":"b"}`, []string{"after the JSON object"}},
		{"trailing garbage", `{"name":"a"}x`, []string{"after the JSON object"}},
		{"unknown field", `{"name":"a","driver":"remote","colour":"red"}`, []string{`field "colour"`, "unknown field"}},
		{"case mismatch is unknown", `{"NAME":"a","driver":"remote"}`, []string{`field "NAME"`, "unknown field"}},
		{"wrong type name", `{"name":7,"driver":"remote"}`, []string{`field "name"`, "want string, got number"}},
		{"wrong type config", `{"name":"a","config":"` + canary + `"}`, []string{`field "config"`, "want object, got string"}},
		{"wrong type env value", `{"name":"a","env":{"A":12345}}`, []string{`field "env"`, "want string, got number"}},
		{"reserved id", `{"id":"env_x","name":"a"}`, []string{`field "id"`, "reserved"}},
		{"invalid UTF-8 is refused, not replaced", `{"name":"a","driver":"remote","metadata":{"team":"in` + "\xff" + `fra"}}`, []string{`field "metadata"`, "not valid UTF-8"}},
		{"reserved revision", `{"name":"a","revision":4}`, []string{`field "revision"`, "reserved"}},
		{"reserved createdAt", `{"name":"a","createdAt":"2020-01-01T00:00:00Z"}`, []string{`field "createdAt"`, "reserved"}},
		{"reserved status", `{"name":"a","status":"active"}`, []string{`field "status"`, "reserved"}},
		{"reserved qualification", `{"name":"a","qualification":{"ok":true}}`, []string{`field "qualification"`, "reserved"}},
		{"reserved platform", `{"name":"a","platform":{"os":"linux"}}`, []string{`field "platform"`, "reserved"}},
		{"reserved platformQualification any case", `{"name":"a","PlatformQualification":{}}`, []string{`field "PlatformQualification"`, "reserved"}},
		{"reserved metadata prefix", `{"name":"a","metadata":{"berth.qualifiedAt":"now"}}`, []string{`field "metadata.berth.qualifiedAt"`, "reserved"}},
		{"reserved metadata key", `{"name":"a","metadata":{"platformQualification":"{}"}}`, []string{`field "metadata.platformQualification"`, "reserved"}},
		// Issue 56: the declared level is the driver's, the measured one a probe's.
		{"reserved isolation", `{"name":"a","isolation":"gvisor"}`, []string{`field "isolation"`, "reserved"}},
		{"reserved measuredIsolation", `{"name":"a","measuredIsolation":"gvisor"}`, []string{`field "measuredIsolation"`, "reserved"}},
		{"reserved isolation metadata", `{"name":"a","metadata":{"measured_isolation":"gvisor"}}`, []string{`field "metadata.measured_isolation"`, "reserved"}},
		{"requireIsolation not a level", `{"name":"a","requireIsolation":"vm"}`, []string{`isolation level "vm"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := environment.DecodeCreateRequest([]byte(tc.payload))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				want := environment.CreateRequest{Name: "a", Driver: "remote",
					Config: map[string]any{"host": "h", "port": jsonNumber("2222"), "apiKey": canary},
					Env:    map[string]string{"A": "1"}, Metadata: map[string]string{"team": "x"}}
				if diff := cmp.Diff(want, req); diff != "" {
					t.Errorf("decoded (-want +got):\n%s", diff)
				}
				return
			}
			wantErr(t, err, errcode.ErrInvalid)
			wantText(t, err, tc.want...)
			if strings.Contains(err.Error(), canary) || strings.Contains(err.Error(), "12345") {
				t.Errorf("error quotes a value: %q", err)
			}
		})
	}
}

// TestDecodeUpdateRequest (CFG-5, CFG-6): the same strictness, plus a
// required base revision and no driver change.
func TestDecodeUpdateRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string
		want    []string
	}{
		{"valid", `{"baseRevision":3,"name":"b","config":{"apiKey":{"$secret":"sec_1","version":2}},"env":{}}`, nil},
		{"missing base revision", `{"name":"b"}`, []string{`field "baseRevision"`, "required"}},
		{"fractional base revision", `{"baseRevision":1.5}`, []string{`field "baseRevision"`, "want integer"}},
		{"revision is reserved", `{"baseRevision":1,"revision":2}`, []string{`field "revision"`, "reserved"}},
		{"driver is immutable", `{"baseRevision":1,"driver":"local"}`, []string{`field "driver"`, "cannot be changed"}},
		{"updatedBy is reserved", `{"baseRevision":1,"updatedBy":"root"}`, []string{`field "updatedBy"`, "reserved"}},
		{"unknown", `{"baseRevision":1,"nmae":"typo"}`, []string{`field "nmae"`, "unknown"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := environment.DecodeUpdateRequest([]byte(tc.payload))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				name := "b"
				want := environment.UpdateRequest{BaseRevision: 3, Name: &name,
					Config: map[string]any{"apiKey": map[string]any{"$secret": "sec_1", "version": jsonNumber("2")}},
					Env:    map[string]string{}}
				if diff := cmp.Diff(want, req); diff != "" {
					t.Errorf("decoded (-want +got):\n%s", diff)
				}
				return
			}
			wantErr(t, err, errcode.ErrInvalid)
			wantText(t, err, tc.want...)
		})
	}
}

// TestBadInputSavesNothing (CFG-5, CFG-8): every rejected create names the
// environment and the field, wraps errcode.ErrInvalid (and config.ErrInvalid for
// config errors), and leaves neither a record nor a secret behind.
func TestBadInputSavesNothing(t *testing.T) {
	t.Parallel()
	base := func(mod func(*environment.CreateRequest)) environment.CreateRequest {
		r := remoteRequest("bad-one")
		mod(&r)
		return r
	}
	tests := []struct {
		name    string
		req     environment.CreateRequest
		targets []error
		want    []string
	}{
		{"missing required field", base(func(r *environment.CreateRequest) { delete(r.Config, "host") }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`environment "bad-one"`, `field "host"`, "required"}},
		{"missing required secret", base(func(r *environment.CreateRequest) { delete(r.Config, "apiKey") }),
			[]error{errcode.ErrInvalid, config.ErrInvalid, config.ErrCredentialsMissing}, []string{`field "apiKey"`, "required"}},
		{"wrong type", base(func(r *environment.CreateRequest) { r.Config["port"] = "twenty-two" }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`environment "bad-one"`, `field "port"`, "want integer"}},
		{"secret of the wrong type", base(func(r *environment.CreateRequest) { r.Config["token"] = 42 }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`field "token"`}},
		{"unknown config field", base(func(r *environment.CreateRequest) { r.Config["hostname"] = "x" }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`environment "bad-one"`, `field "hostname"`, "unknown field"}},
		{"two bad fields both named", base(func(r *environment.CreateRequest) { delete(r.Config, "host"); r.Config["mode"] = "turbo" }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`field "host"`, `field "mode"`}},
		{"secret reference on create", base(func(r *environment.CreateRequest) {
			r.Config["token"] = map[string]any{"$secret": "sec_other", "version": 1}
		}), []error{errcode.ErrInvalid}, []string{`environment "bad-one"`, `field "config.token"`, "paste the secret value"}},
		{"unregistered driver", base(func(r *environment.CreateRequest) { r.Driver = "daytona" }),
			[]error{errcode.ErrInvalid, drivers.ErrUnavailable}, []string{`environment "bad-one"`, `field "driver"`, "not registered"}},
		{"no driver", base(func(r *environment.CreateRequest) { r.Driver = "" }),
			[]error{errcode.ErrInvalid}, []string{`field "driver"`, "required"}},
		{"no name", base(func(r *environment.CreateRequest) { r.Name = "" }),
			[]error{errcode.ErrInvalid}, []string{`field "name"`, "required"}},
		{"name with spaces around", base(func(r *environment.CreateRequest) { r.Name = " x " }),
			[]error{errcode.ErrInvalid}, []string{`field "name"`}},
		{"reserved metadata", base(func(r *environment.CreateRequest) { r.Metadata["berth.qualification"] = "yes" }),
			[]error{errcode.ErrInvalid}, []string{`environment "bad-one"`, `field "metadata.berth.qualification"`, "reserved"}},
		// CFG-5: server-owned fields inside config are refused as reserved,
		// not as unknown fields, and the field is named.
		{"reserved field in config", base(func(r *environment.CreateRequest) { r.Config["qualification"] = map[string]any{"ok": true} }),
			[]error{errcode.ErrInvalid}, []string{`environment "bad-one"`, `field "config.qualification"`, "reserved"}},
		{"reserved platform in config any case", base(func(r *environment.CreateRequest) { r.Config["Platform"] = "linux/amd64" }),
			[]error{errcode.ErrInvalid}, []string{`field "config.Platform"`, "reserved"}},
		{"qualification imitation in config", base(func(r *environment.CreateRequest) { r.Config["platformQualificationRecorded"] = true }),
			[]error{errcode.ErrInvalid}, []string{`field "config.platformQualificationRecorded"`, "reserved"}},
		// Metadata keys that imitate server-owned qualification state, in any case.
		{"metadata imitates qualified", base(func(r *environment.CreateRequest) { r.Metadata["QUALIFIED"] = "true" }),
			[]error{errcode.ErrInvalid}, []string{`field "metadata.QUALIFIED"`, "reserved"}},
		{"metadata imitates recorded flag", base(func(r *environment.CreateRequest) { r.Metadata["platform_qualification_recorded"] = "true" }),
			[]error{errcode.ErrInvalid}, []string{`field "metadata.platform_qualification_recorded"`, "reserved"}},
		{"metadata imitates image identity", base(func(r *environment.CreateRequest) { r.Metadata["Image-Identity"] = "sha256:x" }),
			[]error{errcode.ErrInvalid}, []string{`field "metadata.Image-Identity"`, "reserved"}},
		{"bad env name", base(func(r *environment.CreateRequest) { r.Env["1BAD"] = "x" }),
			[]error{errcode.ErrInvalid}, []string{`field "env.1BAD"`}},
		{"credential in env var", base(func(r *environment.CreateRequest) { r.Env["GITHUB_TOKEN"] = canary }),
			[]error{errcode.ErrInvalid}, []string{`environment "bad-one"`, `field "env.GITHUB_TOKEN"`, "credential"}},
		// Issue 11 item 5: limits, empty keys, NUL bytes and invalid UTF-8.
		{"empty metadata key", base(func(r *environment.CreateRequest) { r.Metadata[""] = "x" }),
			[]error{errcode.ErrInvalid}, []string{`environment "bad-one"`, `field "metadata"`, "empty key"}},
		{"NUL in a metadata value", base(func(r *environment.CreateRequest) { r.Metadata["team"] = "in\x00fra" }),
			[]error{errcode.ErrInvalid}, []string{`field "metadata.team"`, "value contains a NUL byte"}},
		{"NUL in a metadata key", base(func(r *environment.CreateRequest) { r.Metadata["te\x00am"] = "x" }),
			[]error{errcode.ErrInvalid}, []string{`field "metadata.te\x00am"`, "key contains a NUL byte"}},
		{"invalid UTF-8 metadata value", base(func(r *environment.CreateRequest) { r.Metadata["team"] = "in\xfffra" }),
			[]error{errcode.ErrInvalid}, []string{`field "metadata.team"`, "value not valid UTF-8"}},
		{"metadata key too long", base(func(r *environment.CreateRequest) {
			r.Metadata[strings.Repeat("k", 128+1)] = "x"
		}), []error{errcode.ErrInvalid}, []string{`field "metadata.kkkk`, "key longer than 128 bytes"}},
		{"metadata value too long", base(func(r *environment.CreateRequest) {
			r.Metadata["team"] = strings.Repeat("v", 4096+1)
		}), []error{errcode.ErrInvalid}, []string{`field "metadata.team"`, "value longer than 4096 bytes"}},
		{"too many metadata entries", base(func(r *environment.CreateRequest) {
			for i := range 64 + 1 {
				r.Metadata[fmt.Sprintf("k%d", i)] = "v"
			}
		}), []error{errcode.ErrInvalid}, []string{`field "metadata"`, "more than 64 entries"}},
		{"10 MiB env value", base(func(r *environment.CreateRequest) { r.Env["GREETING"] = canary + strings.Repeat("x", 10<<20) }),
			[]error{errcode.ErrInvalid}, []string{`field "env.GREETING"`, "value longer than 32768 bytes"}},
		{"invalid UTF-8 env value", base(func(r *environment.CreateRequest) { r.Env["GREETING"] = canary + "\xff" }),
			[]error{errcode.ErrInvalid}, []string{`field "env.GREETING"`, "value not valid UTF-8"}},
		{"NUL in the description", base(func(r *environment.CreateRequest) { r.Description = "a\x00b" }),
			[]error{errcode.ErrInvalid}, []string{`field "description"`, "NUL"}},
		{"10 MiB config string", base(func(r *environment.CreateRequest) { r.Config["host"] = strings.Repeat("h", 10<<20) }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`field "host"`, "longer than 65536 bytes"}},
		{"NUL in a secret", base(func(r *environment.CreateRequest) { r.Config["apiKey"] = canary + "\x00" }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`field "apiKey"`, "NUL"}},
		{"invalid UTF-8 in a secret", base(func(r *environment.CreateRequest) { r.Config["apiKey"] = canary + "\xc3" }),
			[]error{errcode.ErrInvalid, config.ErrInvalid}, []string{`field "apiKey"`, "not valid UTF-8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, nil)
			_, err := f.cat.Create(context.Background(), admin, tc.req)
			wantErr(t, err, tc.targets...)
			wantText(t, err, tc.want...)
			if strings.Contains(err.Error(), canary) {
				t.Errorf("error holds the secret: %q", err)
			}
			if n := f.count(t); n != 0 {
				t.Errorf("store holds %d environments, want 0", n)
			}
			if s := environment.ListSecrets(f.secrets); len(s) != 0 {
				t.Errorf("secret store holds %+v, want nothing", s)
			}
		})
	}
}

// TestConfigErrorNamesSavedEnvironment (CFG-8): once saved, config errors
// name the environment by name and id, and each field; ConfigError exposes
// the fields and the driver's *config.Error.
func TestConfigErrorNamesSavedEnvironment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	v := f.mustCreate(t, remoteRequest("build"))
	_, err := f.cat.Update(ctx, operator, v.ID, environment.UpdateRequest{BaseRevision: 1,
		Config: map[string]any{"host": "h", "apiKey": "x", "timeout": "soon", "mode": "turbo"}})
	wantErr(t, err, errcode.ErrInvalid, config.ErrInvalid)
	wantText(t, err, `environment "build" (env_001): remote config: field "timeout"`, `environment "build" (env_001): remote config: field "mode"`)
	var ce *environment.ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("error %T is not a *ConfigError", err)
	}
	if diff := cmp.Diff([]string{"timeout", "mode"}, ce.Fields()); diff != "" {
		t.Errorf("Fields (-want +got):\n%s", diff)
	}
	var dce *config.Error
	if !errors.As(err, &dce) || dce.Driver != "remote" {
		t.Errorf("errors.As(*config.Error) = %v", dce)
	}

	// A stored config that no longer validates is named when resolved.
	raw, _ := f.store.GetEnvironment(ctx, v.ID)
	raw.Config["port"] = "not a port"
	base := raw.Revision
	raw.Revision++
	if err := f.store.UpdateEnvironment(ctx, raw, base); err != nil {
		t.Fatal(err)
	}
	_, _, err = resolvedConfig(f.cat, ctx, v.ID)
	wantErr(t, err, errcode.ErrInvalid, config.ErrInvalid)
	wantText(t, err, `environment "build" (env_001)`, `field "port"`)
}

// TestReservedConfigOnUpdateAndDraft (CFG-5): the reserved-field rule for
// config members holds for updates and drafts too, and the stored record is
// unchanged after a refused update.
func TestReservedConfigOnUpdateAndDraft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	v := f.mustCreate(t, remoteRequest("build"))
	_, err := f.cat.Update(ctx, operator, v.ID, environment.UpdateRequest{BaseRevision: v.Revision,
		Config: map[string]any{"host": "h", "apiKey": "x", "configFingerprint": "abc"}})
	wantErr(t, err, errcode.ErrInvalid)
	wantText(t, err, `environment "build"`, `field "config.configFingerprint"`, "reserved")
	after, err := f.cat.Get(ctx, operator, v.ID)
	if err != nil || after.Revision != v.Revision {
		t.Fatalf("after a refused update: revision %d, err %v; want %d", after.Revision, err, v.Revision)
	}
	req := remoteRequest("draft")
	req.Config["is_qualified"] = true
	_, _, err = f.cat.Draft(ctx, operator, req)
	wantErr(t, err, errcode.ErrInvalid)
	wantText(t, err, `field "config.is_qualified"`, "reserved")
}

func TestIsReservedMetadataKey(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"berth.anything": true, "BERTH.x": true, "qualified": true, "Qualification": true,
		"platformQualificationRecorded": true, "qualification-status": true, "platform": true,
		"config_fingerprint": true, "imageIdentity": true,
		"team": false, "owner": false, "platform-team": false, "berthing": false, "cost-center": false,
	} {
		if got := environment.IsReservedMetadataKey(key); got != want {
			t.Errorf("IsReservedMetadataKey(%q) = %v, want %v", key, got, want)
		}
	}
	if got := environment.ReservedFields(); !slices.Contains(got, "qualification") {
		t.Errorf("ReservedFields() = %v, lacks qualification", got)
	} else {
		got[0] = "mutated"
		if environment.ReservedFields()[0] == "mutated" {
			t.Error("ReservedFields returns the package's own slice")
		}
	}
}
