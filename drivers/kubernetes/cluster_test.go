package kubernetes_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/drivertest"
	berthk8s "github.com/berthdev/berth/drivers/kubernetes"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testenv/kubecluster"
	"github.com/berthdev/berth/internal/testimage"
)

// TestMain stops the shared cluster after the package's tests and removes
// the runner binary that RunnerBinarySum built, if any. Run as the child
// of TestKill9MidAcquisitionThenSweep, the test binary acquires a lease
// instead, until it is killed.
func TestMain(m *testing.M) {
	if raw := os.Getenv(crashChildEnv); raw != "" {
		os.Exit(crashChild(raw))
	}
	code := kubecluster.Main(m)
	testenv.RemoveRunnerBinary()
	os.Exit(code)
}

// env is one test's cluster (shared by the package), namespace, loopback
// registry and busybox image pinned by digest.
type env struct {
	c    *kubecluster.Cluster
	ns   string
	reg  *testenv.Registry
	img  testimage.Image
	drv  berthk8s.Driver
	cs   *kubernetes.Clientset
	kube string // the admin kubeconfig
}

func newEnv(t testing.TB) *env {
	t.Helper()
	c := kubecluster.Shared(t)
	reg := testenv.StartRegistry(t, nil)
	img := testimage.Busybox(t, reg, nil)
	e := &env{c: c, ns: c.Namespace(t, "kdriver"), reg: reg, img: img, drv: berthk8s.New(nil), kube: string(c.Kubeconfig())}
	t.Cleanup(func() { _ = e.drv.Close() })
	rc, err := clientcmd.RESTConfigFromKubeConfig(c.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if e.cs, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	return e
}

// raw is the test's config before normalization, with overrides.
func (e *env) raw(overrides map[string]any) map[string]any {
	raw := map[string]any{"kubeconfig": e.kube, "namespace": e.ns, "image": e.img.Ref, "startup_timeout": "2m",
		"labels": map[string]any{"test.berth/run": e.ns}}
	for k, v := range overrides {
		raw[k] = v
	}
	return raw
}

func (e *env) config(t testing.TB, overrides map[string]any) config.Config {
	t.Helper()
	cfg, err := e.drv.Schema().Normalize(e.raw(overrides))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// harness is the conformance harness: one env per suite run.
type harness struct {
	e   *env
	cfg config.Config
}

var (
	_ drivertest.RunnerHarness      = (*harness)(nil)
	_ drivertest.HostProcessHarness = (*harness)(nil)
	_ drivertest.FailureHarness     = (*harness)(nil)
	_ drivertest.ParallelHarness    = (*harness)(nil)
	_ drivertest.IsolationHarness   = (*harness)(nil)
)

func (h *harness) Driver() drivers.Driver { return h.e.drv }
func (h *harness) Config() config.Config  { return h.cfg.Clone() }
func (h *harness) Close()                 {}

// RunnerSpec implements drivertest.RunnerHarness: the reference runner,
// built static once per test binary (the node is this machine).
func (h *harness) RunnerSpec(tb testing.TB) drivers.RunnerSpec {
	p, sum := testenv.RunnerBinarySum(tb)
	return drivers.RunnerSpec{Binary: p, SHA256: sum}
}

// RunnersAreHostProcesses implements drivertest.HostProcessHarness: the
// cluster's one node is this machine, so the pods' processes are in its
// /proc.
func (h *harness) RunnersAreHostProcesses() bool { return true }

// Parallel implements drivertest.ParallelHarness: one node on 2 cores.
func (h *harness) Parallel() int { return 4 }

// HostKernel implements drivertest.IsolationHarness: the node is this
// machine.
func (h *harness) HostKernel(context.Context) (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// Broken implements drivertest.FailureHarness against the real cluster: a
// server nothing listens on (the control plane: ErrUnavailable), a token
// the API server does not know (401), the kubeconfig as an unresolved
// secret reference, a digest the registry does not hold.
func (h *harness) Broken(f drivertest.Failure) (drivertest.Broken, bool) {
	raw := h.e.raw(nil)
	switch f {
	case drivertest.FailUnreachable:
		raw["kubeconfig"] = rewriteKubeconfig(h.e.kube, "https://127.0.0.1:1", "")
		return drivertest.Broken{Config: raw, Layer: drivers.ErrUnavailable}, true
	case drivertest.FailBadCredentials:
		raw["kubeconfig"] = rewriteKubeconfig(h.e.kube, "", "not-a-token-the-cluster-knows")
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailMissingCredentials:
		raw["kubeconfig"] = map[string]any{"$secret": "conformance-kubeconfig", "version": 1}
		return drivertest.Broken{Config: raw}, true
	case drivertest.FailUnknownImage:
		raw["image"] = h.e.reg.Host + "/berth/no-such-image@sha256:" + strings.Repeat("0", 64)
		return drivertest.Broken{Config: raw}, true
	}
	return drivertest.Broken{}, false
}

// rewriteKubeconfig returns kc with its server replaced (when server is
// not "") and its user's credentials replaced by token (when not "").
func rewriteKubeconfig(kc, server, token string) string {
	c, err := clientcmd.Load([]byte(kc))
	if err != nil {
		panic(err)
	}
	for _, cl := range c.Clusters {
		if server != "" {
			cl.Server = server
		}
	}
	for _, u := range c.AuthInfos {
		if token != "" {
			u.ClientCertificateData, u.ClientKeyData, u.Token = nil, nil, token
		}
	}
	b, err := clientcmd.Write(*c)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestConformance(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	cfg := e.config(t, nil)
	drivertest.RunConformanceTests(t, func(context.Context, testing.TB) (drivertest.Harness, error) {
		return &harness{e: e, cfg: cfg}, nil
	})
	// No pod is left in the namespace (a pod an Acquire gave up on is
	// deleted without waiting: give it a moment to go).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var left []drivers.SandboxInfo
	for {
		var err error
		if left, err = e.drv.(drivers.Lister).List(ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range left {
		t.Errorf("pod %s (%s) left after the suite", p.ProviderLeaseID, p.State)
	}
}
