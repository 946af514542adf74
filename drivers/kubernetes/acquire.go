package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// Acquire creates a hardened pod (podSpec) labelled with req.Labels,
// berth.managed=true and berth.lease, calls req.Allocated with its name
// (the provider lease id), and waits until its container runs, within
// startup_timeout and ctx's deadline. A pod that cannot run (an image that
// cannot be pulled, a container the kubelet cannot create, a pod that
// ends) fails at once with the reason its status gives; one that is not
// scheduled or started by the deadline fails with the reason of its
// status and its latest warning event. The pod is deleted when Acquire
// fails after creating it. With req.Runner the pod gets the runner's
// emptyDir at /.berth, where HostRunner installs the runner.
func (d *driver) Acquire(ctx context.Context, raw config.Config, req drivers.AcquireRequest) (drivers.Sandbox, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return nil, err
	}
	c, err := d.client(cfg)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: acquire: %w", c.target(cfg.namespace, ""), err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.startup)
	defer cancel()
	if err := d.checkRuntimeClass(ctx, c, cfg); err != nil {
		return nil, err
	}
	name := "berth-" + randomHex(6)
	pods := c.cs.CoreV1().Pods(cfg.namespace)
	created, err := pods.Create(ctx, podSpec(cfg, name, req), metav1.CreateOptions{})
	if err != nil {
		if !apierrors.IsAlreadyExists(err) && !isStatus(err) {
			// The answer may not have come back: the pod may exist.
			d.deleteQuietly(c, cfg.namespace, name)
		}
		return nil, c.apiErr(c.target(cfg.namespace, name), "create pod from "+cfg.image, err)
	}
	sb := &sandbox{d: d, c: c, cfg: cfg, name: name, uid: string(created.UID), runnerDir: hasRunnerVolume(created)}
	if req.Allocated != nil {
		if err := req.Allocated(ctx, name); err != nil {
			d.deleteQuietly(c, cfg.namespace, name)
			return nil, err
		}
	}
	pod, err := sb.waitRunning(ctx, created)
	if err != nil {
		d.deleteQuietly(c, cfg.namespace, name)
		return nil, err
	}
	sb.node = pod.Spec.NodeName
	d.log.Debug("kubernetes: acquired", "server", c.server, "pod", cfg.namespace+"/"+name, "image", cfg.image)
	return sb, nil
}

// isStatus reports whether err is an answer of the API server (so the
// request's outcome is known).
func isStatus(err error) bool {
	var se apierrors.APIStatus
	return errors.As(err, &se)
}

// checkRuntimeClass refuses a gvisor class whose handler the credentials
// can read and is not runsc. A class they cannot read (RuntimeClasses are
// cluster-scoped: a namespaced Role does not grant them) is taken by its
// name; the conformance suite measures the level inside a pod.
func (d *driver) checkRuntimeClass(ctx context.Context, c *cluster, cfg *settings) error {
	if !gvisorClass(cfg.runtimeClass) {
		return nil
	}
	rc, err := c.cs.NodeV1().RuntimeClasses().Get(ctx, cfg.runtimeClass, metav1.GetOptions{})
	if err != nil {
		return nil //nolint:nilerr // unreadable: taken by name (see above)
	}
	if rc.Handler != "runsc" {
		return &errcode.Error{Field: fieldRuntimeClass,
			Message: fmt.Sprintf("The RuntimeClass %q of the cluster at %s runs the handler %q, not runsc: the driver declares gVisor for it, so it refuses it; name the class differently or point it at runsc.", cfg.runtimeClass, c.server, rc.Handler),
			Err:     fmt.Errorf("kubernetes %s: runtime class %q has handler %q, not runsc: %w", c.server, cfg.runtimeClass, rc.Handler, config.ErrInvalid)}
	}
	return nil
}

// deleteQuietly deletes a pod that Acquire gave up on, on a context of
// its own, without waiting for it to go.
func (d *driver) deleteQuietly(c *cluster, ns, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		d.log.Warn("kubernetes: deleting an abandoned pod", "pod", ns+"/"+name, "err", err)
	}
}

// Container waiting reasons that mean the container will not start
// without a change (the kubelet would back off and retry, to no end).
var fatalWaiting = []string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"}

