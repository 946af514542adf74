package kubecluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/berthdev/berth/internal/testenv"
)

// Version is the Kubernetes release the cluster runs.
const Version = "v1.37.2"

// BuildCommand is the command that builds the cluster's Kubernetes
// binaries into the tools cache (once; nothing once built).
const BuildCommand = "make kubernetes"

// KubectlCommand is the command that builds the release's kubectl beside
// them (the anchor of the driver's benchmark; the suite needs none).
const KubectlCommand = "make kubectl"

// Kubectl returns the path of the kubectl of the cluster's release, built
// beside its binaries (KubectlCommand), or skips t (fails it under
// BERTH_REQUIRE_REAL=1) when it is not built.
func Kubectl(t testing.TB) string {
	t.Helper()
	dir, err := binDir()
	if err == nil {
		p := filepath.Join(dir, "kubectl")
		if _, err = os.Stat(p); err == nil {
			return p
		}
		err = &missingError{"kubectl " + Version, "not in " + dir + ": run `" + KubectlCommand + "`"}
	}
	fail(t, err)
	return ""
}

// startTimeout bounds a start, from the lock taken to the node Ready.
const startTimeout = 3 * time.Minute

// lockPath and statePath are machine-wide: the cluster's ports are fixed,
// so one runs at a time per machine. The state file records a running
// cluster's directory and the host as it was before it, so that the next
// start cleans up after a test binary that died without its teardown.
const (
	lockPath  = "/tmp/berth-kubecluster.lock"
	statePath = "/tmp/berth-kubecluster.state"
)

// Cluster is a running single-node Kubernetes cluster: etcd, the control
// plane on 127.0.0.1:6443, a containerd of its own and a kubelet whose
// node is NodeName. Its methods are safe for concurrent use.
type Cluster struct {
	dir        layout
	bin        string // the directory of the Kubernetes binaries
	before     hostState
	after      hostState // the host when Stop had put it back
	kubeconfig []byte
	api        *apiClient
	lock       *os.File

	mu       sync.Mutex
	procs    []*process
	lastNode string // the node's taints and conditions when last read
	stopped  bool
}

// missingError is a component the cluster needs that this machine lacks:
// the test skips (or fails under BERTH_REQUIRE_REAL=1) with how to get it.
type missingError struct{ component, how string }

func (e *missingError) Error() string {
	return e.component + " is not available (" + e.how + ")"
}

var shared struct {
	sync.Mutex
	main bool
	c    *Cluster
	err  error
}

// Shared returns the test binary's shared cluster, starting it on the
// first call; Main stops it after the last test. It requires the package's
// TestMain to run the tests through Main (it fails t otherwise). A start
// waits for the machine-wide lock while another test binary's cluster
// runs. It skips t when the Kubernetes binaries (BuildCommand) or a Debian
// package is missing, or the test does not run as root (under
// BERTH_REQUIRE_REAL=1 it fails t instead), and fails t when the cluster
// does not become Ready: every call after a failed start does the same.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.main {
		t.Fatal("kubecluster.Shared needs the package's TestMain to be: func TestMain(m *testing.M) { os.Exit(kubecluster.Main(m)) }")
	}
	if shared.c == nil && shared.err == nil {
		shared.c, shared.err = start(t.Logf)
	}
	if shared.err != nil {
		fail(t, shared.err)
	}
	return shared.c
}

// Main runs the package's tests and then stops the shared cluster if a test
// started one (Shared), reporting on stderr anything its teardown could not
// put back (the exit code is then 1). It returns the exit code for
// os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(kubecluster.Main(m)) }
func Main(m *testing.M) int {
	shared.Lock()
	shared.main = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	if shared.c != nil {
		for _, err := range shared.c.Stop() {
			fmt.Fprintln(os.Stderr, "kubecluster:", err)
			code = max(code, 1)
		}
	}
	return code
}

// fail ends t for a start's err: a skip (or a failure under
// BERTH_REQUIRE_REAL=1) when something is missing, a failure otherwise.
func fail(t testing.TB, err error) {
	t.Helper()
	var m *missingError
	if errors.As(err, &m) {
		testenv.Missing(t, m.component, m.how, nil)
	}
	t.Fatalf("kubecluster: %v", err)
}

// Kubeconfig returns the cluster's admin kubeconfig (YAML, its
// certificates embedded; the user is in system:masters). The caller may
// modify the returned slice.
func (c *Cluster) Kubeconfig() []byte { return append([]byte(nil), c.kubeconfig...) }

