package environment_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/berthdev/berth/environment"
)

// TestCanaryNeverLeaks (CFG-3): a secret pasted in a create and in an update
// never appears in any read, JSON rendering of a view, error string, String
// of a request, or log line; env var values never appear in a log line. The
// canary does reach the secret store (ResolvedConfig returns it), so the
// checks are not vacuous.
func TestCanaryNeverLeaks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const envValue = "ENV-VALUE-91c2"
	rotated := canary + "-rotated"
	f := newFixture(t, nil)
	var seen []string // everything readable the test collected
	collect := func(what string, v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen = append(seen, what+" json: "+string(b), fmt.Sprintf("%s: %v %+v", what, v, v))
	}
	collectErr := func(what string, err error) {
		if err == nil {
			t.Fatalf("%s: want an error", what)
		}
		seen = append(seen, what+": "+err.Error(), fmt.Sprintf("%+v", err))
	}

	payload := `{"name":"build","driver":"remote","config":{"host":"h","apiKey":"` + canary + `","token":"` + canary + `"},"env":{"MODE":"` + envValue + `"}}`
	req, err := environment.DecodeCreateRequest([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, req.String(), fmt.Sprint(req))
	f.logger.Info("request received", "req", req) // a host logging the request
	v, err := f.cat.Create(ctx, admin, req)
	if err != nil {
		t.Fatal(err)
	}
	collect("create view", v)

	upd, err := environment.DecodeUpdateRequest([]byte(`{"baseRevision":1,"config":{"host":"h","apiKey":"` + rotated + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	seen = append(seen, upd.String(), fmt.Sprint(upd))
	f.logger.Info("update received", "req", upd)
	v, err = f.cat.Update(ctx, operator, v.ID, upd)
	if err != nil {
		t.Fatal(err)
	}
	collect("update view", v)
	if _, cfg, err := resolvedConfig(f.cat, ctx, v.ID); err != nil || cfg.String("apiKey") != rotated {
		t.Fatalf("the rotated canary did not reach the secret store: %v", err)
	}

	for _, pr := range principals {
		got, err := f.cat.Get(ctx, pr.p, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		collect("get as "+pr.name, got)
		list, err := f.cat.List(ctx, pr.p, environment.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		collect("list as "+pr.name, list)
		// Denied and refused mutations that carry the canary.
		_, err = f.cat.Update(ctx, pr.p, v.ID, environment.UpdateRequest{BaseRevision: 1, Config: map[string]any{"host": "h", "apiKey": canary}})
		collectErr("stale update as "+pr.name, err)
		_, err = f.cat.Create(ctx, pr.p, environment.CreateRequest{Name: "x", Driver: "remote", Config: map[string]any{"apiKey": canary}})
		collectErr("create without host as "+pr.name, err)
	}
	br, err := f.cat.BlastRadius(ctx, admin, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	collect("blast radius", br)

	bad := []struct {
		name string
		req  environment.CreateRequest
	}{
		{"secret in a misspelled field", environment.CreateRequest{Name: "y", Driver: "remote", Config: map[string]any{"host": "h", "apiKey": "k", "apikey": canary}}},
		{"secret inside an object", environment.CreateRequest{Name: "y", Driver: "remote", Config: map[string]any{"host": "h", "apiKey": map[string]any{"value": canary}}}},
		{"secret in an env var", environment.CreateRequest{Name: "y", Driver: "remote", Config: map[string]any{"host": "h", "apiKey": "k"}, Env: map[string]string{"API_TOKEN": canary}}},
		{"unregistered driver", environment.CreateRequest{Name: "y", Driver: "nope", Config: map[string]any{"apiKey": canary}}},
	}
	for _, b := range bad {
		_, err := f.cat.Create(ctx, admin, b.req)
		collectErr(b.name, err)
	}
	for _, p := range []string{
		`{"name":"z","config":{"apiKey":"` + canary + `"}, oops}`,
		`{"name":"z","config":{"apiKey":"` + canary + `"},"qualification":{}}`,
		`{"name":"z","config":{"apiKey":"` + canary + `"},"env":{"A":["` + canary + `"]}}`,
		`{"name":"z","config":{"apiKey":"` + canary + `"}}{"again":1}`,
	} {
		_, err := environment.DecodeCreateRequest([]byte(p))
		collectErr("decode", err)
	}
	if _, err := f.cat.Delete(ctx, admin, v.ID, 1); err != nil {
		collectErr("stale delete", err)
	}

	logs := f.logs.String()
	for _, msg := range []string{"environment created", "environment updated", "environment action denied"} {
		if len(f.logs.lines(msg)) == 0 {
			t.Errorf("no %q log line; the log check would be vacuous:\n%s", msg, logs)
		}
	}
	seen = append(seen, logs)
	for _, s := range seen {
		if strings.Contains(s, canary) {
			t.Errorf("the canary secret leaked into: %s", s)
		}
	}
	if strings.Contains(logs, envValue) {
		t.Errorf("an env var value leaked into the log:\n%s", logs)
	}
	if !strings.Contains(logs, `"configFields":["apiKey","host","token"]`) {
		t.Errorf("LogValue of the request is not in use:\n%s", logs)
	}
}
