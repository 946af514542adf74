package environment_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// TestSecretMapLifecycle (issue 11 item 2, CFG-3): each value of a
// SecretMap config field (a driver's secret env vars) is moved into the
// secret store as a secret of its own, named after field and key; views,
// stored configs and errors hold references only; ResolvedConfig gives the
// values; an update that sends a reference back keeps it, a pasted value
// becomes that key's next version, a removed key loses its secret, a
// foreign reference is refused; Delete removes them all.
func TestSecretMapLifecycle(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			testSecretMapLifecycle(t, newFixtureOn(t, st.new(), nil))
		})
	}
}

func testSecretMapLifecycle(t *testing.T, f *fixture) {
	ctx := context.Background()
	const other = "OTHER-ENV-VALUE-19c2"
	req := remoteRequest("a")
	req.Config["env"] = map[string]any{"GITHUB_TOKEN": canary, "MODE": "plain-but-secret"}
	a := f.mustCreate(t, req)
	b := f.mustCreate(t, func() environment.CreateRequest {
		r := remoteRequest("b")
		r.Config["env"] = map[string]any{"GITHUB_TOKEN": other}
		return r
	}())
	refs := config.Config(a.Config).SecretMapRefs("env")
	if len(refs) != 2 || refs["GITHUB_TOKEN"].Version != 1 || refs["MODE"].ID == refs["GITHUB_TOKEN"].ID {
		t.Fatalf("env references %v: want one secret per value at version 1", refs)
	}
	names := map[string]bool{}
	for _, info := range environment.ListSecrets(f.secrets) {
		if info.Owner == a.ID {
			names[info.Field] = true
		}
	}
	if diff := cmp.Diff(map[string]bool{"apiKey": true, "env.GITHUB_TOKEN": true, "env.MODE": true}, names); diff != "" {
		t.Errorf("secret names of %s (-want +got):\n%s", a.ID, diff)
	}
	noCanary := func(what string, v any) {
		t.Helper()
		b, _ := json.Marshal(v)
		if strings.Contains(string(b), canary) || strings.Contains(string(b), "plain-but-secret") {
			t.Errorf("%s holds a secret value: %s", what, b)
		}
	}
	noCanary("create view", a)
	stored, err := f.store.GetEnvironment(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	noCanary("stored environment", stored)
	got, err := f.cat.Get(ctx, admin, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	noCanary("full view", got)

	resolvedEnv := func() map[string]string {
		t.Helper()
		_, cfg, err := resolvedConfig(f.cat, ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.StringMap("env")
	}
	if diff := cmp.Diff(map[string]string{"GITHUB_TOKEN": canary, "MODE": "plain-but-secret"}, resolvedEnv()); diff != "" {
		t.Fatalf("ResolvedConfig env (-want +got):\n%s", diff)
	}

	update := func(base int64, env map[string]any) (*environment.View, error) {
		cfg := map[string]any(config.Config(a.Config).Clone())
		cfg["env"] = env
		return f.cat.Update(ctx, admin, a.ID, environment.UpdateRequest{BaseRevision: base, Config: cfg})
	}
	// Sending the references back keeps them.
	v, err := update(1, map[string]any{"GITHUB_TOKEN": refs["GITHUB_TOKEN"], "MODE": refs["MODE"]})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(refs, config.Config(v.Config).SecretMapRefs("env")); diff != "" {
		t.Errorf("kept references (-want +got):\n%s", diff)
	}
	// Another environment's reference, or a stale version of its own, is
	// refused, naming the key and no value.
	refB := config.Config(b.Config).SecretMapRefs("env")["GITHUB_TOKEN"]
	for name, ref := range map[string]config.SecretRef{"foreign": refB, "stale": {ID: refs["GITHUB_TOKEN"].ID, Version: 7}} {
		_, err := update(2, map[string]any{"GITHUB_TOKEN": ref, "MODE": refs["MODE"]})
		wantErr(t, err, errcode.ErrInvalid)
		wantText(t, err, "config.env.GITHUB_TOKEN", ref.String())
		if err != nil && (strings.Contains(err.Error(), canary) || strings.Contains(err.Error(), other)) {
			t.Errorf("%s reference: error holds a value: %v", name, err)
		}
	}
	// Rotating one value gives its next version and retires the old one;
	// removing a key removes its secret.
	v, err = update(2, map[string]any{"GITHUB_TOKEN": "rotated-value"})
	if err != nil {
		t.Fatal(err)
	}
	now := config.Config(v.Config).SecretMapRefs("env")
	if want := (config.SecretRef{ID: refs["GITHUB_TOKEN"].ID, Version: 2}); len(now) != 1 || now["GITHUB_TOKEN"] != want {
		t.Errorf("after rotation: %v, want only %v", now, want)
	}
	if _, err := f.secrets.Get(ctx, refs["GITHUB_TOKEN"]); err == nil {
		t.Errorf("superseded version %s still stored", refs["GITHUB_TOKEN"])
	}
	if _, err := f.secrets.Get(ctx, refs["MODE"]); err == nil {
		t.Errorf("secret of the removed key %s still stored", refs["MODE"])
	}
	if diff := cmp.Diff(map[string]string{"GITHUB_TOKEN": "rotated-value"}, resolvedEnv()); diff != "" {
		t.Errorf("ResolvedConfig env after rotation (-want +got):\n%s", diff)
	}
	// Delete removes every secret of the environment, env values included.
	if _, err := f.cat.Delete(ctx, admin, a.ID, 3); err != nil {
		t.Fatal(err)
	}
	for _, info := range environment.ListSecrets(f.secrets) {
		if info.Owner == a.ID {
			t.Errorf("secret %s (%s) of the deleted environment is left", info.ID, info.Field)
		}
	}
}

// A new environment or a draft cannot point at a stored secret through a
// secret map either (CFG-3).
func TestSecretMapReferenceRefusedOnCreate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	a := f.mustCreate(t, func() environment.CreateRequest {
		r := remoteRequest("a")
		r.Config["env"] = map[string]any{"TOKEN": canary}
		return r
	}())
	ref := config.Config(a.Config).SecretMapRefs("env")["TOKEN"]
	req := remoteRequest("thief")
	req.Config["env"] = map[string]any{"TOKEN": ref}
	_, err := f.cat.Create(context.Background(), admin, req)
	wantErr(t, err, errcode.ErrInvalid)
	wantText(t, err, "config.env.TOKEN", "stored secret")
	_, _, err = f.cat.Draft(context.Background(), admin, req)
	wantErr(t, err, errcode.ErrInvalid)
	wantText(t, err, "config.env.TOKEN")
}

// Scrubber redacts every secret value of an environment (secret fields and
// secret-map values) in a text without handing the values out, and only to
// principals who may probe (PRB-7, CFG-3).
func TestScrubber(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	v := f.mustCreate(t, remoteRequest("scrubbed"))
	sc, err := f.cat.Scrubber(ctx, operator, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := sc("provider said: bad key " + canary + "!"); strings.Contains(got, canary) || !strings.Contains(got, config.Redacted) {
		t.Errorf("scrubbed text %q", got)
	}
	if got := sc("nothing secret here"); got != "nothing secret here" {
		t.Errorf("a text without secrets changed: %q", got)
	}
	board := authz.Principal{ID: "b", Role: authz.RoleBoardMember}
	if _, err := f.cat.Scrubber(ctx, board, v.ID); !errors.Is(err, errcode.ErrDenied) {
		t.Errorf("board member Scrubber: %v, want ErrDenied", err)
	}
}
