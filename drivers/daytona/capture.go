package daytona

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
)

// snapshotName derives a snapshot name from a template name: lower case
// letters, digits, '-', '_' and '.', with a random suffix so that names
// never clash (the API refuses a duplicate name with 409).
func snapshotName(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
		if b.Len() >= 40 {
			break
		}
	}
	base := strings.Trim(b.String(), "-._")
	if base == "" {
		base = "berth-template"
	}
	return base + "-" + newToken()[:12]
}

// Capture saves the sandbox as a new Daytona snapshot (POST
// /sandbox/{id}/snapshot) and waits within ctx's deadline until the
// snapshot itself is active. It returns the snapshot's id as
// images.SnapshotIdentity("daytona", id). The snapshot is looked up by the
// unique name the driver gave it only to learn the id the API assigned; a
// configured snapshot is never looked up by name. req.Labels are not stored:
// Daytona snapshots have no labels. The API requires a container sandbox to
// be started or stopped: one that is on its way there (another capture's
// snapshotting, say) is waited for (requestSnapshot).
//
// The order in which the sandbox leaves snapshotting and the snapshot
// appears depends on the provider's runner: job-based runners restore the
// sandbox's state first and save the snapshot after, older runners the
// other way round (v0.190.0 apps/api/src/sandbox/services/sandbox.service.ts
// createSnapshotFromSandbox, services/job-state-handler.service.ts). So the
// sandbox's state says nothing about the snapshot: Capture waits for the
// snapshot (absent, pending, then active) until the deadline, and fails
// early only when the snapshot or the sandbox reports an error.
func (sb *sandbox) Capture(ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
	if err := sb.live(); err != nil {
		return images.Identity{}, err
	}
	c := sb.s.c
	host := c.api.Host
	name := snapshotName(req.Name)
	p := sb.d.poller()
	if err := sb.requestSnapshot(ctx, p, name); err != nil {
		return images.Identity{}, err
	}
	last := "not yet saved"
	for {
		snap, err := c.getSnapshot(ctx, name)
		switch {
		case err == nil && snap.Name != name:
			return images.Identity{}, fmt.Errorf("daytona: capturing sandbox %s: snapshot %q answered as %q", sb.id, name, snap.Name)
		case err == nil && snap.State == snapshotActive:
			if uuid.Validate(snap.ID) != nil {
				return images.Identity{}, fmt.Errorf("daytona: captured snapshot %q at %s has id %q, not a UUID", name, host, snap.ID)
			}
			return images.SnapshotIdentity(driverName, snap.ID)
		case err == nil && (snap.State == snapshotErrorState || snap.State == snapshotBuildFail || snap.State == snapshotRemoving):
			reason := ""
			if snap.ErrorReason != nil {
				reason = ": " + *snap.ErrorReason
			}
			return images.Identity{}, fmt.Errorf("daytona: captured snapshot %s (%q) at %s is %s%s", snap.ID, name, host, snap.State, reason)
		case err == nil:
			last = snap.State
		case !errors.Is(err, errcode.ErrNotFound):
			return images.Identity{}, fmt.Errorf("daytona: capturing sandbox %s as %q: %w", sb.id, name, err)
		default:
			// Not saved yet: a sandbox that errored will not save it.
			live, err := c.getSandbox(ctx, sb.id)
			if err != nil {
				return images.Identity{}, fmt.Errorf("daytona: capturing sandbox %s as %q: %w", sb.id, name, err)
			}
			if live.State == stateError || live.State == stateBuildFailed {
				return images.Identity{}, fmt.Errorf("daytona: capturing sandbox %s at %s: snapshot %q was not saved: sandbox %s: %s",
					sb.id, host, name, live.State, live.ErrorReason)
			}
		}
		if err := p.wait(ctx); err != nil {
			return images.Identity{}, fmt.Errorf("daytona: capturing sandbox %s at %s: snapshot %q still %s when the wait ended: %w",
				sb.id, host, name, last, err)
		}
	}
}