// KubeconfigPath returns the path of the admin kubeconfig's file, which
// exists until the cluster stops.
func (c *Cluster) KubeconfigPath() string { return c.dir.kubeconfig("admin") }

// ContainerdSocket returns the path of the cluster's containerd socket (not
// Docker's), for ctr --address.
func (c *Cluster) ContainerdSocket() string { return c.dir.socket() }

// binDir finds the Kubernetes binaries in the tools cache ($BERTH_TOOLS,
// which the Makefile sets to its TOOLS, or the user cache's berth-tools):
// built with this Go version if there, else with any (they are programs,
// not libraries).
func binDir() (string, error) {
	tools := os.Getenv("BERTH_TOOLS")
	if tools == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", &missingError{"Kubernetes " + Version + " binaries", "no user cache directory: " + err.Error()}
		}
		tools = filepath.Join(cache, "berth-tools")
	}
	prefix := filepath.Join(tools, "kubernetes-"+Version+"-")
	candidates := []string{prefix + runtime.Version()}
	more, _ := filepath.Glob(prefix + "go*")
	candidates = append(candidates, more...)
	for _, d := range candidates {
		if strings.HasSuffix(d, ".src") || strings.HasSuffix(d, ".tmp") {
			continue
		}
		ok := true
		for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", &missingError{"Kubernetes " + Version + " binaries", "not in " + prefix + "*: run `" + BuildCommand + "`"}
}

// prerequisites checks what the machine must have.
func prerequisites() error {
	if os.Geteuid() != 0 {
		return &missingError{"a Kubernetes cluster", "its kubelet and containerd need root: run the test as root"}
	}
	for _, p := range []struct{ file, pkg string }{
		{"etcd", "etcd-server"}, {"containerd", "containerd"}, {"ctr", "containerd"}, {"runc", "runc"},
		{"/usr/lib/cni/bridge", "containernetworking-plugins"}, {"conntrack", "conntrack"},
		{"iptables", "iptables"}, {"ip", "iproute2"},
	} {
		if _, err := exec.LookPath(p.file); err != nil {
			return &missingError{p.file + " (Debian package " + p.pkg + ")", "run `make prereqs`"}
		}
	}
	return nil
}

// state is the record of a running cluster in statePath.
type state struct {
	Base   string    `json:"base"`
	Before hostState `json:"before"`
}

// start brings a cluster up; Shared calls it once per test binary.
func start(logf func(string, ...any)) (_ *Cluster, err error) {
	if err := prerequisites(); err != nil {
		return nil, err
	}
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	lock, err := takeLock(logf)
	if err != nil {
		return nil, err
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := recoverStale(ctx, logf); err != nil {
		unlock(lock)
		return nil, err
	}
	for _, port := range []int{2379, 2380, 6443, 10248, 10250, 10257, 10259} {
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
			unlock(lock)
			return nil, fmt.Errorf("port %d on 127.0.0.1 is taken (by a cluster not started by kubecluster?): %w", port, err)
		} else {
			ln.Close()
		}
	}
	base, err := os.MkdirTemp("", "berth-kube-")
	if err != nil {
		unlock(lock)
		return nil, err
	}
	c := &Cluster{dir: layout{base}, bin: bin, lock: lock}
	c.before = snapshotHost(ctx, base)
	st, _ := json.Marshal(state{Base: base, Before: c.before})
	if err := os.WriteFile(statePath, st, 0o600); err != nil {
		unlock(lock)
		return nil, err
	}
	defer func() {
		if err != nil {
			if kept, kerr := keepLogs(c.dir); kerr == nil {
				err = fmt.Errorf("%w (the components' logs are kept in %s)", err, kept)
			}
			if errs := c.Stop(); len(errs) > 0 {
				err = fmt.Errorf("%w; its teardown: %v", err, errors.Join(errs...))
			}
		}
	}()
	if err := c.bringUp(ctx); err != nil {
		if perr := c.exited(); perr != nil {
			return nil, fmt.Errorf("start the cluster: %w; %v", err, perr)
		}
		return nil, fmt.Errorf("start the cluster: %w; the end of the kubelet's log:\n%s", err, c.logTail("kubelet", 30))
	}
	logf("kubecluster: Kubernetes %s Ready in %s (binaries %s, files %s)", Version, time.Since(began).Round(time.Millisecond), bin, base)
	return c, nil
}

