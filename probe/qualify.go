package probe

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/qualify"
	"github.com/berthdev/berth/internal/secretcfg"
	"github.com/berthdev/berth/qualification"
)

// imageReference reads the image a config names, as the driver's schema
// says (config.Schema.Image).
func imageReference(d drivers.Driver, cfg config.Config) (images.Reference, error) {
	return d.Schema().Image(cfg)
}

// subjectOf builds the qualification subject of a saved environment for
// company (QUAL-2, QUAL-3): the fingerprint covers the driver, the schema's
// identity fields, the secret references with their versions, the image
// and the active template while it applies (envhook.AppliedTemplate:
// drift relinked, IMG-6, IMG-8), so promote, rollback,
// revoke and drift make older records stale. With a template the expected
// live image is the template's identity: the probe's lease starts from it.
// Knobs and metadata stay out, so a rename or a timeout change keeps a
// record. Without a template the fingerprint equals
// qualify.Fingerprint of the environment's source input (a test
// checks it against envhook.SourceFingerprint).
// imgProblem is set when the image field could not be read as a reference.
func subjectOf(d drivers.Driver, env *environment.Environment, company string) (subj qualify.Subject, imgProblem string) {
	schema := d.Schema()
	parts := secretcfg.Partition(schema, env.Config)
	target := maps.Clone(parts.Identity)
	delete(target, schema.ImageField) // counted once, normalized, as Image
	secrets := make(map[string]qualify.SecretRef, len(parts.Secrets))
	for k, ref := range parts.Secrets {
		secrets[k] = qualify.SecretRef{ID: ref.ID, Version: ref.Version}
	}
	raw := env.Config.String(schema.ImageField)
	ref, err := imageReference(d, env.Config)
	image := raw
	if err != nil {
		ref = images.Reference{}
		imgProblem = fmt.Sprintf("image %q of environment %s is not a reference berth can pin (%v): it never qualifies", raw, env.ID, err)
	} else if !ref.IsZero() {
		image = ref.String()
	}
	template := ""
	if t, _ := envhook.AppliedTemplate(env, d).(*environment.ActiveTemplate); t != nil {
		if id, err := images.ParseIdentity(t.Identity); err == nil && !id.IsZero() {
			template, ref, imgProblem = id.String(), id.Reference(), ""
		}
	}
	subj = qualify.Subject{
		Company:     company,
		Environment: env.ID,
		Saved:       true,
		Fingerprint: qualify.Fingerprint(qualify.FingerprintInput{
			Driver: d.Name(), Target: target, Secrets: secrets, Image: image, Template: template,
		}),
		Image:     ref,
		Template:  template,
		Isolation: drivers.IsolationOf(d, env.Config).String(),
	}
	return subj, imgProblem
}

// Qualification returns the public view of environment envID's
// qualification for company (QUAL-7): qualified or not, why, and the
// platform and time while qualified. A stale record (QUAL-3) or another
// company's (QUAL-4) shows as not qualified. View.LastTest is the
// company's last Probe of the environment, nil when there was none. It reads the catalog, the
// secret store and the qualification store only: no driver or provider is
// called and nothing is allocated (CAP-1). It needs ActionRead on the
// environment; errors are authorization, not-found and store errors.
func (p *Prober) Qualification(ctx context.Context, pr authz.Principal, envID, company string) (qualification.View, error) {
	if _, err := p.load(ctx, pr, authz.ActionRead, envID, company); err != nil {
		return qualification.View{}, err
	}
	subj, err := p.currentSubject(ctx, envID, company)
	if err != nil {
		return qualification.View{}, err
	}
	rec, err := p.quals.GetQualification(ctx, company, envID)
	if errors.Is(err, errcode.ErrNotFound) {
		rec, err = qualification.Record{}, nil
	}
	if err != nil {
		return qualification.View{}, fmt.Errorf("probe: qualification of environment %s: %w", envID, err)
	}
	v := qualify.NewView(rec, subj)
	if t, err := p.quals.GetLastTest(ctx, company, envID); err == nil {
		v.LastTest = &t
	} else if !errors.Is(err, errcode.ErrNotFound) {
		return qualification.View{}, fmt.Errorf("probe: last test of environment %s: %w", envID, err)
	}
	return v, nil
}

// currentSubject returns the subject of the saved environment envID as it
// is configured now. It does no authorization.
func (p *Prober) currentSubject(ctx context.Context, envID, company string) (qualify.Subject, error) {
	env, err := p.envs.GetEnvironment(ctx, envID) // secret references only
	if err != nil {
		return qualify.Subject{}, fmt.Errorf("probe: environment %s: %w", envID, err)
	}
	d, err := p.reg.Lookup(env.Driver)
	if err != nil {
		return qualify.Subject{}, fmt.Errorf("probe: environment %s: %w", envID, err)
	}
	subj, _ := subjectOf(d, env, company)
	return subj, nil
}