// waitRunning watches the pod from its creation until its container runs,
// the pod cannot run (podFailure) or ctx ends (the pod's status and latest
// warning event say why).
func (s *sandbox) waitRunning(ctx context.Context, created *corev1.Pod) (*corev1.Pod, error) {
	pods := s.c.cs.CoreV1().Pods(s.cfg.namespace)
	pod := created
	rv := created.ResourceVersion
	for {
		if running(pod) {
			return pod, nil
		}
		if err := s.podFailure(ctx, pod); err != nil {
			return nil, err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", s.name).String(), ResourceVersion: rv})
		if err != nil {
			if ctx.Err() != nil {
				return nil, s.notStarted(ctx, pod)
			}
			return nil, s.c.apiErr(s.target(), "watch pod", err)
		}
		pod, rv, err = s.watchUntil(ctx, w, pod, rv)
		w.Stop()
		if err != nil {
			return nil, err
		}
	}
}

// watchUntil reads w until the pod runs or cannot, ctx ends or the watch
// ends (it returns the last pod seen to be watched again).
func (s *sandbox) watchUntil(ctx context.Context, w watch.Interface, pod *corev1.Pod, rv string) (*corev1.Pod, string, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, rv, s.notStarted(ctx, pod)
		case ev, ok := <-w.ResultChan():
			if !ok {
				// The watch ended (a timeout of the server's): read the pod.
				p, err := s.c.cs.CoreV1().Pods(s.cfg.namespace).Get(ctx, s.name, metav1.GetOptions{})
				if err != nil {
					if ctx.Err() != nil {
						return nil, rv, s.notStarted(ctx, pod)
					}
					return nil, rv, s.c.apiErr(s.target(), "get pod", err)
				}
				return p, p.ResourceVersion, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, rv, &errcode.Error{Target: s.target(),
					Message: fmt.Sprintf("The pod %s/%s was deleted while it started, by someone else: acquire again.", s.cfg.namespace, s.name),
					Err:     fmt.Errorf("%s: deleted while starting: %w", s.target(), drivers.ErrTransient)}
			case watch.Error:
				p, err := s.c.cs.CoreV1().Pods(s.cfg.namespace).Get(ctx, s.name, metav1.GetOptions{})
				if err != nil {
					return nil, rv, s.c.apiErr(s.target(), "get pod", err)
				}
				return p, p.ResourceVersion, nil
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			pod, rv = p, p.ResourceVersion
			if running(pod) {
				return pod, rv, nil
			}
			if err := s.podFailure(ctx, pod); err != nil {
				return nil, rv, err
			}
		}
	}
}

// running reports whether the pod's container runs.
func running(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == containerName && cs.State.Running != nil {
			return true
		}
	}
	return false
}

// podFailure returns the error of a pod that will not run without a
// change, nil for one that may still start.
func (s *sandbox) podFailure(ctx context.Context, pod *corev1.Pod) error {
	if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		why := cmpOr(pod.Status.Reason, pod.Status.Message, terminatedReason(pod), string(pod.Status.Phase))
		return &errcode.Error{Target: s.target(),
			Message: fmt.Sprintf("The pod %s/%s ended before it could be used (%s): check the image's sh and the pod's events.", s.cfg.namespace, s.name, why),
			Err:     fmt.Errorf("%s: pod %s: %s", s.target(), pod.Status.Phase, why)}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		w := cs.State.Waiting
		if w == nil || !slices.Contains(fatalWaiting, w.Reason) {
			continue
		}
		msg := bound(w.Message)
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			return &errcode.Error{Target: s.target(),
				Message: fmt.Sprintf("The cluster at %s cannot pull the image %s (%s): check the reference, the node's access to the registry and image_pull_policy.", s.c.server, s.cfg.image, w.Reason),
				Err:     fmt.Errorf("%s: image %s: %s: %s: %w", s.target(), s.cfg.image, w.Reason, msg, drivers.ErrImageNotFound)}
		}
		return &errcode.Error{Target: s.target(),
			Message: fmt.Sprintf("The kubelet cannot start the container of pod %s/%s (%s): %s", s.cfg.namespace, s.name, w.Reason, cmpOr(msg, "see the pod's events.")),
			Err:     fmt.Errorf("%s: container %s: %s", s.target(), w.Reason, msg)}
	}
	return nil
}

func terminatedReason(pod *corev1.Pod) string {
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("container exited %d: %s", t.ExitCode, cmpOr(t.Reason, t.Message))
		}
	}
	return ""
}

// notStarted is the error of a pod that did not run by ctx's end: the
// context's error, with the reason of the pod's status (not scheduled,
// waiting for its image) and its latest warning event, read on a context
// of its own.
func (s *sandbox) notStarted(ctx context.Context, pod *corev1.Pod) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	why := []string{}
	if pod != nil {
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				why = append(why, "not scheduled: "+cmpOr(c.Reason, "pending")+" "+bound(c.Message))
			}
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				why = append(why, "container waiting: "+w.Reason+" "+bound(w.Message))
			}
		}
	}
	if ev := s.lastWarning(rctx); ev != "" {
		why = append(why, "event: "+ev)
	}
	detail := cmpOr(strings.TrimSpace(strings.Join(why, "; ")), "no reason reported yet")
	return &errcode.Error{Target: s.target(),
		Message: fmt.Sprintf("The pod %s/%s did not start in time (%s): check the cluster's capacity, node selector, tolerations and image, or raise startup_timeout.", s.cfg.namespace, s.name, detail),
		Err:     fmt.Errorf("%s: not running: %s: %w", s.target(), detail, ctx.Err())}
}

// lastWarning returns the latest Warning event of the pod, "" when there
// is none or the events cannot be read.
func (s *sandbox) lastWarning(ctx context.Context) string {
	evs, err := s.c.cs.CoreV1().Events(s.cfg.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", s.name),
			fields.OneTermEqualSelector("type", corev1.EventTypeWarning)).String()})
	if err != nil || len(evs.Items) == 0 {
		return ""
	}
	last := evs.Items[0]
	for _, e := range evs.Items[1:] {
		if eventTime(e).After(eventTime(last)) {
			last = e
		}
	}
	return last.Reason + ": " + bound(last.Message)
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// bound cuts an API server's message to 300 bytes.
func bound(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

func cmpOr(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
