package kubernetes_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berthdev/berth"
	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	berthk8s "github.com/berthdev/berth/drivers/kubernetes"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/testenv"
	"github.com/berthdev/berth/internal/testimage"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
	"github.com/berthdev/berth/store/sqlite"
)

// operator acts for the tests of this file.
var operator = authz.Principal{ID: "ops", Role: authz.RoleLocalOperator}

// newSystem composes berth over the SQLite database at db with the
// Kubernetes driver and a secret store in dir (the kubeconfig is a secret
// field: a second process must read what the first stored).
func newSystem(t testing.TB, ctx context.Context, db, dir string, lo *lease.Options) *berth.System {
	t.Helper()
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := berth.New(ctx, &berth.Options{Stores: st.Stores(), Secrets: fileSecrets{dir: dir},
		Drivers: []drivers.Driver{berthk8s.New(nil)}, Leases: lo})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close(); st.Close() })
	return sys
}

// pods lists the pods of the test's namespace that berth manages.
func (e *env) pods(t testing.TB, ctx context.Context) []string {
	t.Helper()
	list, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "berth.managed=true"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name+" ("+string(p.Status.Phase)+", labels "+fmt.Sprint(p.Labels)+")")
	}
	return names
}

// A probe of a saved Kubernetes environment whose image is pinned by
// digest, through berth's lease manager on the real cluster: every stage
// passes, the platform is measured in the pod, the image identity is the
// container status's digest, the cleanup is confirmed (the pod read back
// NotFound), and the qualification is recorded for the company only.
func TestProbeQualifiesAPinnedImage(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	sys := newSystem(t, ctx, filepath.Join(dir, "berth.db"), dir, nil)
	v, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "pods", Driver: "kubernetes", Config: e.raw(nil)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := sys.Prober().Probe(ctx, operator, v.ID, probe.Request{Company: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || !res.PlatformQualificationRecorded || res.Platform.OS != "linux" || res.Platform.Arch == "" ||
		res.Cleanup == nil || !res.Cleanup.Confirmed || res.Isolation != "container" {
		t.Fatalf("probe: ok %t, recorded %t, platform %+v, cleanup %+v, isolation %q: %s", res.OK, res.PlatformQualificationRecorded,
			res.Platform, res.Cleanup, res.Isolation, res.Summary)
	}
	if got := res.ImageIdentity.String(); !strings.HasSuffix(got, "@"+e.img.Digest) {
		t.Errorf("the probe's image identity is %q, want the pinned digest %s", got, e.img.Digest)
	}
	if left := e.pods(t, ctx); len(left) != 0 {
		t.Errorf("the probe left pods: %v", left)
	}
	q, err := sys.Prober().Qualification(ctx, operator, v.ID, "acme")
	if err != nil || !q.Qualified || q.Platform == nil || q.Platform.OS != "linux" {
		t.Errorf("qualification for acme: %+v, %v", q, err)
	}
	other, err := sys.Prober().Qualification(ctx, operator, v.ID, "globex")
	if err != nil || other.Qualified {
		t.Errorf("acme's probe qualifies globex: %+v, %v", other, err)
	}
	t.Logf("probe: %s", res.Summary)
}

// A warm pool of two on the cluster: the pass fills it with running pods
// labelled as members; an acquisition adopts one (the lease runs in the
// member's pod) and execs in it; the release deletes that pod; the
// environment's delete drains the other member with a receipt, and no pod
// is left. (A member is adopted by the process that made it: the driver
// cannot resume a pod by id in another process, as it declares no reuse.)
func TestPoolOfPods(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	dir := t.TempDir()
	sys := newSystem(t, ctx, filepath.Join(dir, "berth.db"), dir, &lease.Options{ManualPoolRefill: true})
	v, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "pool", Driver: "kubernetes", Config: e.raw(nil),
		Pool: &environment.Pool{Size: 2}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sys.Leases().MaintainPools(ctx, operator)
	if err != nil || rep.Created != 2 {
		t.Fatalf("MaintainPools: %+v, %v", rep, err)
	}
	members, err := e.cs.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "berth.pool=member"})
	if err != nil {
		t.Fatal(err)
	}
	if len(members.Items) != 2 {
		t.Fatalf("%d member pods, want 2: %v", len(members.Items), e.pods(t, ctx))
	}
	for _, p := range members.Items {
		if p.Status.Phase != "Running" || p.Labels["berth.environment"] != v.ID || p.Labels["berth.lease"] == "" {
			t.Fatalf("member pod %s: %s, labels %v", p.Name, p.Status.Phase, p.Labels)
		}
	}
	began := time.Now()
	h, err := sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: v.ID, Run: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Exec(ctx, lease.Command{Argv: []string{"sh", "-c", "echo adopted"}})
	if err != nil || string(res.Stdout) != "adopted\n" {
		t.Fatalf("exec in the adopted member: %+v, %v", res, err)
	}
	took := time.Since(began)
	pod := h.Lease().ProviderLeaseID
	adopted := false
	for _, p := range members.Items {
		adopted = adopted || p.Name == pod
	}
	if !adopted {
		t.Fatalf("the acquisition made pod %s instead of adopting a member", pod)
	}
	if _, err := h.Release(ctx, lease.ReleaseOptions{Disposition: lease.Destroy}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{}); err == nil {
		t.Errorf("pod %s is still there after its release", pod)
	}
	cur, err := sys.Catalog().Get(ctx, operator, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Catalog().Delete(ctx, operator, v.ID, cur.Revision); err != nil {
		t.Fatalf("delete the environment (draining its pool): %v", err)
	}
	if left := e.pods(t, ctx); len(left) != 0 {
		t.Errorf("pods left after the drain: %v", left)
	}
	t.Logf("acquire from the warm pool to the first exec: %s", took.Round(time.Millisecond))
}

// crashChildEnv holds, as JSON, what TestMain's crash child needs: the
// child of TestKill9MidAcquisitionThenSweep.
const crashChildEnv = "BERTH_TEST_KUBE_CRASH"

type crashArgs struct {
	DB, Secrets, Environment string
}

// crashChild acquires a lease of the saved environment and blocks in it:
// the test kills it -9 while its pod pulls its image, which the test's
// registry holds back.
func crashChild(raw string) int {
	var a crashArgs
	if err := json.Unmarshal([]byte(raw), &a); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	st, err := sqlite.Open(ctx, a.DB)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sys, err := berth.New(ctx, &berth.Options{Stores: st.Stores(), Secrets: fileSecrets{dir: a.Secrets},
		Drivers: []drivers.Driver{berthk8s.New(nil)}, Leases: &lease.Options{ClaimGrace: time.Second}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = sys.Leases().Acquire(ctx, operator, lease.AcquireRequest{Company: "acme", EnvironmentID: a.Environment, Budget: 20 * time.Second})
	fmt.Fprintf(os.Stderr, "the acquisition returned (%v); it should have been killed\n", err)
	return 1
}

// kill -9 of a berth process in the middle of an acquisition on the
// cluster (its pod created, its image held back by the registry), then a
// sweep by another process once the dead acquisition's claim lapsed: the
// lease is failed with its cleanup confirmed and no pod is left.
func TestKill9MidAcquisitionThenSweep(t *testing.T) {
	t.Parallel() // one shared cluster; each test has a namespace of its own
	e := newEnv(t)
	ctx := testCtx(t)
	// A second image, whose layers the registry holds back while held is
	// set: the child's pod stays in its pull.
	var hold sync.Mutex
	held := make(chan struct{})
	reg := testenv.StartRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				hold.Lock()
				ch := held
				hold.Unlock()
				select {
				case <-ch:
				case <-r.Context().Done():
					return
				}
			}
			h.ServeHTTP(w, r)
		})
	})
	img := testimage.Busybox(t, reg, nil)
	release := sync.OnceFunc(func() { close(held) })
	t.Cleanup(release)

	dir := t.TempDir()
	db := filepath.Join(dir, "berth.db")
	sys := newSystem(t, ctx, db, dir, &lease.Options{ClaimGrace: time.Second})
	v, err := sys.Catalog().Create(ctx, operator, environment.CreateRequest{Name: "crash", Driver: "kubernetes",
		Config: e.raw(map[string]any{"image": img.Ref})})
	if err != nil {
		t.Fatal(err)
	}
	args, _ := json.Marshal(crashArgs{DB: db, Secrets: dir, Environment: v.ID})
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+string(args))
	var out bytes.Buffer
	child.Stdout, child.Stderr = &out, &out
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = child.Wait(); close(exited) }()
	for len(e.pods(t, ctx)) == 0 {
		select {
		case <-exited:
			t.Fatalf("the child ended before its pod was made: %s", out.String())
		case <-ctx.Done():
			t.Fatalf("no pod of the child's acquisition: %s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	left := e.pods(t, ctx)
	if len(left) != 1 {
		t.Fatalf("%d pods after the kill, want the dead acquisition's one: %v", len(left), left)
	}
	release()
	ls, err := sys.Leases().List(ctx, operator, lease.Filter{Environment: v.ID})
	if err != nil || len(ls) != 1 || ls[0].Status != lease.StatusStarting {
		t.Fatalf("the dead acquisition's record: %+v, %v; want one starting lease", ls, err)
	}
	// The sweep leaves the dead acquisition alone until its claim (its
	// budget and a second) lapsed, then fails it and deletes its pod.
	var rep berth.SweepReport
	for rep.Leases.Interrupted == 0 {
		if ctx.Err() != nil {
			t.Fatalf("no sweep interrupted the dead acquisition: %+v", rep)
		}
		time.Sleep(time.Second)
		if rep, err = sys.Sweep(ctx, operator); err != nil {
			t.Fatal(err)
		}
	}
	l, err := sys.Leases().Get(ctx, operator, ls[0].ID)
	if err != nil || l.Status != lease.StatusFailed || l.Cleanup != "confirmed" {
		t.Errorf("the lease after the sweep: %s, cleanup %s (%s), %v; want failed, confirmed", l.Status, l.Cleanup, l.CleanupEvidence, err)
	}
	if left := e.pods(t, ctx); len(left) != 0 {
		t.Errorf("pods left after the sweep: %v", left)
	}
}

// fileSecrets is a SecretStore in a directory, one file per version, so
// that two processes of a test share the secrets of one database.
type fileSecrets struct{ dir string }

func (s fileSecrets) path(id string, version int64) string {
	return filepath.Join(s.dir, fmt.Sprintf("secret-%s-v%d", id, version))
}

func (s fileSecrets) Put(_ context.Context, owner, field, value string) (config.SecretRef, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	ref := config.SecretRef{ID: hex.EncodeToString(b), Version: 1}
	return ref, os.WriteFile(s.path(ref.ID, 1), []byte(value), 0o600)
}

func (s fileSecrets) Replace(_ context.Context, ref config.SecretRef, value string) (config.SecretRef, error) {
	latest := int64(0)
	for v := int64(1); ; v++ {
		if _, err := os.Stat(s.path(ref.ID, v)); err != nil {
			break
		}
		latest = v
	}
	if latest == 0 {
		return config.SecretRef{}, fmt.Errorf("secret %s: %w", ref.ID, errcode.ErrNotFound)
	}
	next := config.SecretRef{ID: ref.ID, Version: latest + 1}
	return next, os.WriteFile(s.path(ref.ID, next.Version), []byte(value), 0o600)
}

func (s fileSecrets) Get(_ context.Context, ref config.SecretRef) (string, error) {
	b, err := os.ReadFile(s.path(ref.ID, ref.Version))
	if os.IsNotExist(err) {
		return "", fmt.Errorf("secret %s version %d: %w", ref.ID, ref.Version, errcode.ErrNotFound)
	}
	return string(b), err
}

func (s fileSecrets) Delete(_ context.Context, ref config.SecretRef) error {
	if ref.Version != 0 {
		if err := os.Remove(s.path(ref.ID, ref.Version)); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(s.dir, "secret-"+ref.ID+"-v*"))
	for _, f := range files {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}
