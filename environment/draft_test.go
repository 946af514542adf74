package environment_test

import (
	"context"
	"testing"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// TestDraft (PRB-4, PRB-7): a draft is validated like a create but nothing is
// saved and no secret is moved; only admins and operators may draft-probe,
// agents are denied even with company grants.
func TestDraft(t *testing.T) {
	t.Parallel()
	for _, pr := range principals {
		t.Run(pr.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t, nil)
			d, cfg, err := f.cat.Draft(ctx, pr.p, environment.CreateRequest{Driver: "remote",
				Config: map[string]any{"host": "h", "apiKey": canary}})
			if pr.p.Role == authz.RoleBoardMember || pr.p.Role == authz.RoleAgent {
				wantErr(t, err, errcode.ErrDenied)
				wantText(t, err, "probe")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Name() != "remote" || cfg.String("apiKey") != canary || cfg.Int("port") != 22 {
				t.Errorf("Draft = %s, port %d: want the remote driver and the normalized config with its pasted secret", d.Name(), cfg.Int("port"))
			}
			if f.count(t) != 0 || len(environment.ListSecrets(f.secrets)) != 0 {
				t.Errorf("a draft saved something: %d environments, secrets %+v", f.count(t), environment.ListSecrets(f.secrets))
			}
		})
	}
	t.Run("bad drafts are named", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, nil)
		ctx := context.Background()
		_, _, err := f.cat.Draft(ctx, admin, environment.CreateRequest{Driver: "remote", Config: map[string]any{"apiKey": "k"}})
		wantErr(t, err, errcode.ErrInvalid, config.ErrInvalid)
		wantText(t, err, `environment "draft"`, `field "host"`)
		_, _, err = f.cat.Draft(ctx, admin, environment.CreateRequest{Driver: "fake"})
		wantErr(t, err, drivers.ErrUnavailable)
		_, _, err = f.cat.Draft(ctx, admin, environment.CreateRequest{Driver: "remote",
			Config: map[string]any{"host": "h", "apiKey": config.SecretRef{ID: "sec_x", Version: 1}}})
		wantErr(t, err, errcode.ErrInvalid)
		wantText(t, err, `field "config.apiKey"`)
	})
}
