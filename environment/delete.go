package environment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/internal/envhook"
	"github.com/berthdev/berth/internal/secretcfg"
)

// Reference is one thing that points at an environment: a binding, a lease,
// a setup session. It holds ids and a short description, never a secret.
type Reference struct {
	// Kind is what refers: "binding", "lease", "setup_session", ...
	Kind string `json:"kind"`
	// ID names the referrer: a lease or session id; for a binding its
	// kind and key, "workspace:ws_1", "project:p_1", "agent:a_1", or
	// "instance_default" (also the binding's authz.Resource ID).
	ID      string `json:"id"`
	Company string `json:"company,omitempty"`
	// Detail is a short human-readable description ("workspace ws_1
	// default", "reuse_by_workspace lease, last used 5m ago").
	Detail string `json:"detail,omitempty"`
}

// Usage is what one usage reporter knows about the references to an
// environment (CFG-7).
type Usage struct {
	// Assignments are bindings and defaults that point at the environment.
	Assignments []Reference `json:"assignments,omitempty"`
	// ActiveLeases are leases in use now.
	ActiveLeases []Reference `json:"activeLeases,omitempty"`
	// ReusableLeases are live leases a later run may resume; they block a
	// delete.
	ReusableLeases []Reference `json:"reusableLeases,omitempty"`
	// PendingCleanupLeases are leases whose sandbox is not yet confirmed
	// gone; they block a delete.
	PendingCleanupLeases []Reference `json:"pendingCleanupLeases,omitempty"`
	// SetupSessions are active custom-image setup sessions.
	SetupSessions []Reference `json:"setupSessions,omitempty"`
	// PooledLeases are warm-pool members waiting for adoption
	// (environment.Pool); they do not block a delete, which drains them
	// (destroyed with receipts, through the lease manager's
	// ClearEnvironment).
	PooledLeases []Reference `json:"pooledLeases,omitempty"`
}

func (u *Usage) add(o Usage) {
	u.Assignments = append(u.Assignments, o.Assignments...)
	u.ActiveLeases = append(u.ActiveLeases, o.ActiveLeases...)
	u.ReusableLeases = append(u.ReusableLeases, o.ReusableLeases...)
	u.PendingCleanupLeases = append(u.PendingCleanupLeases, o.PendingCleanupLeases...)
	u.SetupSessions = append(u.SetupSessions, o.SetupSessions...)
	u.PooledLeases = append(u.PooledLeases, o.PooledLeases...)
}

// usageReporter reports what references an environment, for the catalog's
// blast radius (CFG-7): the lease and image-setup layers' constructors
// return one (internal/leasehook.New, internal/templatehook.New) and
// berth.New wires it into the catalog (internal/envhook). It is a hook
// between services, not an entry point: it answers for no principal, so
// it is never an exported method of a service (the catalog authorizes
// BlastRadius and Delete before it asks). EnvironmentUsage reads records
// only: it never calls a provider (CAP-1).
//
// A usage reporter may also have the method
//
//	EnvironmentArchived(ctx context.Context, envID string) error
//
// which the catalog calls after it archived envID (the lease manager
// drains the environment's warm pool, destroying its members with
// receipts). The archive stands either way; an error is logged, and
// sweeps retry what it left. It may also have the method
//
//	EnvironmentSaved(ctx context.Context, env *Environment)
//
// which the catalog calls after it saved env with a warm pool (created,
// updated or restored; env is a copy of the stored record): the lease
// manager starts filling the pool then, rather than at the next sweep. It
// must not block on the fill. And it may have ClearEnvironment
// (envhook.ReferenceClearer), which the catalog's Delete calls once the
// environment is gone, for the references it owns.
type usageReporter = envhook.UsageReporter[Usage]

// archiveObserver is what a usage reporter may add (see usageReporter).
type archiveObserver interface {
	EnvironmentArchived(ctx context.Context, envID string) error
}

// saveObserver is what a usage reporter may add (see usageReporter).
type saveObserver interface {
	EnvironmentSaved(ctx context.Context, env *Environment)
}

// saved tells the reporters that observe saves that env, active with a
// warm pool, was saved (see usageReporter).
func (c *Catalog) saved(ctx context.Context, env *Environment) {
	if env.Pool == nil || env.Status != StatusActive {
		return
	}
	for _, r := range c.reporters {
		if o, ok := r.(saveObserver); ok {
			o.EnvironmentSaved(context.WithoutCancel(ctx), cloneEnvironment(env))
		}
	}
}

// BlastRadius is what a delete of an environment would touch (CFG-7).
type BlastRadius struct {
	EnvironmentID   string `json:"environmentId"`
	EnvironmentName string `json:"environmentName"`
	// Revision is the revision the radius was computed at; pass it to Delete.
	Revision int64 `json:"revision"`
	Usage
	// Protected, if not empty, is why the environment may never be deleted
	// (managed local, instance default).
	Protected string `json:"protected,omitempty"`
	// Blockers lists why Delete would be refused now; empty when it may
	// proceed.
	Blockers []string `json:"blockers,omitempty"`
}

// Deletable reports whether nothing blocks the delete.
func (b *BlastRadius) Deletable() bool { return len(b.Blockers) == 0 }