// requestSnapshot asks the API to snapshot the sandbox as name (POST
// /sandbox/{id}/snapshot). The API refuses, with 400 "Sandbox must be in
// started or stopped state to create a snapshot", a sandbox in any other
// state, and with 409 (retried as transient by the client) one with a
// change pending (v0.190.0 sandbox.service.ts createSnapshotFromSandbox,
// which checks the state first). A sandbox on its way (snapshotting for
// another capture, starting, stopping, restoring, ...) is waited through
// within ctx's deadline and asked again; one that rests in another state
// (error, build_failed, archived, paused, destroyed) fails at once, naming
// it.
func (sb *sandbox) requestSnapshot(ctx context.Context, p *poller, name string) error {
	c := sb.s.c
	for {
		_, err := c.snapshotSandbox(ctx, sb.id, name)
		if err == nil {
			return nil
		}
		if statusOf(err) != http.StatusBadRequest || !strings.Contains(messageOf(err), "started or stopped state") {
			return fmt.Errorf("daytona: capturing sandbox %s as %q: %w", sb.id, name, err)
		}
		live, gerr := c.getSandbox(ctx, sb.id)
		if gerr != nil {
			return fmt.Errorf("daytona: capturing sandbox %s as %q: %w (reading its state: %w)", sb.id, name, err, gerr)
		}
		switch live.State {
		case stateError, stateBuildFailed, stateArchived, statePaused, stateDestroyed:
			return fmt.Errorf("daytona: capturing sandbox %s at %s as %q: the sandbox is %s: %w", sb.id, c.api.Host, name, live.State, err)
		}
		if live.DesiredState == desiredDestroyed {
			return fmt.Errorf("daytona: capturing sandbox %s at %s as %q: the sandbox is being deleted: %w", sb.id, c.api.Host, name, err)
		}
		if werr := p.wait(ctx); werr != nil {
			return fmt.Errorf("daytona: capturing sandbox %s at %s as %q: still %s when the wait ended: %w", sb.id, c.api.Host, name, live.State, werr)
		}
	}
}

// DeleteTemplate deletes a captured snapshot by its id (DELETE
// /snapshots/{id}) and reads it back (GET /snapshots/{id}) until the API
// answers 404, waiting within ctx's deadline while the snapshot is
// removing; one that is already gone is a confirmed receipt. An identity
// that is not a daytona snapshot is refused.
//
// What Daytona does (v0.190.0, commit 01c502bb1f1f):
// apps/api/src/sandbox/controllers/snapshot.controller.ts removeSnapshot
// (the access guard finds the snapshot by id or name, 404 "Snapshot with
// name X not found" otherwise, then ParseUUIDPipe) and
// services/snapshot.service.ts removeSnapshot only mark the snapshot
// removing, in whatever state and whatever sandboxes were made from it;
// the snapshot manager's checkSnapshotCleanup cron
// (managers/snapshot.manager.ts, every 10 s) drops the row, after which GET
// answers 404. The API never refuses a delete because the snapshot is in
// use (its only 409, "Snapshot was modified by another operation",
// repositories/snapshot.repository.ts, is a concurrent update and is
// retried as transient): sandboxes made from it run on, and new ones
// cannot be made from it. So DeleteTemplate never returns drivers.ErrInUse;
// a caller that must not delete a template under its leases checks them
// first. A snapshot left in another state than removing after a delete the
// API accepted is an error, not a receipt.
func (d *driver) DeleteTemplate(ctx context.Context, cfg config.Config, id images.Identity) (drivers.Receipt, error) {
	if id.SnapshotID() == "" || id.Provider() != driverName {
		return drivers.Receipt{}, fmt.Errorf("daytona: %q is not a daytona snapshot identity: %w", id, config.ErrInvalid)
	}
	s, err := d.open(cfg)
	if err != nil {
		return drivers.Receipt{}, err
	}
	sid := id.SnapshotID()
	host := s.c.api.Host
	err = s.c.deleteSnapshot(ctx, sid)
	if err != nil && !errors.Is(err, errcode.ErrNotFound) {
		return drivers.Receipt{}, fmt.Errorf("daytona: deleting snapshot %s: %w", sid, err)
	}
	p := d.poller()
	for removing := false; ; removing = true {
		snap, err := s.c.getSnapshot(ctx, sid)
		switch {
		case errors.Is(err, errcode.ErrNotFound):
			return drivers.Receipt{
				State: drivers.StateDestroyed, Confirmed: true, ConfirmedAt: time.Now().UTC(),
				Evidence: "GET /snapshots/" + sid + ": 404", EvidenceKind: drivers.EvidenceProvider,
			}, nil
		case err != nil && removing && ctx.Err() != nil:
			// The wait ended during a read-back: what is known is the
			// last answer, removing.
			return drivers.Receipt{}, fmt.Errorf("daytona: snapshot %s at %s is still removing when the wait ended; the delete is to be read back again: %w", sid, host, ctx.Err())
		case err != nil:
			return drivers.Receipt{}, fmt.Errorf("daytona: reading back snapshot %s: %w", sid, err)
		case snap.State != snapshotRemoving:
			return drivers.Receipt{}, fmt.Errorf("daytona: snapshot %s at %s is still there, %s, after its deletion", sid, host, snap.State)
		}
		if err := p.wait(ctx); err != nil {
			return drivers.Receipt{}, fmt.Errorf("daytona: snapshot %s at %s is still removing when the wait ended; the delete is to be read back again: %w", sid, host, err)
		}
	}
}
