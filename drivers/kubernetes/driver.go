package kubernetes

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
)

// driverName is the driver's name.
const driverName = "kubernetes"

// Options configures the driver. Nil means defaults.
type Options struct {
	// Logger receives debug logs; nil discards them. Secrets (the
	// kubeconfig, the env values) are never logged.
	Logger *slog.Logger
}

// Driver is the Kubernetes driver that New returns: a drivers.Driver
// whose sandboxes are pods. It also implements drivers.Lister,
// drivers.Destroyer, drivers.HealthChecker, drivers.ArchReporter and
// drivers.IsolationDeclarer (reach them with drivers.DriverAs); its
// sandboxes implement drivers.StreamExecer, drivers.Terminal,
// drivers.ImageReporter and drivers.Files. It is safe for concurrent use.
type Driver interface {
	drivers.Driver
	// Close drops the driver's API clients (a drivers.Registry's Close
	// calls it). Sandboxes obtained before must not be used afterwards.
	Close() error
}

// New returns a Kubernetes driver. It does no I/O: clusters are contacted
// on first use.
func New(opts *Options) Driver { return newDriver(opts) }

// driver runs sandboxes as pods. It is safe for concurrent use.
type driver struct {
	schema *config.Schema
	log    *slog.Logger

	mu      sync.Mutex
	clients map[string]*cluster // by clusterKey
}

var (
	_ drivers.Driver            = (*driver)(nil)
	_ drivers.Lister            = (*driver)(nil)
	_ drivers.Destroyer         = (*driver)(nil)
	_ drivers.HealthChecker     = (*driver)(nil)
	_ drivers.ArchReporter      = (*driver)(nil)
	_ drivers.IsolationDeclarer = (*driver)(nil)
	_ io.Closer                 = (*driver)(nil)
)

func newDriver(opts *Options) *driver {
	if opts == nil {
		opts = &Options{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &driver{schema: newSchema(), log: log, clients: map[string]*cluster{}}
}

// Name returns "kubernetes".
func (d *driver) Name() string { return driverName }

// Capabilities declares exec, stream exec, reattach (Resume reopens a
// running pod by name from any process; reuse is not declared: a pod
// cannot be stopped and started again), list, destroy by id, image
// identity, terminal, files and runner ingress (see the package doc). No
// I/O.
func (d *driver) Capabilities() drivers.Capabilities {
	return drivers.Capabilities{
		Kind: drivers.KindSandbox,
		Declared: drivers.NewSet(drivers.CapExec, drivers.CapStreamExec, drivers.CapReattach, drivers.CapList, drivers.CapDestroyByID,
			drivers.CapImageIdentity, drivers.CapTerminal, drivers.CapFiles, drivers.CapRunnerIngress),
		StartupBudget: defaultStartupTimeout,
	}
}

// Schema returns the config schema (the same pointer on every call).
func (d *driver) Schema() *config.Schema { return d.schema }

// Isolation implements drivers.IsolationDeclarer without I/O: gvisor for
// a runtime_class_name of "gvisor" or "runsc" (GKE Sandbox's and the
// usual names of a RuntimeClass whose handler is runsc; Acquire refuses
// one whose handler it reads as another), container otherwise.
func (d *driver) Isolation(cfg config.Config) drivers.Isolation {
	if gvisorClass(cfg.String(fieldRuntimeClass)) {
		return drivers.IsolationGVisor
	}
	return drivers.IsolationContainer
}

func gvisorClass(name string) bool { return name == "gvisor" || name == "runsc" }

// Close drops the driver's clients.
func (d *driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.clients)
	return nil
}

// cluster is one API server reached with one set of credentials.
type cluster struct {
	rest   *rest.Config
	cs     *kubernetes.Clientset
	server string // the API server's URL, without user info: errors name it
}

// clusterKey identifies a kubeconfig and context without holding either's
// secret: a SHA-256 of both.
func clusterKey(cfg *settings) string {
	h := sha256.New()
	h.Write([]byte(cfg.kubeconfig))
	h.Write([]byte{0})
	h.Write([]byte(cfg.context))
	return hex.EncodeToString(h.Sum(nil))
}

// client returns the (cached) client of cfg's cluster: from its kubeconfig
// (inline data only, vetKubeconfig) or, without one, in-cluster.
func (d *driver) client(cfg *settings) (*cluster, error) {
	key := clusterKey(cfg)
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.clients[key]; ok {
		return c, nil
	}
	var rc *rest.Config
	var err error
	if cfg.kubeconfig == "" {
		rc, err = rest.InClusterConfig()
		if err != nil {
			return nil, &configErr{field: fieldKubeconfig, reason: "no kubeconfig and not running in a cluster (" + err.Error() + ")"}
		}
	} else {
		if err := vetKubeconfig(cfg.kubeconfig); err != nil {
			return nil, &configErr{field: fieldKubeconfig, reason: err.Error()}
		}
		kc, _ := clientcmd.Load([]byte(cfg.kubeconfig))
		cc := clientcmd.NewNonInteractiveClientConfig(*kc, cfg.context, &clientcmd.ConfigOverrides{}, nil)
		if rc, err = cc.ClientConfig(); err != nil {
			// The loader's errors name contexts and clusters, not values.
			return nil, &configErr{field: fieldKubeconfig, reason: err.Error()}
		}
	}
	rc.QPS, rc.Burst = 50, 100
	rc.UserAgent = "berth-kubernetes-driver"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, &configErr{field: fieldKubeconfig, reason: err.Error()}
	}
	c := &cluster{rest: rc, cs: cs, server: serverName(rc.Host)}
	d.clients[key] = c
	return c, nil
}

// serverName returns host without user info or query.
func serverName(host string) string {
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		return "the API server"
	}
	return u.Scheme + "://" + u.Host
}

// configErr is a config field the cluster client could not be built from.
type configErr struct{ field, reason string }

func (e *configErr) Error() string {
	return fmt.Sprintf("kubernetes config: field %q: %s", e.field, e.reason)
}
func (e *configErr) Unwrap() error {
	return &config.Error{Driver: driverName, Field: e.field, Reason: e.reason}
}

// target names a pod in errors: "kubernetes SERVER: pod NS/NAME".
func (c *cluster) target(ns, pod string) string {
	if pod == "" {
		return fmt.Sprintf("kubernetes %s: namespace %s", c.server, ns)
	}
	return fmt.Sprintf("kubernetes %s: pod %s/%s", c.server, ns, pod)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
