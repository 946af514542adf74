package kubernetes

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

var (
	_ drivers.Resumer = (*driver)(nil)
	_ engineKernel    = (*sandbox)(nil)
)

// Resume (drivers.Resumer, capability reattach) reopens the pod
// providerLeaseID of the config's namespace from any process: a pod
// berth made (labelled berth.managed) that is not being deleted, waited
// for until it runs within ctx's deadline and the config's
// startup_timeout. A pod that is gone is errcode.ErrNotFound; one that
// ended (a pod's containers are not started again: reuse is not declared)
// or is being deleted is an error, not NotFound, since it is still there
// to be cleaned up.
func (d *driver) Resume(ctx context.Context, raw config.Config, providerLeaseID string) (drivers.Sandbox, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return nil, err
	}
	c, err := d.client(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.startup)
	defer cancel()
	target := c.target(cfg.namespace, providerLeaseID)
	pod, err := c.cs.CoreV1().Pods(cfg.namespace).Get(ctx, providerLeaseID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s: resume: no such pod: %w", target, errcode.ErrNotFound)
	}
	if err != nil {
		return nil, c.apiErr(target, "get pod", err)
	}
	if pod.Labels[labelManaged] != "true" {
		return nil, fmt.Errorf("%s: resume: not made by berth (no %s label): %w", target, labelManaged, errcode.ErrNotFound)
	}
	if pod.DeletionTimestamp != nil {
		return nil, &errcode.Error{Target: target,
			Message: fmt.Sprintf("The pod %s/%s is being deleted and cannot be used again: release its lease.", cfg.namespace, providerLeaseID),
			Err:     fmt.Errorf("%s: resume: the pod is being deleted (since %s)", target, pod.DeletionTimestamp.UTC().Format("15:04:05")),
		}
	}
	sb := &sandbox{d: d, c: c, cfg: cfg, name: providerLeaseID, uid: string(pod.UID), runnerDir: hasRunnerVolume(pod)}
	if pod, err = sb.waitRunning(ctx, pod); err != nil {
		return nil, err
	}
	sb.node = pod.Spec.NodeName
	return sb, nil
}

// engineKernel is the probe's interface for the kernel release of the
// machine a sandbox runs on (package probe compares a task's with it).
type engineKernel interface {
	EngineKernel(ctx context.Context) (string, error)
}

// EngineKernel returns the kernel release of the pod's node, as its
// status reports it (nodeInfo.kernelVersion), for the probe's isolation
// measurement. Credentials that may not read nodes (a namespaced Role)
// get "" and no error: the probe then says it did not measure.
func (s *sandbox) EngineKernel(ctx context.Context) (string, error) {
	if err := s.checkLive(); err != nil {
		return "", err
	}
	if s.node == "" {
		return "", nil
	}
	node, err := s.c.cs.CoreV1().Nodes().Get(ctx, s.node, metav1.GetOptions{})
	if apierrors.IsForbidden(err) || apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", s.c.apiErr(s.target(), "get node "+s.node, err)
	}
	return node.Status.NodeInfo.KernelVersion, nil
}
