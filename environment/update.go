package environment

import (
	"context"
	"fmt"
	"maps"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// Update applies req to environment id if req.BaseRevision is its current
// revision (CFG-6); otherwise it returns an error wrapping errcode.ErrConflict and
// nothing changes. A new Config is normalized by the driver's schema
// (errors name the environment and field, CFG-8). In it each secret field
// holds either the reference the full view showed (kept) or a pasted value
// (stored as that secret's next version, CFG-3); the same holds for each
// value of a SecretMap field (a driver's secret env vars), key by key. A
// reference that is not the one stored for that field (and key) of this
// environment is refused, so that no environment can point at another's
// secret. A secret field or map key left out is removed together with its
// secret. On any error nothing is saved and no
// secret version is left behind. It returns the full view at the new
// revision.
func (c *Catalog) Update(ctx context.Context, p authz.Principal, id string, req UpdateRequest) (*View, error) {
	cur, err := c.load(ctx, p, authz.ActionUpdate, id)
	if err != nil {
		return nil, err
	}
	env, err := c.update(ctx, p, cur, req)
	if err != nil {
		c.logFailure(ctx, p, authz.ActionUpdate, resourceOf(cur), err)
		return nil, err
	}
	c.logMutation(ctx, p, "environment updated", env)
	c.saved(ctx, env)
	return c.view(env, true), nil
}

func (c *Catalog) update(ctx context.Context, p authz.Principal, cur *Environment, req UpdateRequest) (*Environment, error) {
	label := labelOf(cur)
	if req.BaseRevision <= 0 {
		return nil, &Error{Environment: label, Field: "baseRevision", Err: errcode.ErrInvalid,
			Reason: "required: the revision the update is based on (CFG-6)"}
	}
	if req.BaseRevision != cur.Revision {
		return nil, &Error{Environment: label, Field: "baseRevision", Err: errStaleRevision,
			Reason: fmt.Sprintf("stale revision %d: the stored revision is %d; reload and apply the change again (CFG-6)", req.BaseRevision, cur.Revision)}
	}
	next := cloneEnvironment(cur)
	if req.Name != nil {
		next.Name = *req.Name
	}
	if req.Description != nil {
		next.Description = *req.Description
	}
	if req.Env != nil {
		next.Env = maps.Clone(req.Env)
	}
	if req.Metadata != nil {
		next.Metadata = maps.Clone(req.Metadata)
	}
	if err := validateFields(label, next.Name, next.Description, req.Env, req.Metadata); err != nil {
		return nil, err
	}
	schema, err := c.schemaFor(label, cur.Driver)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Pool == nil:
	case req.Pool.Size == 0 && req.Pool.MaxAge == 0 && !req.Pool.Runner:
		next.Pool = nil // removed: a sweep drains its members
	default:
		d, _ := c.reg.Lookup(cur.Driver) // schemaFor found it
		if err := checkPool(label, d, req.Pool); err != nil {
			return nil, err
		}
		next.Pool = clonePool(req.Pool)
	}
	if req.RequireIsolation != nil {
		if err := checkIsolation(label, *req.RequireIsolation); err != nil {
			return nil, err
		}
		next.RequireIsolation = *req.RequireIsolation
	}
	var created, superseded []config.SecretRef
	if req.Config != nil {
		if err := checkReservedConfig(label, schema, req.Config); err != nil {
			return nil, err
		}
		cfg, err := schema.Normalize(req.Config)
		if err != nil {
			return nil, &ConfigError{ID: cur.ID, Name: cur.Name, Err: err}
		}
		prev := config.Config(cur.Config)
		if superseded, err = supersededSecrets(label, schema, cfg, prev); err != nil {
			return nil, err
		}
		created, err = c.moveSecrets(ctx, label, cur.ID, schema, cfg, prev)
		if err != nil {
			return nil, err
		}
		next.Config = cfg
	}
	next.Revision = cur.Revision + 1
	next.UpdatedAt = c.clock.Now().UTC()
	next.UpdatedBy = p.ID
	if err := c.store.UpdateEnvironment(ctx, next, req.BaseRevision); err != nil {
		c.dropSecrets(ctx, created)
		return nil, fmt.Errorf("environment %s: %w", label, err)
	}
	c.retireSecrets(ctx, superseded)
	return next, nil
}

// Archive sets environment id to StatusArchived (kept for history; cannot
// be bound or leased, ASG-2) if baseRevision is current (else errcode.ErrConflict).
// Archiving an archived environment is an error wrapping errcode.ErrConflict. It
// needs ActionArchive (CFG-2) and returns the full view.
func (c *Catalog) Archive(ctx context.Context, p authz.Principal, id string, baseRevision int64) (*View, error) {
	return c.setStatus(ctx, p, id, baseRevision, StatusArchived, "environment archived")
}

// Restore sets an archived environment back to StatusActive, with the rules
// of Archive.
func (c *Catalog) Restore(ctx context.Context, p authz.Principal, id string, baseRevision int64) (*View, error) {
	return c.setStatus(ctx, p, id, baseRevision, StatusActive, "environment restored")
}

func (c *Catalog) setStatus(ctx context.Context, p authz.Principal, id string, base int64, to Status, msg string) (*View, error) {
	cur, err := c.load(ctx, p, authz.ActionArchive, id)
	if err != nil {
		return nil, err
	}
	label := labelOf(cur)
	fail := func(err error) (*View, error) {
		c.logFailure(ctx, p, authz.ActionArchive, resourceOf(cur), err)
		return nil, err
	}
	switch {
	case base != cur.Revision:
		return fail(&Error{Environment: label, Field: "baseRevision", Err: errStaleRevision,
			Reason: fmt.Sprintf("stale revision %d: the stored revision is %d (CFG-6)", base, cur.Revision)})
	case cur.Status == to:
		return fail(&Error{Environment: label, Field: "status", Err: errcode.ErrConflict, Reason: "already " + string(to)})
	}
	next := cloneEnvironment(cur)
	next.Status = to
	next.Revision = cur.Revision + 1
	next.UpdatedAt = c.clock.Now().UTC()
	next.UpdatedBy = p.ID
	if err := c.store.UpdateEnvironment(ctx, next, base); err != nil {
		return fail(fmt.Errorf("environment %s: %w", label, err))
	}
	c.logMutation(ctx, p, msg, next)
	c.saved(ctx, next) // a restore: an active environment with a pool
	if to == StatusArchived {
		// The record is archived: finish the drain even if the caller
		// gives up.
		actx := context.WithoutCancel(ctx)
		for _, r := range c.reporters {
			if o, ok := r.(archiveObserver); ok {
				if err := o.EnvironmentArchived(actx, next.ID); err != nil {
					c.log.Warn("environment archived, but a drain after it failed; sweeps retry it", "id", next.ID, "err", err)
				}
			}
		}
	}
	return c.view(next, true), nil
}