// BlastRadius returns what deleting environment id would touch, gathered from
// the usage reporters, and what blocks the delete. It needs ActionDelete. A
// reporter's error is returned (a radius that cannot be known is never
// guessed).
func (c *Catalog) BlastRadius(ctx context.Context, p authz.Principal, id string) (*BlastRadius, error) {
	env, err := c.load(ctx, p, authz.ActionDelete, id)
	if err != nil {
		return nil, err
	}
	return c.blastRadius(ctx, env)
}

func (c *Catalog) blastRadius(ctx context.Context, env *Environment) (*BlastRadius, error) {
	b := &BlastRadius{EnvironmentID: env.ID, EnvironmentName: env.Name, Revision: env.Revision}
	if c.asg != nil {
		u, err := c.asg.environmentUsage(ctx, env.ID)
		if err != nil {
			return nil, fmt.Errorf("environment %s: reading its usage: %w", labelOf(env), err)
		}
		b.add(u)
		b.Protected = c.asg.protected(ctx, env)
	}
	for _, r := range c.reporters {
		u, err := r.EnvironmentUsage(ctx, env.ID)
		if err != nil {
			return nil, fmt.Errorf("environment %s: reading its usage: %w", labelOf(env), err)
		}
		b.add(u)
	}
	if c.protected != nil && b.Protected == "" {
		b.Protected = c.protected(ctx, cloneEnvironment(env))
	}
	if b.Protected != "" {
		b.Blockers = append(b.Blockers, "protected: "+b.Protected)
	}
	if n := len(b.ReusableLeases); n > 0 {
		b.Blockers = append(b.Blockers, fmt.Sprintf("%d reusable lease(s) live: %s", n, refIDs(b.ReusableLeases)))
	}
	if n := len(b.PendingCleanupLeases); n > 0 {
		b.Blockers = append(b.Blockers, fmt.Sprintf("%d lease(s) pending cleanup: %s", n, refIDs(b.PendingCleanupLeases)))
	}
	return b, nil
}

func refIDs(rs []Reference) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return strings.Join(ids, ", ")
}

// Delete removes environment id at baseRevision (else errcode.ErrConflict) after
// computing its blast radius (CFG-7). It is refused with the radius and an
// *Error (wrapping errcode.ErrConflict) while a reusable lease is live,
// while a cleanup is pending, or for a protected environment. After the
// record is gone it has every usage reporter that owns references clear
// them (bindings, ASG-5; envhook.ReferenceClearer) and deletes the environment's secrets. It returns the
// blast radius it acted on; if clearing references fails, the environment
// is deleted and the error says which clear failed. It needs ActionDelete.
func (c *Catalog) Delete(ctx context.Context, p authz.Principal, id string, baseRevision int64) (*BlastRadius, error) {
	env, err := c.load(ctx, p, authz.ActionDelete, id)
	if err != nil {
		return nil, err
	}
	b, err := c.delete(ctx, env, baseRevision)
	if err != nil {
		c.logFailure(ctx, p, authz.ActionDelete, resourceOf(env), err)
		return b, err
	}
	c.log.LogAttrs(ctx, slog.LevelInfo, "environment deleted",
		slog.String("id", env.ID), slog.String("name", env.Name), slog.String("driver", env.Driver),
		slog.Int64("revision", env.Revision), slog.Int("assignmentsCleared", len(b.Assignments)),
		slog.String("actor", p.ID), slog.String("role", string(p.Role)))
	return b, nil
}

func (c *Catalog) delete(ctx context.Context, env *Environment, base int64) (*BlastRadius, error) {
	label := labelOf(env)
	if base != env.Revision {
		return nil, &Error{Environment: label, Field: "baseRevision", Err: errStaleRevision,
			Reason: fmt.Sprintf("stale revision %d: the stored revision is %d (CFG-6)", base, env.Revision)}
	}
	b, err := c.blastRadius(ctx, env)
	if err != nil {
		return nil, err
	}
	if !b.Deletable() {
		return b, &Error{radius: b}
	}
	if err := c.store.DeleteEnvironment(ctx, env.ID, base); err != nil {
		return b, fmt.Errorf("environment %s: %w", label, err)
	}
	// The record is gone: finish the rest even if the caller gives up.
	ctx = context.WithoutCancel(ctx)
	var errs []error
	if c.asg != nil {
		if err := c.asg.clearEnvironment(ctx, env.ID); err != nil {
			errs = append(errs, fmt.Errorf("environment %s deleted, but clearing its references failed: %w", label, err))
		}
	}
	for _, r := range c.reporters {
		if cl, ok := r.(envhook.ReferenceClearer); ok {
			if err := cl.ClearEnvironment(ctx, env.ID); err != nil {
				errs = append(errs, fmt.Errorf("environment %s deleted, but clearing its references failed: %w", label, err))
			}
		}
	}
	c.retireSecrets(ctx, wholeSecrets(env.Config))
	return b, errors.Join(errs...)
}

// wholeSecrets returns a Version-0 reference (the whole secret) for every
// secret reference in cfg, in fields and in SecretMap values. It needs no
// schema, so the secrets of an environment whose driver is no longer
// registered are deleted too.
func wholeSecrets(cfg config.Config) []config.SecretRef {
	var out []config.SecretRef
	for _, ref := range secretcfg.SecretRefs(cfg) {
		if whole := (config.SecretRef{ID: ref.ID}); !slices.Contains(out, whole) {
			out = append(out, whole)
		}
	}
	return out
}
