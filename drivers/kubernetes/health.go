package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/qualification"
)

// Endpoint implements drivers.HealthChecker: the kubeconfig's secret
// reference (or "in-cluster"), its context and the namespace; one
// measurement per set of credentials and namespace, since what the
// credentials may do there is part of the health. No I/O, no secret.
func (d *driver) Endpoint(cfg config.Config) string {
	ns := cfg.String(fieldNamespace)
	if ns == "" {
		ns = defaultNamespace
	}
	who := "in-cluster"
	if ref, ok := cfg.SecretRef(fieldKubeconfig); ok {
		who = "kubeconfig " + ref.String()
	} else if cfg.String(fieldKubeconfig) != "" {
		return "" // an inline value: no identity to show without it
	}
	if ctxName := cfg.String(fieldContext); ctxName != "" {
		who += " context " + ctxName
	}
	return who + " namespace " + ns
}

// needed is what the driver does with the credentials: the verbs of the
// Role that docs/kubernetes.md lists.
var needed = []struct{ verb, resource, sub string }{
	{"create", "pods", ""}, {"get", "pods", ""}, {"list", "pods", ""}, {"watch", "pods", ""}, {"delete", "pods", ""},
	{"create", "pods", "exec"},
}

// CheckHealth implements drivers.HealthChecker without allocating: the
// API server's /readyz, a list of the namespace's berth pods (the
// namespace is reachable with the credentials), and a
// SelfSubjectAccessReview of each permission the driver needs (pods
// create, get, list, watch, delete; pods/exec create). A denied one is
// drivers.ErrUnavailable naming it: the environment is unavailable, with
// that reason, before anything is created.
func (d *driver) CheckHealth(ctx context.Context, raw config.Config) error {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return err
	}
	c, err := d.client(cfg)
	if err != nil {
		return err
	}
	target := c.target(cfg.namespace, "")
	if _, err := c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		e := c.apiErr(target, "readyz", err)
		if errcode.Code(e) == errcode.Unknown {
			e = fmt.Errorf("%w: %w", e, drivers.ErrUnavailable)
		}
		return e
	}
	sel := labels.Set{labelManaged: "true"}.String()
	if _, err := c.cs.CoreV1().Pods(cfg.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1}); err != nil {
		return c.apiErr(target, "list pods", err)
	}
	var denied []string
	for _, n := range needed {
		r, err := c.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: cfg.namespace, Verb: n.verb, Resource: n.resource, Subresource: n.sub}}}, metav1.CreateOptions{})
		if err != nil {
			return c.apiErr(target, "review access", err)
		}
		if !r.Status.Allowed {
			what := n.resource
			if n.sub != "" {
				what += "/" + n.sub
			}
			denied = append(denied, n.verb+" "+what)
		}
	}
	if len(denied) > 0 {
		list := strings.Join(denied, ", ")
		return &errcode.Error{Target: target,
			Message: fmt.Sprintf("The credentials may not %s in namespace %s of the cluster at %s: grant the Role that docs/kubernetes.md lists.", list, cfg.namespace, c.server),
			Err:     fmt.Errorf("%s: forbidden: %s: %w", target, list, drivers.ErrUnavailable)}
	}
	return nil
}

// RunnerArch implements drivers.ArchReporter: the architecture
// (kubernetes.io/arch) of the nodes the config's node selector admits,
// read from the nodes (a ClusterRole's list nodes); without that
// permission, the node selector's kubernetes.io/arch. Nodes of several
// architectures, or none known, is an error saying to pin one with the
// node selector.
func (d *driver) RunnerArch(ctx context.Context, raw config.Config) (string, error) {
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return "", err
	}
	if a := cfg.nodeSelector[corev1.LabelArchStable]; a != "" {
		arch, _ := qualification.NormalizeArch(a, "")
		return arch, nil
	}
	c, err := d.client(cfg)
	if err != nil {
		return "", err
	}
	nodes, err := c.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labels.Set(cfg.nodeSelector).String()})
	if err != nil {
		return "", fmt.Errorf("%s: the nodes' architecture: %w; or set node_selector %s", c.server, c.apiErr(c.target(cfg.namespace, ""), "list nodes", err), corev1.LabelArchStable)
	}
	var arches []string
	for _, n := range nodes.Items {
		a := n.Labels[corev1.LabelArchStable]
		if a == "" {
			a = n.Status.NodeInfo.Architecture
		}
		if a != "" && !slices.Contains(arches, a) {
			arches = append(arches, a)
		}
	}
	if len(arches) != 1 {
		return "", fmt.Errorf("kubernetes %s: the nodes the config admits have architectures [%s]: set node_selector %s to one: %w",
			c.server, strings.Join(arches, " "), corev1.LabelArchStable, drivers.ErrUnsupported)
	}
	arch, _ := qualification.NormalizeArch(arches[0], "")
	return arch, nil
}
