package environment_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berthdev/berth/environment"
)

// A View and an Environment share their record fields (View embeds
// Environment), and the JSON of both keeps its shape: the record's fields
// at the top level, in this order, beside the view's own.
func TestViewAndEnvironmentJSONShapes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	created := f.mustCreate(t, remoteRequest("build"))
	secret := environment.ListSecrets(f.secrets)[0].ID
	env, err := f.store.GetEnvironment(ctx, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	full, err := f.cat.Get(ctx, admin, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	redacted, err := f.cat.Get(ctx, board, created.ID)
	if err != nil {
		t.Fatal(err)
	}
	const record = `"id":"env_001","name":"build","description":"a remote target","driver":"remote","status":"active",` +
		`"config":{"apiKey":{"$secret":"SECRET","version":1},"host":"build-1.example","mode":"slow","port":22,"timeout":"30s"},` +
		`"env":{"GOFLAGS":"-mod=mod"},"metadata":{"team":"infra"},"revision":1,` +
		`"createdAt":"2026-11-29T10:00:00Z","updatedAt":"2026-11-29T10:00:00Z","createdBy":"u_admin","updatedBy":"u_admin"`
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"environment", env, `{` + record + `}`},
		{"full view", full, `{` + record + `,"isolation":"none"}`},
		{"redacted view", redacted, `{"id":"env_001","name":"build","description":"a remote target","driver":"remote","status":"active",` +
			`"revision":1,"createdAt":"2026-11-29T10:00:00Z","updatedAt":"2026-11-29T10:00:00Z","createdBy":"u_admin","updatedBy":"u_admin",` +
			`"redacted":true,"isolation":"none"}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := strings.ReplaceAll(string(b), secret, "SECRET"); got != tc.want {
			t.Errorf("%s JSON:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	var back environment.View
	if err := json.Unmarshal([]byte(strings.ReplaceAll(`{`+record+`,"redacted":true,"unavailable":"x"}`, "SECRET", secret)), &back); err != nil {
		t.Fatal(err)
	}
	if back.ID != "env_001" || back.Revision != 1 || back.Config.String("host") != "build-1.example" || !back.Redacted || back.Unavailable != "x" {
		t.Errorf("View decoded from its JSON: %+v", back)
	}
}
