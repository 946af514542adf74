package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// session loads session and authorizes p on its lease (ActionLease of the
// session's company, authorizeRecord). An unknown session and one p may
// not read are the same not found (errcode.ErrNotFound, one text naming only the
// id the caller gave); a session p may read but not act on is denied
// (errcode.ErrDenied), naming only the id.
func (c *Controller) session(ctx context.Context, p authz.Principal, id string) (Session, error) {
	s, err := c.o.Store.GetSession(ctx, id)
	if errors.Is(err, errcode.ErrNotFound) {
		return Session{}, notFound("session", id)
	}
	if err != nil {
		return Session{}, err
	}
	if err := c.authorizeRecord(ctx, p, leaseResource(s.Lease, s.Company), "session", id); err != nil {
		return Session{}, err
	}
	return s, nil
}

// dispatch authorizes p on session and journals cmd (sealed here: its
// digest is computed from its body) for the session's runner, which gets
// it on its connection, now or when it reconnects (PRP-4). A command for
// another lease or run than the session's, or any command on a probe
// session, is denied with prp.ErrScopeDenied and not journaled (PRP-7,
// PRP-8). A command id used before returns the journaled record (with its
// result, marked Duplicate, if it has one) and runs nothing again; the
// same id with another body is ErrIdempotencyConflict. A task.start with
// secrets (prp.SecretUse) is checked first by the SecretResolver (New) with p; a
// refusal journals nothing (its values are resolved only at delivery).
func (c *Controller) dispatch(ctx context.Context, p authz.Principal, session string, cmd prp.Command) (CommandRecord, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return CommandRecord{}, err
	}
	if s.Scope != prp.ScopeTask {
		c.log.Warn("controller: command denied on a probe session", "session", s.ID, "command", cmd.ID)
		return CommandRecord{}, fmt.Errorf("controller: command %q on session %s: %w: a %s identity runs no command", cmd.ID, s.ID, prp.ErrScopeDenied, s.Scope)
	}
	if s.Company == authz.InstanceCompany {
		// A warm-pool member's runner (pool.go) runs nothing until the
		// lease that adopts the member takes its session over.
		c.log.Warn("controller: command denied on a pool member's session", "session", s.ID, "command", cmd.ID)
		return CommandRecord{}, fmt.Errorf("controller: command %q on session %s: %w: the session is a warm-pool member's, which runs no command before a lease adopts the member and takes it over", cmd.ID, s.ID, prp.ErrScopeDenied)
	}
	if cmd.Lease != s.Lease || cmd.Run != s.Run {
		c.log.Warn("controller: command denied for another lease or run", "session", s.ID, "command", cmd.ID, "lease", cmd.Lease, "run", cmd.Run)
		return CommandRecord{}, fmt.Errorf("controller: command %q for lease %q run %q on session %s: %w", cmd.ID, cmd.Lease, cmd.Run, s.ID, prp.ErrScopeDenied)
	}
	cmd = prpwire.SealCommand(cmd)
	if err := prpwire.ValidateCommand(cmd); err != nil {
		return CommandRecord{}, fmt.Errorf("controller: session %s: %w", s.ID, err)
	}
	if err := c.checkSecrets(ctx, p, s, cmd); err != nil {
		c.log.Warn("controller: command refused: its secrets cannot be delivered", "session", s.ID, "command", cmd.ID, "code", CodeOfSecrets(err))
		return CommandRecord{}, err
	}
	r, existed, err := c.o.Store.AppendCommand(ctx, s.ID, cmd, time.Now().UTC())
	if err != nil {
		return CommandRecord{}, err
	}
	if existed && r.Result != nil {
		r.Result.Duplicate = true
	}
	if !existed {
		c.notifySession(s.ID)
	}
	return r, nil
}

// wait authorizes p on session and waits until command id has a result
// (done or indeterminate) and returns it; ctx bounds the wait.
func (c *Controller) wait(ctx context.Context, p authz.Principal, session, id string) (prp.Result, error) {
	s, err := c.session(ctx, p, session)
	if err != nil {
		return prp.Result{}, err
	}
	if err := notInstanceSession(s); err != nil {
		return prp.Result{}, err
	}
	for {
		ch := c.sessionChanges(s.ID)
		r, err := c.o.Store.GetCommand(ctx, s.ID, id)
		if err != nil {
			return prp.Result{}, err
		}
		if r.State.Terminal() && r.Result != nil {
			return *r.Result, nil
		}
		if err := c.await(ctx, ch); err != nil {
			return prp.Result{}, fmt.Errorf("controller: wait for command %s of session %s: %w", id, s.ID, err)
		}
	}
}

// Proof is a task's stop proof as the controller reports it: the runner's
// StopProof and the evidence it stands on. A proof that comes from the
// runner alone is drivers.EvidenceRunnerAttested: the runner runs inside
// the sandbox, whose tasks may impersonate it, so the proof is attested,
// not verified from outside (PRP-6, CONVENTIONS 25). Only a lease
// release (its provider's confirmation, the lease's cgroup or berth's own
// tag scan) proves from outside that nothing is left.
type Proof struct {
	prp.StopProof
	// Evidence names what the proof stands on.
	Evidence drivers.EvidenceKind `json:"evidence"`
}

// verified reports whether the runner's p attests the stop: complete, no
// survivor, no check that failed, and both checks that work without
// cgroups ran. A runner's "complete" alone is not trusted; even a proof
// that passes is only attested (drivers.EvidenceRunnerAttested).
func verified(p prp.StopProof) bool {
	return p.Complete && len(p.Survivors) == 0 && len(p.Failed) == 0 &&
		slices.Contains(p.Methods, prp.MethodGroup) && slices.Contains(p.Methods, prp.MethodProcTag)
}
