package kubernetes_test

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/drivertest"
	"github.com/berthdev/berth/internal/testenv/kubecluster"
)

// BenchmarkLifecycle measures one pod's acquire (create to Running),
// exec of "true" and release (delete to NotFound read back) through the
// driver and, as the anchors, through kubectl (kubectl run then kubectl
// wait for Ready, kubectl exec, kubectl delete --wait: each a process of
// its own, as an operator's script runs them) and through client-go
// directly with the same steps as the driver (create, watch to Running,
// the same executor, delete, get until NotFound). Metrics: ms per step;
// compare the rows of one run.
//
//	go test ./drivers/kubernetes -run '^$' -bench Lifecycle -benchtime 10x
func BenchmarkLifecycle(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	cfg := e.config(b, nil)
	b.Run("driver", func(b *testing.B) {
		var acq, ex, rel time.Duration
		for b.Loop() {
			t0 := time.Now()
			sb, err := e.drv.Acquire(ctx, cfg, drivers.AcquireRequest{LeaseID: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if res, err := sb.Exec(ctx, drivers.Command{Argv: []string{"true"}}); err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
			t2 := time.Now()
			if r, err := sb.Release(ctx, drivers.Destroy); err != nil || !r.Confirmed {
				b.Fatal(r, err)
			}
			acq, ex, rel = acq+t1.Sub(t0), ex+t2.Sub(t1), rel+time.Since(t2)
		}
		report(b, acq, ex, rel)
	})
	b.Run("kubectl", func(b *testing.B) { kubectlLifecycle(b, e) })
	b.Run("client-go", func(b *testing.B) {
		rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(e.kube))
		if err != nil {
			b.Fatal(err)
		}
		pods := e.cs.CoreV1().Pods(e.ns)
		var acq, ex, rel time.Duration
		n := 0
		for b.Loop() {
			n++
			name := fmt.Sprintf("anchor-%d-%d", time.Now().UnixNano()%1e9, n)
			no := false
			grace := int64(2)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever, AutomountServiceAccountToken: &no, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "c", Image: e.img.Ref, Command: []string{"sh", "-c", "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done"}}}}}
			t0 := time.Now()
			created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: created.ResourceVersion})
			if err != nil {
				b.Fatal(err)
			}
			for ev := range w.ResultChan() {
				if p, ok := ev.Object.(*corev1.Pod); ok && p.Status.Phase == corev1.PodRunning {
					break
				}
			}
			w.Stop()
			t1 := time.Now()
			u := e.cs.CoreV1().RESTClient().Post().Namespace(e.ns).Resource("pods").Name(name).SubResource("exec").
				VersionedParams(&corev1.PodExecOptions{Container: "c", Command: []string{"true"}, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
			ws, _ := remotecommand.NewWebSocketExecutor(rc, "GET", u.String())
			spdy, _ := remotecommand.NewSPDYExecutor(rc, "POST", u)
			exe, _ := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
			if err := exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: io.Discard, Stderr: io.Discard}); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			for {
				if _, err := pods.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			acq, ex, rel = acq+t1.Sub(t0), ex+t2.Sub(t1), rel+time.Since(t2)
		}
		report(b, acq, ex, rel)
	})
}

// kubectlLifecycle is BenchmarkLifecycle's kubectl row.
func kubectlLifecycle(b *testing.B, e *env) {
	kubectl := kubecluster.Kubectl(b)
	kc := e.c.KubeconfigPath()
	run := func(args ...string) {
		b.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kc, "--namespace", e.ns}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	var acq, ex, rel time.Duration
	n := 0
	for b.Loop() {
		n++
		name := fmt.Sprintf("kubectl-%d-%d", time.Now().UnixNano()%1e9, n)
		t0 := time.Now()
		run("run", name, "--image", e.img.Ref, "--restart", "Never",
			"--overrides", `{"spec":{"automountServiceAccountToken":false,"terminationGracePeriodSeconds":2}}`,
			"--command", "--", "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 86400 & wait $!; done")
		run("wait", "--for", "condition=Ready", "--timeout", "2m", "pod/"+name)
		t1 := time.Now()
		run("exec", name, "--", "true")
		t2 := time.Now()
		run("delete", "pod", name, "--wait")
		acq, ex, rel = acq+t1.Sub(t0), ex+t2.Sub(t1), rel+time.Since(t2)
	}
	report(b, acq, ex, rel)
}

func report(b *testing.B, acq, ex, rel time.Duration) {
	n := float64(b.N)
	b.ReportMetric(float64(acq.Milliseconds())/n, "acquire-ms")
	b.ReportMetric(float64(ex.Microseconds())/1000/n, "exec-ms")
	b.ReportMetric(float64(rel.Milliseconds())/n, "release-ms")
}

// BenchmarkConformance runs the suite's benchmarks (exec, and acquire
// exec release against the exec anchor).
func BenchmarkConformance(b *testing.B) {
	e := newEnv(b)
	cfg := e.config(b, nil)
	drivertest.RunBenchmarks(b, func(context.Context, testing.TB) (drivertest.Harness, error) {
		return &harness{e: e, cfg: cfg}, nil
	})
}
