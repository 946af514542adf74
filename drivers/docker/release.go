package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// stopTimeout is how long a stop waits for the idle process to exit on TERM
// before the engine kills it (it exits at once).
const stopTimeout = 10 * time.Second

// Release ends the lease: Keep leaves the container running, Stop stops it
// (resumable with Resume), Destroy force-removes it. The receipt is the
// engine's answer after the change: a forced DELETE that answered 204 (the
// engine answers only once the container is out of its stores) or "no
// such container" proves StateDestroyed, and an inspect after a stop that
// shows a container that no longer runs proves StateStopped (LEASE-7). After Release, Exec returns drivers.ErrReleased; Release itself
// may be called again (for example to retry a failed destroy).
//
// Release closes the handle's open runner ingress (a kept or stopped
// container keeps its runner directory for Resume); a confirmed Destroy
// removes the container's runner directory.
func (s *sandbox) Release(ctx context.Context, disp drivers.Disposition) (drivers.Receipt, error) {
	s.released.Store(true)
	s.closeIngress()
	s.closePrimed()
	switch disp {
	case drivers.Keep:
		return confirmState(ctx, s.cli, s.cfg.host, s.id)
	case drivers.Stop:
		return stopContainer(ctx, s.cli, s.cfg.host, s.id)
	case drivers.Destroy:
		r, err := destroyContainer(ctx, s.cli, s.cfg.host, s.id)
		if err == nil {
			s.d.removeRunnerDir(s.runner)
		}
		return r, err
	}
	return drivers.Receipt{}, fmt.Errorf("docker: release %s: unknown disposition %s", s.id, disp)
}

// confirmState reads the container's state back from the engine.
func confirmState(ctx context.Context, cli *client.Client, host, id string) (drivers.Receipt, error) {
	ins, err := cli.ContainerInspect(ctx, id)
	now := time.Now()
	if cerrdefs.IsNotFound(err) {
		return drivers.Receipt{ProviderLeaseID: id, State: drivers.StateDestroyed, Confirmed: true, EvidenceKind: drivers.EvidenceProvider, ConfirmedAt: now,
			Evidence: "inspect: no such container"}, nil
	}
	if err != nil {
		return drivers.Receipt{ProviderLeaseID: id}, engineErr(host, "inspect container "+id, err)
	}
	st := drivers.State("")
	status := "unknown"
	if ins.State != nil {
		st, status = stateOf(ins.State.Status), ins.State.Status
	}
	return drivers.Receipt{ProviderLeaseID: id, State: st, Confirmed: true, EvidenceKind: drivers.EvidenceProvider, ConfirmedAt: now,
		Evidence: "inspect: status " + status}, nil
}

// stopContainer stops id and confirms it no longer runs.
func stopContainer(ctx context.Context, cli *client.Client, host, id string) (drivers.Receipt, error) {
	secs := int(stopTimeout / time.Second)
	if err := cli.ContainerStop(ctx, id, container.StopOptions{Timeout: &secs}); err != nil && !cerrdefs.IsNotFound(err) {
		return drivers.Receipt{ProviderLeaseID: id}, engineErr(host, "stop container "+id, err)
	}
	r, err := confirmState(ctx, cli, host, id)
	if err != nil {
		return r, err
	}
	if r.State != drivers.StateStopped && r.State != drivers.StateDestroyed {
		r.Confirmed = false
		return r, fmt.Errorf("docker %s: container %s still %s after stop", host, id, r.State)
	}
	return r, nil
}

// destroyContainer force-removes id and confirms the engine no longer knows
// it (removeContainer says by which answer). A container already gone
// yields the same confirmed receipt.
func destroyContainer(ctx context.Context, cli *client.Client, host, id string) (drivers.Receipt, error) {
	evidence, err := removeContainer(ctx, cli, id)
	if err != nil {
		return drivers.Receipt{ProviderLeaseID: id}, engineErr(host, "remove container "+id, err)
	}
	// The engine's answer for that id: the DELETE's 204 or 404, else an
	// inspect's "no such container" (removeContainer).
	return drivers.Receipt{ProviderLeaseID: id, State: drivers.StateDestroyed, Confirmed: true, EvidenceKind: drivers.EvidenceProvider, ConfirmedAt: time.Now(),
		Evidence: evidence}, nil
}

// Destroy removes the berth container providerLeaseID without a handle and
// returns the engine's confirmation. A container that is already gone
// yields a confirmed StateDestroyed receipt; a container that exists but was
// not made by berth (no labelManaged) is refused with an error wrapping
// errcode.ErrNotFound and left alone. A confirmed destroy removes the
// container's runner directory (found through its mounts).
func (d *driver) Destroy(ctx context.Context, raw config.Config, providerLeaseID string) (drivers.Receipt, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return drivers.Receipt{}, err
	}
	cli, err := d.client(cfg.host)
	if err != nil {
		return drivers.Receipt{}, err
	}
	ins, err := inspectManaged(ctx, cli, cfg.host, providerLeaseID)
	if err != nil {
		if providerLeaseID != "" {
			if _, ierr := cli.ContainerInspect(ctx, providerLeaseID); cerrdefs.IsNotFound(ierr) {
				return confirmState(ctx, cli, cfg.host, providerLeaseID)
			}
		}
		return drivers.Receipt{ProviderLeaseID: providerLeaseID}, err
	}
	r, err := destroyContainer(ctx, cli, cfg.host, providerLeaseID)
	if err == nil {
		d.removeRunnerDir(d.runnerOf(ins))
	}
	return r, err
}

// List returns the berth containers (labelManaged) on the configured engine
// that carry every given label, running or stopped; containers being removed
// are left out. It is the orphan sweep's primitive (LEASE-9).
func (d *driver) List(ctx context.Context, raw config.Config, labels map[string]string) ([]drivers.SandboxInfo, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return nil, err
	}
	cli, err := d.client(cfg.host)
	if err != nil {
		return nil, err
	}
	f := filters.NewArgs(filters.Arg("label", labelManaged+"=true"))
	for _, k := range sortedKeys(labels) {
		f.Add("label", k+"="+labels[k])
	}
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, engineErr(cfg.host, "list containers", err)
	}
	out := make([]drivers.SandboxInfo, 0, len(list))
	for _, c := range list {
		st := stateOf(c.State)
		if st == drivers.StateDestroyed {
			continue
		}
		out = append(out, drivers.SandboxInfo{ProviderLeaseID: c.ID, Labels: c.Labels, State: st})
	}
	return out, nil
}
