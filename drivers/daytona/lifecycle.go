package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// poller spaces reads of a sandbox's state: PollInterval doubling to
// PollMax. wait returns ctx.Err() as soon as ctx ends.
type poller struct {
	next, max time.Duration
}

func (d *driver) poller() *poller { return &poller{next: d.opts.PollInterval, max: d.opts.PollMax} }

func (p *poller) wait(ctx context.Context) error {
	t := time.NewTimer(p.next)
	defer t.Stop()
	p.next = min(p.next*2, p.max)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// waitStarted drives sandbox sb to started within ctx's deadline: it waits
// while a transition is pending, starts it when it rests stopped, archived
// or paused (start resumes a paused VM sandbox), or is archiving (the API
// lets a start overtake an archive, v0.190.0 sandbox.service.ts start), and
// fails on error, build_failed or deletion. A pausing sandbox is waited
// for until it is paused, then resumed.
func (d *driver) waitStarted(ctx context.Context, s *settings, sb *apiSandbox) (*apiSandbox, error) {
	p := d.poller()
	host := s.c.api.Host
	for {
		settled := sb.DesiredState == "" || sb.DesiredState == sb.State
		switch {
		case sb.DesiredState == desiredDestroyed || sb.State == stateDestroyed:
			return nil, fmt.Errorf("daytona: sandbox %s at %s is being deleted: %w", sb.ID, host, errcode.ErrNotFound)
		case sb.State == stateError || sb.State == stateBuildFailed:
			reason := sb.ErrorReason
			if reason == "" {
				reason = "no reason given"
			}
			return nil, fmt.Errorf("daytona: sandbox %s at %s failed to start: state %s: %s", sb.ID, host, sb.State, reason)
		case sb.State == stateStarted && settled:
			return sb, nil
		case (sb.State == stateStopped || sb.State == stateArchived || sb.State == statePaused) && settled,
			sb.State == stateArchiving && sb.DesiredState == stateArchived:
			started, err := s.c.sandboxAction(ctx, sb.ID, "start")
			if err != nil {
				return nil, fmt.Errorf("daytona: starting sandbox %s: %w", sb.ID, err)
			}
			sb = started
			continue
		}
		if err := p.wait(ctx); err != nil {
			return nil, fmt.Errorf("daytona: sandbox %s at %s still %s (desired %s) when the wait ended: %w",
				sb.ID, host, sb.State, sb.DesiredState, err)
		}
		next, err := s.c.getSandbox(ctx, sb.ID)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return nil, fmt.Errorf("daytona: sandbox %s at %s still %s (desired %s) when the wait ended: %w",
					sb.ID, host, sb.State, sb.DesiredState, cerr)
			}
			return nil, fmt.Errorf("daytona: waiting for sandbox %s to start: %w", sb.ID, err)
		}
		sb = next
	}
}

// destroy deletes sandbox id and reads it back until the API answers 404.
// A 409 (state change in progress) is retried inside the deadline unless
// the sandbox is already being deleted.
func (d *driver) destroy(ctx context.Context, s *settings, id string) (drivers.Receipt, error) {
	err := s.c.retry.do(ctx, func(ctx context.Context) error {
		err := s.c.send(ctx, s.c.api, http.MethodDelete, seg("sandbox", id), nil, nil, nil)
		if statusOf(err) == http.StatusConflict {
			if sb, gerr := s.c.send1Sandbox(ctx, id); gerr == nil && sb.DesiredState == desiredDestroyed {
				return nil
			}
		}
		return err
	})
	if err != nil && !errors.Is(err, errcode.ErrNotFound) {
		return drivers.Receipt{}, fmt.Errorf("daytona: deleting sandbox %s at %s: %w", id, s.c.api.Host, err)
	}
	return d.waitGone(ctx, s, id, "after delete")
}

// waitGone reads sandbox id back until the API answers 404 or reports it
// destroyed, and returns the confirmed receipt.
func (d *driver) waitGone(ctx context.Context, s *settings, id, why string) (drivers.Receipt, error) {
	p := d.poller()
	host := s.c.api.Host
	for {
		sb, err := s.c.getSandbox(ctx, id)
		switch {
		case errors.Is(err, errcode.ErrNotFound):
			return drivers.Receipt{
				ProviderLeaseID: id, State: drivers.StateDestroyed, Confirmed: true, EvidenceKind: drivers.EvidenceProvider, ConfirmedAt: time.Now(),
				Evidence: fmt.Sprintf("GET /sandbox/%s at %s: 404 %s", id, host, why),
			}, nil
		case err != nil:
			return drivers.Receipt{}, fmt.Errorf("daytona: confirming sandbox %s is deleted: %w", id, err)
		case sb.State == stateDestroyed:
			return drivers.Receipt{
				ProviderLeaseID: id, State: drivers.StateDestroyed, Confirmed: true, EvidenceKind: drivers.EvidenceProvider, ConfirmedAt: time.Now(),
				Evidence: fmt.Sprintf("GET /sandbox/%s at %s: state destroyed %s", id, host, why),
			}, nil
		}
		if err := p.wait(ctx); err != nil {
			return drivers.Receipt{}, fmt.Errorf("daytona: sandbox %s at %s still %s (desired %s) %s: %w",
				id, host, sb.State, sb.DesiredState, why, err)
		}
	}
}

// stop stops sandbox id and reads it back until it is stopped. A sandbox
// with autoDeleteInterval 0 is deleted by the API on stop; that is
// confirmed as destroyed.
func (d *driver) stop(ctx context.Context, s *settings, id string) (drivers.Receipt, error) {
	host := s.c.api.Host
	_, err := s.c.sandboxAction(ctx, id, "stop")
	switch {
	case errors.Is(err, errcode.ErrNotFound):
		return d.waitGone(ctx, s, id, "after stop")
	case statusOf(err) == http.StatusBadRequest && strings.Contains(messageOf(err), "stoppable"):
		// Already stopped or archived: the read-back below decides.
	case err != nil:
		return drivers.Receipt{}, fmt.Errorf("daytona: stopping sandbox %s: %w", id, err)
	}
	p := d.poller()
	for {
		sb, err := s.c.getSandbox(ctx, id)
		switch {
		case errors.Is(err, errcode.ErrNotFound):
			return d.waitGone(ctx, s, id, "after stop")
		case err != nil:
			return drivers.Receipt{}, fmt.Errorf("daytona: confirming sandbox %s stopped: %w", id, err)
		case sb.DesiredState == desiredDestroyed:
			return d.waitGone(ctx, s, id, "after stop (ephemeral sandbox)")
		case (sb.State == stateStopped || sb.State == stateArchived) && (sb.DesiredState == "" || sb.DesiredState == sb.State):
			return drivers.Receipt{
				ProviderLeaseID: id, State: drivers.StateStopped, Confirmed: true, EvidenceKind: drivers.EvidenceProvider, ConfirmedAt: time.Now(),
				Evidence: fmt.Sprintf("GET /sandbox/%s at %s: state %s", id, host, sb.State),
			}, nil
		case sb.State == stateError || sb.State == stateBuildFailed:
			return drivers.Receipt{}, fmt.Errorf("daytona: stopping sandbox %s at %s: state %s: %s", id, host, sb.State, sb.ErrorReason)
		}
		if err := p.wait(ctx); err != nil {
			return drivers.Receipt{}, fmt.Errorf("daytona: sandbox %s at %s still %s (desired %s) after stop: %w",
				id, host, sb.State, sb.DesiredState, err)
		}
	}
}
