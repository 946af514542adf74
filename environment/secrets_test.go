package environment_test

import (
	"context"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/google/go-cmp/cmp"
)

// TestSecretLifecycle (CFG-3): a pasted secret is moved into the secret
// store and the config keeps a reference; sending the reference back keeps
// it; a new pasted value becomes the next version (the old one is removed);
// a reference of another environment, or a stale version of its own, is
// refused; a removed secret field removes its secret; Delete removes them
// all.
func TestSecretLifecycle(t *testing.T) {
	t.Parallel()
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			testSecretLifecycle(t, newFixtureOn(t, st.new(), nil))
		})
	}
}

func testSecretLifecycle(t *testing.T, f *fixture) {
	ctx := context.Background()
	a := f.mustCreate(t, remoteRequest("a"))
	b := f.mustCreate(t, remoteRequest("b"))
	refA, _ := a.Config.SecretRef("apiKey")
	refB, _ := b.Config.SecretRef("apiKey")
	if refA.ID == "" || refA.ID == refB.ID || refA.Version != 1 {
		t.Fatalf("references %v and %v: want two distinct secrets at version 1", refA, refB)
	}
	stored, _ := f.store.GetEnvironment(ctx, a.ID)
	if got, ok := config.Config(stored.Config).SecretRef("apiKey"); !ok || got != refA {
		t.Fatalf("stored config holds %#v, want the reference %v", stored.Config["apiKey"], refA)
	}
	resolve := func(id, field string) string {
		t.Helper()
		_, cfg, err := resolvedConfig(f.cat, ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.String(field)
	}
	if got := resolve(a.ID, "apiKey"); got != canary {
		t.Fatalf("ResolvedConfig apiKey = %q, want the pasted value", got)
	}
	update := func(base int64, cfg map[string]any) (*environment.View, error) {
		return f.cat.Update(ctx, admin, a.ID, environment.UpdateRequest{BaseRevision: base, Config: cfg})
	}

	// The full view's config, sent back, keeps the reference and the secret.
	v, err := update(1, map[string]any(a.Config))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Config.SecretRef("apiKey"); got != refA {
		t.Errorf("after a round trip the reference is %v, want %v", got, refA)
	}

	// A new pasted value is the next version; the old version is gone.
	v, err = update(2, map[string]any{"host": "h", "apiKey": "rotated", "token": "tok-" + canary})
	if err != nil {
		t.Fatal(err)
	}
	ref2, _ := v.Config.SecretRef("apiKey")
	if ref2 != (config.SecretRef{ID: refA.ID, Version: 2}) {
		t.Errorf("after a new value the reference is %v, want %s@v2", ref2, refA.ID)
	}
	if _, err := f.secrets.Get(ctx, refA); err == nil {
		t.Errorf("the superseded version %v is still readable", refA)
	}
	if got := resolve(a.ID, "apiKey"); got != "rotated" {
		t.Errorf("ResolvedConfig apiKey = %q, want the new value", got)
	}
	tokRef, ok := v.Config.SecretRef("token")
	if !ok || resolve(a.ID, "token") != "tok-"+canary {
		t.Fatalf("the newly pasted optional secret was not moved: %v", v.Config["token"])
	}

	// Pointing at another environment's secret, or at an old version of
	// its own, is refused and changes nothing.
	for name, ref := range map[string]config.SecretRef{"foreign": refB, "stale version": refA} {
		before, _ := f.store.GetEnvironment(ctx, a.ID)
		secretsBefore := environment.ListSecrets(f.secrets)
		_, err := update(3, map[string]any{"host": "h", "apiKey": map[string]any{"$secret": ref.ID, "version": ref.Version}})
		wantErr(t, err, errcode.ErrInvalid)
		wantText(t, err, `environment "a" (env_001)`, `field "config.apiKey"`)
		after, _ := f.store.GetEnvironment(ctx, a.ID)
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("%s reference: record changed:\n%s", name, diff)
		}
		if diff := cmp.Diff(secretsBefore, environment.ListSecrets(f.secrets)); diff != "" {
			t.Errorf("%s reference: secrets changed:\n%s", name, diff)
		}
	}

	// Leaving the optional secret out removes it.
	v, err = update(3, map[string]any{"host": "h", "apiKey": ref2})
	if err != nil {
		t.Fatal(err)
	}
	if _, has := v.Config["token"]; has {
		t.Errorf("token still in config: %v", v.Config["token"])
	}
	if _, err := f.secrets.Get(ctx, tokRef); err == nil {
		t.Errorf("removed secret %v is still stored", tokRef)
	}

	// An update without Config keeps config and secrets.
	before := environment.ListSecrets(f.secrets)
	name := "a2"
	if v, err = f.cat.Update(ctx, admin, a.ID, environment.UpdateRequest{BaseRevision: 4, Name: &name}); err != nil {
		t.Fatal(err)
	}
	if got, _ := v.Config.SecretRef("apiKey"); got != ref2 || resolve(a.ID, "apiKey") != "rotated" {
		t.Errorf("a rename changed the secret: %v", got)
	}
	if diff := cmp.Diff(before, environment.ListSecrets(f.secrets)); diff != "" {
		t.Errorf("a rename changed the secret store:\n%s", diff)
	}

	// Delete removes every secret of the environment, and only its own.
	if _, err := f.cat.Delete(ctx, admin, a.ID, 5); err != nil {
		t.Fatal(err)
	}
	left := environment.ListSecrets(f.secrets)
	if len(left) != 1 || left[0].ID != refB.ID {
		t.Errorf("after deleting a, the secret store holds %+v, want only b's secret", left)
	}
}

