package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/strslice"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// idleScript is the container's main process: it idles until stopped and
// exits at once on TERM/INT, so that a stop is fast. The engine's init
// (docker-init) runs as PID 1 and reaps orphans of killed commands.
const idleScript = `trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done`

// containerSpec returns the hardened container configuration: all
// capabilities dropped, no-new-privileges, pids and memory limits (no
// swap), never privileged, never the host's network, PID, IPC or UTS
// namespace, ports published only on 127.0.0.1. It carries no
// environment variables: the config's env holds secrets, which the engine
// would show in inspect and commit into captured images; each exec gets
// them instead (execEnv).
func containerSpec(cfg *settings, imageID string, req drivers.AcquireRequest) (*container.Config, *container.HostConfig, error) {
	labels := make(map[string]string, len(cfg.labels)+len(req.Labels)+2)
	maps.Copy(labels, cfg.labels)
	maps.Copy(labels, req.Labels)
	labels[labelManaged] = "true"
	labels[labelLease] = req.LeaseID
	init := true
	pids := cfg.pids
	cc := &container.Config{
		Image:      imageID,
		Entrypoint: strslice.StrSlice{"/bin/sh", "-c", idleScript},
		Cmd:        strslice.StrSlice{},
		WorkingDir: cfg.workdir, // no Env: the config's env is secret and goes to each exec (execEnv)
		User:       cfg.user,
		Labels:     labels,
		StopSignal: "SIGTERM",
	}
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(cfg.network),
		CapDrop:        strslice.StrSlice{"ALL"},
		SecurityOpt:    []string{"no-new-privileges:true"},
		Privileged:     false,
		ReadonlyRootfs: cfg.readonly,
		Init:           &init,
		IpcMode:        container.IPCModePrivate,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Runtime:        cfg.runtime,
		Resources: container.Resources{
			Memory:     cfg.memory,
			MemorySwap: cfg.memory,
			NanoCPUs:   cfg.nanoCPUs,
			PidsLimit:  &pids,
		},
	}
	if cfg.readonly {
		hc.Tmpfs = readonlyTmpfs(cfg)
	}
	if len(cfg.ports) > 0 {
		cc.ExposedPorts = nat.PortSet{}
		hc.PortBindings = nat.PortMap{}
		for _, p := range cfg.ports {
			port := nat.Port(p)
			cc.ExposedPorts[port] = struct{}{}
			hc.PortBindings[port] = []nat.PortBinding{{HostIP: "127.0.0.1", HostPort: ""}}
		}
	}
	if hc.NetworkMode.IsHost() || hc.NetworkMode.IsContainer() || hc.Privileged {
		return nil, nil, fmt.Errorf("docker: refusing network %q: %w", cfg.network, config.ErrInvalid)
	}
	return cc, hc, nil
}

// readonlyTmpfs returns the writable mounts of a read-only root: /tmp
// (256 MiB) and the workdir (up to the memory limit), both owned by the
// configured user so that a non-root uid can write to them. Their contents
// count against the container's memory limit. Both are exec (Docker's
// default for tmpfs is noexec): agents build code there and run it; nosuid
// and nodev stay.
func readonlyTmpfs(cfg *settings) map[string]string {
	owner := ""
	if cfg.user != "" {
		uid, gid, ok := strings.Cut(cfg.user, ":")
		if !ok {
			gid = uid
		}
		owner = ",uid=" + uid + ",gid=" + gid
	}
	mounts := map[string]string{"/tmp": "rw,exec,nosuid,nodev,size=256m,mode=1777"}
	if wd := path.Clean(cfg.workdir); wd != "/" && wd != "/tmp" {
		size := ""
		if cfg.memory > 0 {
			size = ",size=" + strconv.FormatInt(cfg.memory, 10)
		}
		mounts[wd] = "rw,exec,nosuid,nodev,mode=0755" + size + owner
	}
	return mounts
}

