package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
)

// roles numbers the test's service accounts and roles.
var roles atomic.Int64

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func (e *env) acquire(t *testing.T, ctx context.Context, cfg config.Config, req drivers.AcquireRequest) drivers.Sandbox {
	t.Helper()
	sb, err := e.drv.Acquire(ctx, cfg, req)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = sb.Release(ctx, drivers.Destroy)
	})
	return sb
}

// The hardening is what the API server stored and what a task inside the
// pod sees, not what the driver meant to ask for: no service account
// token, no capabilities, no_new_privs, no secret in the pod.
func TestPodHardeningAsTheClusterHasIt(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(t, map[string]any{"env": map[string]any{"API_TOKEN": "s3cret-env-value"}})
	sb := e.acquire(t, ctx, cfg, drivers.AcquireRequest{LeaseID: "lease-hardening"})
	pod, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, sb.ID(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	if *pod.Spec.AutomountServiceAccountToken || pod.Spec.HostNetwork || pod.Spec.HostPID || pod.Spec.HostIPC ||
		*sc.AllowPrivilegeEscalation || *sc.Privileged || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("stored pod is not hardened: %+v / %+v", pod.Spec, sc)
	}
	if pod.Labels["berth.managed"] != "true" || pod.Labels["berth.lease"] != "lease-hardening" {
		t.Errorf("labels %v", pod.Labels)
	}
	raw, err := e.cs.CoreV1().RESTClient().Get().Namespace(e.ns).Resource("pods").Name(sb.ID()).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("s3cret-env-value")) || bytes.Contains(raw, []byte("API_TOKEN")) {
		t.Errorf("the pod as the API server has it holds the env's secret")
	}
	evs, err := e.cs.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if strings.Contains(ev.Message, "s3cret-env-value") {
			t.Errorf("event %s holds the env's secret", ev.Name)
		}
	}
	res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c",
		`grep -E '^(CapEff|CapPrm|NoNewPrivs)' /proc/self/status; ls /var/run/secrets/kubernetes.io/serviceaccount 2>&1; echo "tok=$API_TOKEN"`}})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1", "No such file", "tok=s3cret-env-value"} {
		if !strings.Contains(out, want) {
			t.Errorf("inside the pod: %q lacks %q", out, want)
		}
	}
}

// A pod that cannot be scheduled fails the acquisition with the
// scheduler's reason, and is deleted.
func TestUnschedulablePodFailsWithItsReason(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(t, map[string]any{"node_selector": map[string]any{"berth.test/no-such-node": "x"}, "startup_timeout": "4s"})
	var id string
	_, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{Allocated: func(_ context.Context, pid string) error { id = pid; return nil }})
	if err == nil {
		t.Fatal("Acquire of an unschedulable pod succeeded")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "not scheduled") {
		t.Errorf("err = %v; want the deadline with the scheduler's reason", err)
	}
	if msg := errcode.MessageOf(err); !strings.Contains(msg, "did not start in time") {
		t.Errorf("sentence for a person: %q", msg)
	}
	waitGone(t, ctx, e, id)
}