// bringUp writes the configuration and starts every component, then waits
// until the node is Ready and schedulable.
func (c *Cluster) bringUp(ctx context.Context) error {
	d := c.dir
	if err := os.MkdirAll(d.pki(), 0o700); err != nil {
		return err
	}
	if _, err := newPKI(d.pki()); err != nil {
		return err
	}
	if err := d.writeConfigs(); err != nil {
		return err
	}
	var err error
	if c.kubeconfig, err = os.ReadFile(d.kubeconfig("admin")); err != nil {
		return err
	}
	if c.api, err = newAPIClient(d); err != nil {
		return err
	}
	if err := makeCgroups(); err != nil {
		return err
	}
	pause := make(chan error, 1)
	go func() { pause <- c.buildPause(ctx) }()

	pki := d.pki()
	if err := c.startProcess("etcd", "etcd", "--name", "default", "--data-dir", d.path("etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380", "--snapshot-count", "10000"); err != nil {
		return err
	}
	if err := c.startProcess("containerd", "containerd", "--config", d.containerdConfig()); err != nil {
		return err
	}
	if err := c.startProcess("kube-apiserver", filepath.Join(c.bin, "kube-apiserver"),
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", "127.0.0.1", "--secure-port", "6443", "--advertise-address", "127.0.0.1",
		"--endpoint-reconciler-type", "none",
		"--cert-dir", d.path("apiserver-certs"),
		"--client-ca-file", filepath.Join(pki, "ca.crt"),
		"--tls-cert-file", filepath.Join(pki, "apiserver.crt"), "--tls-private-key-file", filepath.Join(pki, "apiserver.key"),
		"--kubelet-client-certificate", filepath.Join(pki, "apiserver-kubelet-client.crt"),
		"--kubelet-client-key", filepath.Join(pki, "apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority", filepath.Join(pki, "ca.crt"),
		"--kubelet-preferred-address-types", "Hostname,InternalIP",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/24",
		"--authorization-mode", "Node,RBAC",
		"--profiling=false"); err != nil {
		return err
	}
	// The controller manager and the scheduler once the API server is
	// ready: they exit when RBAC's bootstrap roles are not there yet.
	if err := c.waitFor(ctx, "the API server's /readyz", func() (bool, error) {
		code, _, err := c.api.do(ctx, "GET", "/readyz", nil)
		return err == nil && code == 200, nil
	}); err != nil {
		return err
	}
	for _, comp := range []struct{ name, kubeconfig, port string }{
		{"kube-controller-manager", "controller-manager", "10257"}, {"kube-scheduler", "scheduler", "10259"},
	} {
		args := []string{"--kubeconfig", d.kubeconfig(comp.kubeconfig),
			"--authentication-kubeconfig", d.kubeconfig(comp.kubeconfig),
			"--authorization-kubeconfig", d.kubeconfig(comp.kubeconfig),
			"--bind-address", "127.0.0.1", "--secure-port", comp.port, "--leader-elect=false", "--profiling=false"}
		if comp.name == "kube-controller-manager" {
			args = append(args, "--cert-dir", d.path("controller-manager-certs"),
				"--service-account-private-key-file", filepath.Join(pki, "sa.key"),
				"--root-ca-file", filepath.Join(pki, "ca.crt"),
				"--use-service-account-credentials=false")
		}
		if err := c.startProcess(comp.name, filepath.Join(c.bin, comp.name), args...); err != nil {
			return err
		}
	}
	// The kubelet once containerd answers and holds the sandbox image.
	if err := c.waitFor(ctx, "containerd to answer on "+d.socket(), func() (bool, error) {
		_, err := run(ctx, "ctr", "--address", d.socket(), "version")
		return err == nil, nil
	}); err != nil {
		return err
	}
	if err := <-pause; err != nil {
		return fmt.Errorf("the sandbox image: %w", err)
	}
	if err := c.startProcess("kubelet", filepath.Join(c.bin, "kubelet"),
		"--config", d.path("kubelet.yaml"), "--kubeconfig", d.kubeconfig("kubelet"),
		"--hostname-override", NodeName, "--root-dir", d.kubeletRoot(), "--cert-dir", d.path("kubelet-pki")); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "node "+NodeName+" Ready without taints", c.nodeReady(ctx)); err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("%w (the node had %s)", err, c.lastNode)
	}
	return c.waitFor(ctx, "the default service account", func() (bool, error) {
		code, _, err := c.api.do(ctx, "GET", "/api/v1/namespaces/default/serviceaccounts/default", nil)
		return err == nil && code == 200, nil
	})
}