func startOptions() container.StartOptions { return container.StartOptions{} }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// waitRunning polls the engine until the container runs and returns that
// inspect (Acquire checks the image ID it names); a container that exited
// instead is an error. ContainerStart returns once the process has
// started, so the first inspect normally answers.
func (s *sandbox) waitRunning(ctx context.Context) (container.InspectResponse, error) {
	delay := 5 * time.Millisecond
	for {
		ins, err := s.cli.ContainerInspect(ctx, s.id)
		if err != nil {
			return ins, engineErr(s.cfg.host, "inspect container "+s.id, err)
		}
		st := ins.State
		switch {
		case st != nil && st.Running:
			return ins, nil
		case st != nil && (st.Status == container.StateExited || st.Status == container.StateDead):
			return ins, fmt.Errorf("docker %s: container %s exited at start (code %d): %s", s.cfg.host, s.id, st.ExitCode, st.Error)
		}
		select {
		case <-ctx.Done():
			return ins, fmt.Errorf("docker %s: waiting for container %s to run: %w", s.cfg.host, s.id, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

// inspectManaged inspects a container that berth made; a missing container
// or one without labelManaged is an error wrapping errcode.ErrNotFound.
func inspectManaged(ctx context.Context, cli *client.Client, host, id string) (container.InspectResponse, error) {
	if id == "" {
		return container.InspectResponse{}, fmt.Errorf("docker %s: empty container id: %w", host, errcode.ErrNotFound)
	}
	ins, err := cli.ContainerInspect(ctx, id)
	if err != nil {
		return ins, engineErr(host, "inspect container "+id, err)
	}
	if ins.Config == nil || ins.Config.Labels[labelManaged] != "true" {
		return ins, fmt.Errorf("docker %s: container %s is not a berth sandbox (no %s label): %w", host, id, labelManaged, errcode.ErrNotFound)
	}
	return ins, nil
}

// stateOf maps an engine state to a drivers.State.
func stateOf(status container.ContainerState) drivers.State {
	switch status {
	case container.StateRunning, container.StatePaused:
		return drivers.StateRunning
	case container.StateCreated, container.StateRestarting:
		return drivers.StateStarting
	case container.StateExited:
		return drivers.StateStopped
	case container.StateDead:
		return drivers.StateError
	case container.StateRemoving:
		return drivers.StateDestroyed
	}
	return ""
}

// Evidence of a destroy receipt, by what the engine answered.
const (
	// evidenceRemoved: DELETE /containers/{id}?force=1 answered 204. The
	// engine answers only after its cleanup has deleted the container from
	// its container stores, the ones inspect reads (moby
	// daemon/delete.go, cleanupContainer: daemon.containers.Delete and
	// containersReplica.Delete before it returns nil;
	// daemon/server/router/container/container_routes.go, deleteContainers:
	// 204 only then), so the answer is the engine's own confirmation that
	// it no longer knows the id.
	evidenceRemoved = "remove: 204 no content (the engine deleted the container from its stores before answering)"
	// evidenceRemoveNotFound: DELETE answered 404 "no such container".
	evidenceRemoveNotFound = "remove: no such container"
	// evidenceInspectGone: an inspect answered "no such container" after a
	// removal whose outcome the DELETE's answer did not tell.
	evidenceInspectGone = "inspect: no such container"
)

// removeContainer force-removes id (and its anonymous volumes) and returns
// the evidence that the engine no longer knows it. A 204 or a 404 of the
// DELETE is that evidence (the engine answers 204 only once the container
// is out of its stores). The inspect loop runs only when the answer does
// not tell: a 409 (another caller's removal is in progress) or a transport
// error after the request may have reached the engine (the connection
// broke). It waits until an inspect answers "no such container", and sends
// the DELETE again when the container is there and no removal is in
// progress (the earlier one never arrived, or failed).
func removeContainer(ctx context.Context, cli *client.Client, id string) (string, error) {
	delay := 5 * time.Millisecond
	for {
		err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil:
			return evidenceRemoved, nil
		case cerrdefs.IsNotFound(err):
			return evidenceRemoveNotFound, nil
		case !isRemovalInProgress(err) && !outcomeUnknown(ctx, err):
			return "", err
		}
		for {
			ins, ierr := cli.ContainerInspect(ctx, id)
			if cerrdefs.IsNotFound(ierr) {
				return evidenceInspectGone, nil
			}
			if ierr != nil {
				return "", errors.Join(err, ierr)
			}
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(delay):
			}
			delay = min(delay*2, 200*time.Millisecond)
			if ins.State == nil || ins.State.Status != container.StateRemoving {
				break // no removal in progress: send the DELETE again
			}
		}
	}
}

// outcomeUnknown reports whether a request failed in transport after it
// may have reached the engine: the connection broke or closed before the
// answer (the engine client reports every transport error as a
// connection failure), not a failed dial, after which nothing was sent,
// and ctx is still live.
func outcomeUnknown(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	msg := err.Error()
	for _, notSent := range []string{"Cannot connect to the Docker daemon", "connection refused", "dial unix", "dial tcp", "no such file or directory"} {
		if strings.Contains(msg, notSent) {
			return false
		}
	}
	return client.IsErrConnectionFailed(err) || isNetErr(err) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

func isRemovalInProgress(err error) bool {
	return cerrdefs.IsConflict(err) || strings.Contains(err.Error(), "already in progress")
}
