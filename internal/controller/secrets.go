package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpwire"
)

// ErrSecretsUnsupported is returned by Attachment.Start for a task with
// secrets when the controller has no SecretResolver (New's secrets), or when the
// session's runner, as last connected to this controller, did not offer
// secrets among its capabilities.
var ErrSecretsUnsupported = errcode.New(errcode.Unsupported, "controller: no secret resolver: tasks with secrets are unsupported")

// SecretTarget is what a task's secrets are resolved for: the session's
// lease, run and company.
type SecretTarget struct {
	Session string
	Lease   string
	Run     string
	Company string
}

// SecretResolver resolves the secret references of a task (prp.SecretUse)
// for the runner of a lease: a hook given to New, not an entry point. The
// host supplies it (berth.New wires the resolver that handover.New
// returns next to its Service: the lease environment's secret env map and
// managed accounts with their project auth checks). Since Resolve returns
// plaintext values for no principal, an implementation must not be an
// exported method set of a service anyone can call: return it from a
// constructor as a value of an unexported type, as handover.New does.
//
// Check is called by Attachment.Start, with the acting principal, before the
// command is journaled: it authorizes p and refuses a use that cannot be
// delivered, with an error naming the use (reference, env name or file)
// and never a value. Resolve is called when the command is delivered to
// the runner (on any replica, without a principal: the dispatch was
// authorized) and returns the values in the order of uses, or an error
// carrying a stable code (see CodeOfSecrets) that the runner's refusal of
// the command reports. Neither may log or return a value in an error.
type SecretResolver interface {
	Check(ctx context.Context, p authz.Principal, t SecretTarget, uses []prp.SecretUse) error
	Resolve(ctx context.Context, t SecretTarget, uses []prp.SecretUse) ([]string, error)
}

// SecretError is an error of a SecretResolver with a stable code (such as
// a project auth check's mismatch, AUTH-2): the resolver's own sub-code
// (the reasons auth_check_missing, ... of docs/errors.md for berth's resolver), which travels to the runner with
// the refused secrets; errcode.Code of the error classifies it.
type SecretError interface {
	error
	SecretCode() string
}

// CodeOfSecrets returns the stable code of a SecretResolver's error: the
// SecretCode of the first error in its chain that has one, else
// prpwire.CodeSecretsUnavailable.
func CodeOfSecrets(err error) string {
	var se SecretError
	if errors.As(err, &se) {
		return se.SecretCode()
	}
	return string(prpwire.CodeSecretsUnavailable)
}

func targetOf(s Session) SecretTarget {
	return SecretTarget{Session: s.ID, Lease: s.Lease, Run: s.Run, Company: s.Company}
}

// checkSecrets runs the resolver's dispatch check for cmd's secrets.
func (c *Controller) checkSecrets(ctx context.Context, p authz.Principal, s Session, cmd prp.Command) error {
	if cmd.TaskStart == nil || len(cmd.TaskStart.Secrets) == 0 {
		return nil
	}
	if _, err := c.o.Store.GetCommand(ctx, s.ID, cmd.ID); err == nil {
		// Journaled before: Dispatch returns the stored record (or the
		// conflict) and delivers nothing new, so nothing is checked again.
		return nil
	}
	if c.secrets == nil {
		return fmt.Errorf("controller: command %q on session %s: %w", cmd.ID, s.ID, ErrSecretsUnsupported)
	}
	if h, ok := c.hello(s.ID); ok && !prpwire.Has(h.Capabilities, prpwire.CapSecrets) {
		return fmt.Errorf("controller: command %q on session %s: %w: the runner (%s) does not offer capability %s",
			cmd.ID, s.ID, ErrSecretsUnsupported, h.RunnerVersion, prpwire.CapSecrets)
	}
	if err := c.secrets.Check(ctx, p, targetOf(s), cmd.TaskStart.Secrets); err != nil {
		return fmt.Errorf("controller: command %q on session %s: secrets: %w", cmd.ID, s.ID, err)
	}
	return nil
}

// secretsFor resolves the values of r's secrets for delivery: a body
// with the values, or with the code and message of the failure (which the
// runner reports as the command's refusal). ok is false when r needs no
// secrets frame: no secrets, a result is stored already (a redelivery
// runs nothing, so nothing is delivered again), or the delivery was
// claimed before (Store.ClaimSecrets: on another connection or replica,
// or before a reconnect), since a value goes out at most once per command
// (a runner without its values refuses the command, prpwire.CodeSecretsMissing;
// sending them again needs a new command). The claim is stored before the
// frame is sent; a store error fails the connection (err).
func (lc *liveConn) secretsFor(ctx context.Context, sess Session, r CommandRecord) (sv prpwire.SecretValues, ok bool, err error) {
	ts := r.Command.TaskStart
	if ts == nil || len(ts.Secrets) == 0 || r.Result != nil {
		return prpwire.SecretValues{}, false, nil
	}
	c := lc.c
	claimed, err := c.o.Store.ClaimSecrets(ctx, sess.ID, r.Command.ID, time.Now().UTC())
	if err != nil {
		return prpwire.SecretValues{}, false, err
	}
	if !claimed {
		c.log.Info("controller: secrets of a command went out before: not delivered again", "session", sess.ID, "command", r.Command.ID)
		return prpwire.SecretValues{}, false, nil
	}
	sv.CommandID = r.Command.ID
	if c.secrets == nil {
		sv.Code, sv.Message = string(prpwire.CodeSecretsUnavailable), ErrSecretsUnsupported.Error()
		return sv, true, nil
	}
	vals, err := c.secrets.Resolve(ctx, targetOf(sess), ts.Secrets)
	switch {
	case err != nil:
		sv.Code, sv.Message = CodeOfSecrets(err), err.Error()
		c.log.Warn("controller: secrets of a command not resolved", "session", sess.ID, "command", r.Command.ID, "code", sv.Code, "err", err)
	case len(vals) != len(ts.Secrets):
		sv.Code, sv.Message = string(prpwire.CodeSecretsUnavailable), fmt.Sprintf("the resolver returned %d values for %d secrets", len(vals), len(ts.Secrets))
	default:
		sv.Values = vals
		c.log.Debug("controller: delivering secrets with their command", "session", sess.ID, "command", r.Command.ID, "secrets", len(vals))
	}
	return sv, true, nil
}