// nodeReady is a wait condition: the node is Ready and has no taint (the
// node lifecycle controller removes not-ready once the node is Ready).
func (c *Cluster) nodeReady(ctx context.Context) func() (bool, error) {
	return func() (bool, error) {
		code, body, err := c.api.do(ctx, "GET", "/api/v1/nodes/"+NodeName, nil)
		if err != nil || code != 200 {
			return false, nil
		}
		var node struct {
			Spec struct {
				Taints []struct{ Key, Effect string } `json:"taints"`
			} `json:"spec"`
			Status struct {
				Conditions []struct{ Type, Status string } `json:"conditions"`
			} `json:"status"`
		}
		if err := json.Unmarshal(body, &node); err != nil {
			return false, err
		}
		c.mu.Lock()
		c.lastNode = fmt.Sprintf("taints %v, conditions %v", node.Spec.Taints, node.Status.Conditions)
		c.mu.Unlock()
		if len(node.Spec.Taints) > 0 {
			return false, nil
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == "Ready" {
				return cond.Status == "True", nil
			}
		}
		return false, nil
	}
}

// waitFor polls cond until it holds, a component exits, or ctx ends.
func (c *Cluster) waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if err := c.exited(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the cluster and puts the host back: it ends the kubelet and
// the control plane, deletes the pods' containers through its containerd,
// kills whatever of the cluster survives (containerd shims included, by
// PID), unmounts what the cluster mounted, deletes its bridge, cgroups and
// iptables chains, removes the host directories that were absent before,
// writes back the sysctls the kubelet changed, removes its files and
// releases the machine-wide lock. It returns an error for each thing it
// could not do and for each difference left between the host now and
// before the start (none: the host is as it was). Calls after the first
// return nil. Main calls it after the package's tests.
func (c *Cluster) Stop() []error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return nil
	}
	c.stopped = true
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := c.teardown(ctx, procs)
	c.mu.Lock()
	lock := c.lock
	c.lock = nil
	c.mu.Unlock()
	if lock != nil {
		unlock(lock)
	}
	return errs
}

func (c *Cluster) teardown(ctx context.Context, procs []*process) []error {
	var errs []error
	byName := map[string]*process{}
	for _, p := range procs {
		byName[p.name] = p
	}
	// The kubelet and the control plane, at once.
	var wg sync.WaitGroup
	for _, n := range []string{"kubelet", "kube-scheduler", "kube-controller-manager", "kube-apiserver"} {
		if p := byName[n]; p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); stopProcess(p, 10*time.Second) }()
		}
	}
	wg.Wait()
	// The pods' containers, through containerd: a task deleted ends its
	// shim, which removes its socket and unmounts the container's root.
	if p := byName["containerd"]; p != nil {
		if out, err := run(ctx, "ctr", "--address", c.dir.socket(), "-n", "k8s.io", "tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(string(out)) {
				_, _ = run(ctx, "ctr", "--address", c.dir.socket(), "-n", "k8s.io", "tasks", "delete", "-f", id)
			}
		}
	}
	if err := killCgroup(); err != nil {
		errs = append(errs, err)
	}
	for _, n := range []string{"containerd", "etcd"} {
		if p := byName[n]; p != nil {
			stopProcess(p, 10*time.Second)
		}
	}
	errs = append(errs, cleanupDir(ctx, c.dir.base, c.before)...)
	if err := os.Remove(statePath); err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	c.after = snapshotHost(ctx, c.dir.base)
	for _, d := range c.before.diff(c.after) {
		errs = append(errs, fmt.Errorf("the host differs after the cluster's teardown: %s", d))
	}
	return errs
}

// cleanupDir ends every process that names base (the shims of the
// cluster's containerd; any component left), removes the shims' sockets,
// puts the host back as before and removes base.
func cleanupDir(ctx context.Context, base string, before hostState) []error {
	var errs []error
	if _, err := killMentioning(base); err != nil {
		errs = append(errs, err)
	}
	if err := killCgroup(); err != nil {
		errs = append(errs, err)
	}
	// A shim killed leaves its socket, named in its bundle's address file.
	addrs, _ := filepath.Glob(filepath.Join(base, "containerd/state/io.containerd.runtime.v2.task/*/*/address"))
	for _, a := range addrs {
		if b, err := os.ReadFile(a); err == nil {
			sock := strings.TrimPrefix(strings.TrimSpace(string(b)), "unix://")
			if strings.HasPrefix(sock, "/run/containerd/s/") {
				_ = os.Remove(sock)
			}
		}
	}
	errs = append(errs, restoreHost(ctx, base, before)...)
	if err := os.RemoveAll(base); err != nil {
		errs = append(errs, fmt.Errorf("remove the cluster's files: %w", err))
	}
	return errs
}