// TestMemorySecretStore: versions are immutable, Replace adds one, Get reads
// exactly one, Delete removes one version or the whole secret; errors name
// references, never values.
func TestMemorySecretStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := environment.NewMemorySecretStore()
	r1, err := s.Put(ctx, "env_1", "apiKey", canary)
	if err != nil || r1.Version != 1 || !strings.HasPrefix(r1.ID, "sec_") {
		t.Fatalf("Put = %v, %v", r1, err)
	}
	r2, err := s.Replace(ctx, r1, "v2")
	if err != nil || r2 != (config.SecretRef{ID: r1.ID, Version: 2}) {
		t.Fatalf("Replace = %v, %v", r2, err)
	}
	for ref, want := range map[config.SecretRef]string{r1: canary, r2: "v2"} {
		if got, err := s.Get(ctx, ref); err != nil || got != want {
			t.Errorf("Get(%v) = %q, %v", ref, got, err)
		}
	}
	if err := s.Delete(ctx, r1); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, r1)
	wantErr(t, err, errcode.ErrNotFound)
	wantText(t, err, r1.String())
	if strings.Contains(err.Error(), canary) {
		t.Errorf("error holds the value: %q", err)
	}
	if diff := cmp.Diff([]environment.SecretInfo{{ID: r1.ID, Owner: "env_1", Field: "apiKey", Versions: []int64{2}}}, environment.ListSecrets(s)); diff != "" {
		t.Errorf("List (-want +got):\n%s", diff)
	}
	if err := s.Delete(ctx, config.SecretRef{ID: r1.ID}); err != nil || len(environment.ListSecrets(s)) != 0 {
		t.Errorf("Delete(whole) = %v, left %+v", err, environment.ListSecrets(s))
	}
	_, err = s.Replace(ctx, r2, "v3")
	wantErr(t, err, errcode.ErrNotFound)
	if err := s.Delete(ctx, r2); err != nil {
		t.Errorf("deleting an absent secret: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Put(cctx, "env_1", "apiKey", "x"); err == nil {
		t.Error("Put with a cancelled context succeeded")
	}
}
