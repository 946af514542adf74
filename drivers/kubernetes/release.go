package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// get reads the pod.
func (s *sandbox) get(ctx context.Context) (*corev1.Pod, error) {
	pod, err := s.c.cs.CoreV1().Pods(s.cfg.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if err != nil {
		return nil, s.c.apiErr(s.target(), "get pod", err)
	}
	return pod, nil
}

// Release ends the lease. Keep reads the pod back (its phase is the
// receipt's state). Stop and Destroy delete the pod (a pod cannot be
// stopped and resumed: Stop is a delete too, whose destroyed state
// satisfies it) and confirm only once a read of the pod answers NotFound
// (the kubelet has stopped its containers and the API server removed it);
// a pod still there when ctx ends (a finalizer, a node that does not
// answer) is an error naming what holds it, and the receipt is not
// confirmed.
func (s *sandbox) Release(ctx context.Context, d drivers.Disposition) (drivers.Receipt, error) {
	if d == drivers.Keep {
		if err := s.checkLive(); err != nil {
			return drivers.Receipt{}, err
		}
		pod, err := s.get(ctx)
		if err != nil {
			return drivers.Receipt{ProviderLeaseID: s.name}, err
		}
		s.released.Store(true)
		s.closeIngress() // after released: no HostRunner opens another
		return drivers.Receipt{ProviderLeaseID: s.name, State: stateOf(pod), Confirmed: true, ConfirmedAt: time.Now(),
			Evidence: "get pod: phase " + string(pod.Status.Phase), EvidenceKind: drivers.EvidenceProvider}, nil
	}
	s.released.Store(true)
	s.closeIngress()
	return deletePod(ctx, s.c, s.cfg.namespace, s.name, types.UID(s.uid))
}

// deletePod deletes the pod name (only the one of uid, when given) and
// reads it back until the API server answers NotFound, or the pod of that
// name is another one (a new uid). Between reads it watches the pod, so
// that the read that proves the deletion follows the pod's last change at
// once (a watch that cannot be opened, or ends, leaves the reads on their
// backoff alone); the receipt is always the read's.
func deletePod(ctx context.Context, c *cluster, ns, name string, uid types.UID) (drivers.Receipt, error) {
	pods := c.cs.CoreV1().Pods(ns)
	target := c.target(ns, name)
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err := pods.Delete(ctx, name, opts)
	switch {
	case err == nil, apierrors.IsConflict(err):
	case apierrors.IsNotFound(err):
		return destroyed(name, "delete pod: 404 not found"), nil
	default:
		return drivers.Receipt{ProviderLeaseID: name}, c.apiErr(target, "delete pod", err)
	}
	delay := 50 * time.Millisecond
	var last *corev1.Pod
	var events <-chan watch.Event
	watched := false
	var w watch.Interface
	defer func() {
		if w != nil {
			w.Stop()
		}
	}()
	for {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return destroyed(name, "get pod after delete: 404 not found"), nil
		case err == nil && uid != "" && pod.UID != uid:
			return destroyed(name, "get pod after delete: the name holds another pod (uid "+string(pod.UID)+")"), nil
		case err == nil:
			last = pod
		case strings.Contains(err.Error(), "rate limiter Wait returned an error"):
			// client-go's limiter refuses a wait that would pass ctx's
			// deadline: the release's time is up, as below.
			return drivers.Receipt{ProviderLeaseID: name}, stuck(target, ns, name, last, err)
		case ctx.Err() == nil:
			return drivers.Receipt{ProviderLeaseID: name}, c.apiErr(target, "get pod after delete", err)
		}
		if !watched && last != nil {
			watched = true
			if w, err = pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
				ResourceVersion: last.ResourceVersion}); err == nil {
				events = w.ResultChan()
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return drivers.Receipt{ProviderLeaseID: name}, stuck(target, ns, name, last, ctx.Err())
		case <-t.C:
		case _, ok := <-events:
			t.Stop()
			if !ok {
				events = nil // the watch ended: the reads' backoff alone
			}
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// stuck is the error of a pod still there when the release's time ran
// out: what holds it (its finalizers, its node), for a person.
func stuck(target, ns, name string, pod *corev1.Pod, err error) error {
	why := "it was still terminating"
	if pod != nil {
		var parts []string
		if len(pod.Finalizers) > 0 {
			parts = append(parts, "finalizers "+strings.Join(pod.Finalizers, ", "))
		}
		if pod.Spec.NodeName != "" {
			parts = append(parts, "its node "+pod.Spec.NodeName+" has not confirmed that its containers stopped")
		}
		if len(parts) > 0 {
			why = strings.Join(parts, "; ")
		}
	}
	return &errcode.Error{Target: target,
		Message: fmt.Sprintf("The pod %s/%s was deleted but is still there (%s): check the node, or remove the finalizers; berth retries the cleanup.", ns, name, why),
		Err:     fmt.Errorf("%s: delete not confirmed: %s: %w", target, why, err)}
}

func destroyed(name, evidence string) drivers.Receipt {
	return drivers.Receipt{ProviderLeaseID: name, State: drivers.StateDestroyed, Confirmed: true, ConfirmedAt: time.Now(),
		Evidence: evidence, EvidenceKind: drivers.EvidenceProvider}
}

// stateOf maps a pod's phase to a drivers.State.
func stateOf(pod *corev1.Pod) drivers.State {
	if pod.DeletionTimestamp != nil {
		return drivers.StateStopped
	}
	switch pod.Status.Phase {
	case corev1.PodPending:
		return drivers.StateStarting
	case corev1.PodRunning:
		return drivers.StateRunning
	case corev1.PodSucceeded, corev1.PodFailed:
		return drivers.StateStopped
	}
	return ""
}

// List returns the pods of the config's namespace that berth made
// (berth.managed=true) and that carry every one of labels.
func (d *driver) List(ctx context.Context, raw config.Config, want map[string]string) ([]drivers.SandboxInfo, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return nil, err
	}
	c, err := d.client(cfg)
	if err != nil {
		return nil, err
	}
	sel := labels.Set{labelManaged: "true"}
	for k, v := range want {
		sel[k] = labelValue(v)
	}
	selector, err := labels.ValidatedSelectorFromSet(sel)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: list: labels: %v: %w", err, errcode.ErrInvalid)
	}
	list, err := c.cs.CoreV1().Pods(cfg.namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, c.apiErr(c.target(cfg.namespace, ""), "list pods", err)
	}
	out := make([]drivers.SandboxInfo, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, drivers.SandboxInfo{ProviderLeaseID: p.Name, Labels: p.Labels, State: stateOf(&p)})
	}
	return out, nil
}

// Destroy deletes the berth pod providerLeaseID and confirms it as
// Release does. A pod that is gone is a confirmed receipt; a pod of that
// name that berth did not make is an error wrapping errcode.ErrNotFound,
// and is left alone.
func (d *driver) Destroy(ctx context.Context, raw config.Config, providerLeaseID string) (drivers.Receipt, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return drivers.Receipt{}, err
	}
	c, err := d.client(cfg)
	if err != nil {
		return drivers.Receipt{}, err
	}
	pod, err := c.cs.CoreV1().Pods(cfg.namespace).Get(ctx, providerLeaseID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return destroyed(providerLeaseID, "get pod: 404 not found"), nil
	}
	if err != nil {
		return drivers.Receipt{ProviderLeaseID: providerLeaseID}, c.apiErr(c.target(cfg.namespace, providerLeaseID), "get pod", err)
	}
	if pod.Labels[labelManaged] != "true" {
		return drivers.Receipt{ProviderLeaseID: providerLeaseID},
			fmt.Errorf("%s: not made by berth (no %s label): left alone: %w", c.target(cfg.namespace, providerLeaseID), labelManaged, errcode.ErrNotFound)
	}
	return deletePod(ctx, c, cfg.namespace, providerLeaseID, pod.UID)
}
