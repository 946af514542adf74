package probe

import (
	"testing"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/envhook"
)

// IMG-6, IMG-8, QUAL-3: without a template the qualification fingerprint
// is the environment's source fingerprint (one definition of the source
// parts); an applied template changes the fingerprint and becomes the
// expected image; a detached one is left out.
func TestSubjectCoversTheAppliedTemplate(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	cfg := config.Config{"region": "r1", "image": "registry.example/img@sha256:" + sha('a'),
		"api_key": config.SecretRef{ID: "k", Version: 1}}
	env := &environment.Environment{ID: "env_1", Config: cfg}
	plain, problem := subjectOf(d, env, "acme")
	if problem != "" {
		t.Fatal(problem)
	}
	if src := envhook.SourceFingerprint(env, d); plain.Fingerprint != src {
		t.Fatalf("fingerprint without a template %s, source fingerprint %s: want equal", plain.Fingerprint, src)
	}
	tid := images.MustParseIdentity("snapshot:fake/snap-1")
	env.ActiveTemplate = &environment.ActiveTemplate{ID: "tpl-1", Identity: tid.String(), SourceFingerprint: envhook.SourceFingerprint(env, d)}
	with, _ := subjectOf(d, env, "acme")
	if with.Fingerprint == plain.Fingerprint || with.Template != tid.String() {
		t.Errorf("with a relinked template: fingerprint changed %v, template %q; want changed and %q", with.Fingerprint != plain.Fingerprint, with.Template, tid)
	}
	if got, ok := with.Image.Identity(); !ok || got != tid {
		t.Errorf("expected image %v, want the template's %v", with.Image, tid)
	}
	env.ActiveTemplate.SourceFingerprint = "sha256:other"
	detached, _ := subjectOf(d, env, "acme")
	if detached.Fingerprint != plain.Fingerprint || detached.Template != "" {
		t.Errorf("a detached template is covered: template %q", detached.Template)
	}
}