func waitGone(t *testing.T, ctx context.Context, e *env, name string) {
	t.Helper()
	for {
		_, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pod %s still there: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A pod that will not go (a finalizer) is no confirmed release: the error
// names the finalizer; once it is removed, destroy by id confirms.
func TestPodThatWillNotDieIsNoReceipt(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	cfg := e.config(t, nil)
	sb := e.acquire(t, ctx, cfg, drivers.AcquireRequest{LeaseID: "lease-finalizer"})
	patch := []byte(`{"metadata":{"finalizers":["berth.test/hold"]}}`)
	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(ctx, sb.ID(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	defer cancel()
	r, err := sb.Release(rctx, drivers.Destroy)
	if err == nil || r.Proves(sb.ID(), drivers.Destroy) {
		t.Fatalf("Release of a pod held by a finalizer: %+v, %v; want an error and no proof", r, err)
	}
	if !strings.Contains(errcode.MessageOf(err), "berth.test/hold") {
		t.Errorf("the sentence does not name the finalizer: %q (%v)", errcode.MessageOf(err), err)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Patch(ctx, sb.ID(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err = e.drv.(drivers.Destroyer).Destroy(ctx, cfg, sb.ID())
	if err != nil || !r.Proves(sb.ID(), drivers.Destroy) {
		t.Errorf("Destroy by id after the finalizer went: %+v, %v", r, err)
	}
}

// Credentials that may not exec make the environment unavailable, the
// sentence naming the permission, before anything is created.
func TestForbiddenExecMakesTheEnvironmentUnavailable(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	kc := e.roleKubeconfig(t, ctx, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
		Verbs: []string{"create", "get", "list", "watch", "delete"}}})
	cfg := e.config(t, map[string]any{"kubeconfig": kc})
	err := e.drv.(drivers.HealthChecker).CheckHealth(ctx, cfg)
	if !errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(errcode.MessageOf(err), "create pods/exec") {
		t.Fatalf("CheckHealth without pods/exec: %v (%q); want unavailable naming create pods/exec", err, errcode.MessageOf(err))
	}
	full := e.roleKubeconfig(t, ctx, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/exec"},
		Verbs: []string{"create", "get", "list", "watch", "delete"}}})
	if err := e.drv.(drivers.HealthChecker).CheckHealth(ctx, e.config(t, map[string]any{"kubeconfig": full})); err != nil {
		t.Errorf("CheckHealth with the Role docs/kubernetes.md lists: %v", err)
	}
}

// roleKubeconfig makes a service account bound to a Role of rules in the
// test's namespace and returns a kubeconfig with a token of it.
func (e *env) roleKubeconfig(t *testing.T, ctx context.Context, rules []rbacv1.PolicyRule) string {
	t.Helper()
	name := fmt.Sprintf("berth-role-%d", roles.Add(1))
	rbac := e.cs.RbacV1().Roles(e.ns)
	if _, err := rbac.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: e.ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := e.cs.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, name, &authv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rewriteKubeconfig(e.kube, "", tr.Status.Token)
}

// A command's output through Exec and Start arrives whole, proven by the
// wrapper's end marks (which never reach the caller), and a stream whose
// marks never come is an error wrapping ErrTransient, not a success: here
// the task kills its wrapper, as a cut stream would leave it.
func TestExecOutputEndIsProven(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	sb := e.acquire(t, ctx, e.config(t, nil), drivers.AcquireRequest{LeaseID: "lease-endmark"})

	const size = 8 << 20
	res, err := sb.Exec(ctx, drivers.Command{OutputLimit: 2 * size, Argv: []string{"sh", "-c",
		fmt.Sprintf("head -c %d /dev/zero; head -c %d /dev/zero | tr '\\000' e >&2; exit 3", size, size/2)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != size || bytes.Count(res.Stdout, []byte{0}) != size || len(res.Stderr) != size/2 ||
		bytes.Count(res.Stderr, []byte("e")) != size/2 || res.ExitCode != 3 || res.Truncated {
		t.Fatalf("Exec: %d bytes of stdout, %d of stderr, exit %d, truncated %v; want %d zeros, %d e's, exit 3",
			len(res.Stdout), len(res.Stderr), res.ExitCode, res.Truncated, size, size/2)
	}

	var out bytes.Buffer
	p, err := sb.(drivers.StreamExecer).Start(ctx, drivers.Command{Argv: []string{"printf", "a\\000b"}}, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 || out.String() != "a\x00b" {
		t.Fatalf("Start: %q, %+v, %v; want %q, exit 0", out.String(), res, err, "a\x00b")
	}

	res, err = sb.Exec(ctx, drivers.Command{Argv: []string{"sh", "-c", "echo before; kill -KILL $PPID"}})
	if !errors.Is(err, drivers.ErrTransient) || !strings.Contains(fmt.Sprint(err), "did not arrive") {
		t.Fatalf("Exec whose wrapper was killed: %+v, %v; want an error wrapping ErrTransient", res, err)
	}
	if res == nil || string(res.Stdout) != "before\n" {
		t.Fatalf("Exec whose wrapper was killed: result %+v; want the output that arrived", res)
	}
}
