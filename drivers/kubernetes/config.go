package kubernetes

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berthdev/berth/drivers/config"
)

// Config field names.
const (
	fieldKubeconfig     = "kubeconfig"
	fieldContext        = "context"
	fieldNamespace      = "namespace"
	fieldImage          = "image"
	fieldPullPolicy     = "image_pull_policy"
	fieldCPURequest     = "cpu_request"
	fieldCPULimit       = "cpu_limit"
	fieldMemoryRequest  = "memory_request"
	fieldMemoryLimit    = "memory_limit"
	fieldRuntimeClass   = "runtime_class_name"
	fieldNodeSelector   = "node_selector"
	fieldTolerations    = "tolerations"
	fieldLabels         = "labels"
	fieldRunAsNonRoot   = "run_as_non_root"
	fieldUser           = "user"
	fieldReadonlyRootfs = "readonly_rootfs"
	fieldWorkdir        = "workdir"
	fieldEnv            = "env"
	fieldStartupTimeout = "startup_timeout"
)

// Defaults of the knobs.
const (
	defaultNamespace      = "default"
	defaultMemoryLimit    = "1Gi"
	defaultWorkdir        = "/"
	defaultStartupTimeout = 120 * time.Second
	defaultPullPolicy     = string(corev1.PullIfNotPresent)
)

// settings is a normalized Config read into typed values.
type settings struct {
	kubeconfig   string // the resolved kubeconfig; never logged or put in errors
	context      string
	namespace    string
	image        string
	pullPolicy   corev1.PullPolicy
	resources    corev1.ResourceRequirements
	runtimeClass string
	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	labels       map[string]string
	nonRoot      bool
	uid, gid     *int64
	readonly     bool
	workdir      string
	env          map[string]string // secret values: handed to each exec, never to the pod
	startup      time.Duration
}

func newSchema() *config.Schema {
	return &config.Schema{
		Driver:     driverName,
		ImageField: fieldImage,
		Fields: []config.Field{
			{Name: fieldKubeconfig, Kind: config.KindSecret, Type: config.TypeString, Check: checkKubeconfig,
				Doc: "kubeconfig (YAML) of the cluster and the credentials; default: in-cluster (the service account of the pod berth runs in). " +
					"Only inline data is read: exec and auth-provider plugins and file references are refused, so that a config never runs a program or reads a file of the berth host"},
			{Name: fieldContext, Advanced: true, Kind: config.KindIdentity, Type: config.TypeString,
				Doc: "kubeconfig context to use; default: the kubeconfig's current context"},
			{Name: fieldNamespace, Kind: config.KindIdentity, Type: config.TypeString, Default: defaultNamespace, Check: checkDNSLabel,
				Doc: `namespace the pods are created in; default "default". The credentials need a Role there (docs/kubernetes.md)`},
			{Name: fieldImage, Kind: config.KindIdentity, Type: config.TypeString, Required: true, Check: checkImage,
				Doc: "image reference; pin it as repo@sha256:... for qualification. The image needs sh, sleep, grep, kill (busybox will do), and tar for files"},
			{Name: fieldPullPolicy, Kind: config.KindKnob, Type: config.TypeString, Default: defaultPullPolicy,
				Enum: []string{string(corev1.PullIfNotPresent), string(corev1.PullAlways), string(corev1.PullNever)},
				Doc:  "imagePullPolicy of the container: IfNotPresent (default), Always, Never"},
			{Name: fieldCPURequest, Kind: config.KindKnob, Type: config.TypeString, Check: checkQuantity,
				Doc: `CPU request as a Kubernetes quantity ("500m", "2"); default: none`},
			{Name: fieldCPULimit, Kind: config.KindKnob, Type: config.TypeString, Check: checkQuantity,
				Doc: `CPU limit as a Kubernetes quantity ("500m", "2"); default: no limit`},
			{Name: fieldMemoryRequest, Kind: config.KindKnob, Type: config.TypeString, Check: checkQuantity,
				Doc: `memory request as a Kubernetes quantity ("256Mi"); default: none (the limit, as Kubernetes defaults it)`},
			{Name: fieldMemoryLimit, Kind: config.KindKnob, Type: config.TypeString, Default: defaultMemoryLimit, Check: checkQuantity,
				Doc: `memory limit as a Kubernetes quantity ("512Mi", "2Gi"); default "1Gi"`},
			{Name: fieldRuntimeClass, Kind: config.KindIdentity, Type: config.TypeString, Check: checkRuntimeClass,
				Doc: `runtimeClassName of the pods ("gvisor"); default: the cluster's default runtime. The driver declares isolation gvisor for a class named gvisor or runsc (its handler must be runsc), container otherwise`},
			{Name: fieldNodeSelector, Advanced: true, Kind: config.KindKnob, Type: config.TypeStringMap, Check: checkNodeSelector,
				Doc: "nodeSelector of the pods (label: value); default: none"},
			{Name: fieldTolerations, Advanced: true, Kind: config.KindKnob, Type: config.TypeStringList, Check: checkTolerations,
				Doc: `tolerations of the pods, each as kubectl taint writes one: "key=value:Effect", "key:Effect" (any value) or "key" (any value and effect); default: none`},
			{Name: fieldLabels, Advanced: true, Kind: config.KindMetadata, Type: config.TypeStringMap, Check: checkLabels,
				Doc: `extra pod labels (valid Kubernetes label keys and values); keys starting with "berth." are reserved`},
			{Name: fieldRunAsNonRoot, Kind: config.KindKnob, Type: config.TypeBool, Default: false,
				Doc: "runAsNonRoot: the kubelet refuses to start a container whose user is root; default false. Set it with an image made for a non-root user, or with user"},
			{Name: fieldUser, Advanced: true, Kind: config.KindKnob, Type: config.TypeString, Check: checkUser,
				Doc: `numeric user the container and every command run as: "UID" or "UID:GID" (runAsUser, runAsGroup); default: the image's user`},
			{Name: fieldReadonlyRootfs, Advanced: true, Kind: config.KindKnob, Type: config.TypeBool, Default: false,
				Doc: "readOnlyRootFilesystem; default false. Commands can then write only to /tmp and the workdir, each an emptyDir volume (the workdir must not be \"/\")"},
			{Name: fieldWorkdir, Kind: config.KindKnob, Type: config.TypeString, Default: defaultWorkdir, Check: checkAbs,
				Doc: `working directory of the container and default of commands; default "/". With readonly_rootfs it is an emptyDir and must not be "/"`},
			{Name: fieldEnv, Advanced: true, Kind: config.KindSecretMap, Type: config.TypeStringMap, Check: checkEnv,
				Doc: "environment variables of every command (exec, stream, terminal), secrets included: each value goes to each command on its standard input when it starts, " +
					"never into the pod spec, a Kubernetes Secret or an exec request's URL; a command's own env wins on a clash"},
			{Name: fieldStartupTimeout, Advanced: true, Kind: config.KindKnob, Type: config.TypeDuration, Default: defaultStartupTimeout.String(),
				Doc: "time an acquire may take (create, schedule, pull, start), within the caller's deadline; default 2m0s"},
		},
		Check: func(c config.Config) error {
			if c.Bool(fieldReadonlyRootfs) && strings.TrimRight(c.String(fieldWorkdir), "/") == "" {
				return &config.Error{Driver: driverName, Field: fieldWorkdir,
					Reason: `readonly_rootfs needs a writable workdir other than "/" (it gets an emptyDir), such as "/workspace"`}
			}
			for _, p := range [][2]string{{fieldMemoryRequest, fieldMemoryLimit}, {fieldCPURequest, fieldCPULimit}} {
				req, lim := c.String(p[0]), c.String(p[1])
				if req == "" || lim == "" {
					continue
				}
				rq, lq := resource.MustParse(req), resource.MustParse(lim)
				if rq.Cmp(lq) > 0 {
					return &config.Error{Driver: driverName, Field: p[0], Reason: fmt.Sprintf("%s is more than the %s %s", req, p[1], lim)}
				}
			}
			return nil
		},
	}
}

// checkKubeconfig parses the kubeconfig and refuses what would make the
// berth host run a program or read a file. It never quotes the value.
func checkKubeconfig(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil // a SecretRef; resolved before Acquire
	}
	return vetKubeconfig(s)
}

// vetKubeconfig returns an error naming the first entry of kc that is not
// inline data: an exec or auth-provider plugin, a file reference. The
// error names entries (a user, a cluster), never a value.
func vetKubeconfig(kc string) error {
	c, err := clientcmd.Load([]byte(kc))
	if err != nil {
		return errors.New("not a kubeconfig that parses (the YAML of ~/.kube/config)")
	}
	if len(c.Clusters) == 0 {
		return errors.New("the kubeconfig names no cluster")
	}
	for _, n := range slices.Sorted(maps.Keys(c.AuthInfos)) {
		u := c.AuthInfos[n]
		switch {
		case u.Exec != nil:
			return fmt.Errorf("user %q runs an exec plugin: refused (put a token or a client certificate inline)", n)
		case u.AuthProvider != nil:
			return fmt.Errorf("user %q uses an auth-provider plugin: refused (put a token or a client certificate inline)", n)
		case u.ClientCertificate != "" || u.ClientKey != "" || u.TokenFile != "":
			return fmt.Errorf("user %q names a file: refused (use client-certificate-data, client-key-data, token)", n)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(c.Clusters)) {
		if c.Clusters[n].CertificateAuthority != "" {
			return fmt.Errorf("cluster %q names a certificate-authority file: refused (use certificate-authority-data)", n)
		}
	}
	return nil
}

func checkDNSLabel(v any) error {
	if errs := validation.IsDNS1123Label(v.(string)); len(errs) > 0 {
		return fmt.Errorf("%q: %s", v, errs[0])
	}
	return nil
}

func checkImage(v any) error {
	if _, err := name.ParseReference(v.(string), name.WeakValidation); err != nil {
		return fmt.Errorf("invalid image reference %q: %v", v, err)
	}
	return nil
}

func checkQuantity(v any) error {
	q, err := resource.ParseQuantity(v.(string))
	if err != nil || q.Sign() <= 0 {
		return fmt.Errorf("%q: want a positive Kubernetes quantity such as \"500m\" or \"512Mi\"", v)
	}
	return nil
}

func checkRuntimeClass(v any) error {
	if errs := validation.IsDNS1123Subdomain(v.(string)); len(errs) > 0 {
		return fmt.Errorf("%q: %s", v, errs[0])
	}
	return nil
}

func checkNodeSelector(v any) error {
	for _, k := range slices.Sorted(maps.Keys(v.(map[string]string))) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("key %q: %s", k, errs[0])
		}
		if errs := validation.IsValidLabelValue(v.(map[string]string)[k]); len(errs) > 0 {
			return fmt.Errorf("value of %q: %s", k, errs[0])
		}
	}
	return nil
}

func checkLabels(v any) error {
	for _, k := range slices.Sorted(maps.Keys(v.(map[string]string))) {
		if strings.HasPrefix(k, "berth.") {
			return fmt.Errorf("label %q: the berth. prefix is reserved", k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label %q: %s", k, errs[0])
		}
		if errs := validation.IsValidLabelValue(v.(map[string]string)[k]); len(errs) > 0 {
			return fmt.Errorf("value of label %q: %s", k, errs[0])
		}
	}
	return nil
}

func checkTolerations(v any) error {
	for _, s := range v.([]string) {
		if _, err := parseToleration(s); err != nil {
			return err
		}
	}
	return nil
}

// parseToleration reads "key=value:Effect", "key:Effect", "key=value" or
// "key" (kubectl taint's form): Equal when a value is given, else Exists;
// no effect tolerates every effect.
func parseToleration(s string) (corev1.Toleration, error) {
	bad := fmt.Errorf("toleration %q: want key=value:Effect, key:Effect or key (Effect one of NoSchedule, PreferNoSchedule, NoExecute)", s)
	kv, effect, hasEffect := strings.Cut(s, ":")
	key, value, hasValue := strings.Cut(kv, "=")
	t := corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists}
	if errs := validation.IsQualifiedName(key); len(errs) > 0 {
		return t, bad
	}
	if hasValue {
		if errs := validation.IsValidLabelValue(value); len(errs) > 0 {
			return t, bad
		}
		t.Operator, t.Value = corev1.TolerationOpEqual, value
	}
	if hasEffect {
		switch e := corev1.TaintEffect(effect); e {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			t.Effect = e
		default:
			return t, bad
		}
	}
	return t, nil
}

func checkAbs(v any) error {
	if !strings.HasPrefix(v.(string), "/") {
		return fmt.Errorf("%q: want an absolute path", v)
	}
	return nil
}

func checkEnv(v any) error {
	m, _ := v.(map[string]any) // a SecretMap field's normalized form
	for k := range m {
		if !validEnvName(k) {
			return fmt.Errorf("invalid variable name %q: want letters, digits and _, not starting with a digit", k)
		}
	}
	return nil
}

// validEnvName reports whether k is a name a POSIX shell exports.
func validEnvName(k string) bool {
	if k == "" || (k[0] >= '0' && k[0] <= '9') {
		return false
	}
	return strings.Trim(k, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") == ""
}

// checkUser accepts "UID" or "UID:GID", decimal, each below 2^31.
func checkUser(v any) error {
	if _, _, err := parseUser(v.(string)); err != nil {
		return err
	}
	return nil
}

func parseUser(u string) (uid, gid *int64, err error) {
	parts := strings.Split(u, ":")
	if len(parts) > 2 {
		return nil, nil, fmt.Errorf("%q: want a numeric UID or UID:GID such as \"1000\" or \"1000:1000\"", u)
	}
	var ids []*int64
	for _, p := range parts {
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || n < 0 || strings.Trim(p, "0123456789") != "" {
			return nil, nil, fmt.Errorf("%q: want a numeric UID or UID:GID such as \"1000\" or \"1000:1000\"", u)
		}
		ids = append(ids, &n)
	}
	if len(ids) == 2 {
		return ids[0], ids[1], nil
	}
	return ids[0], nil, nil
}

// parseConfig reads a config (secrets resolved), normalizing it first so
// that Acquire never runs with unchecked values.
func (d *driver) parseConfig(raw config.Config) (*settings, error) {
	cfg, err := d.schema.Normalize(map[string]any(raw))
	if err != nil {
		return nil, err
	}
	if _, isRef := cfg.SecretRef(fieldKubeconfig); isRef {
		return nil, fmt.Errorf("kubernetes config: field %q holds an unresolved secret reference: %w", fieldKubeconfig, config.ErrCredentialsMissing)
	}
	if refs := cfg.SecretMapRefs(fieldEnv); len(refs) > 0 {
		return nil, fmt.Errorf("kubernetes config: field %q: key %q holds an unresolved secret reference: %w",
			fieldEnv, slices.Sorted(maps.Keys(refs))[0], config.ErrCredentialsMissing)
	}
	c := &settings{
		kubeconfig:   cfg.String(fieldKubeconfig),
		context:      cfg.String(fieldContext),
		namespace:    cfg.String(fieldNamespace),
		image:        cfg.String(fieldImage),
		pullPolicy:   corev1.PullPolicy(cfg.String(fieldPullPolicy)),
		runtimeClass: cfg.String(fieldRuntimeClass),
		nodeSelector: maps.Clone(cfg.StringMap(fieldNodeSelector)),
		labels:       maps.Clone(cfg.StringMap(fieldLabels)),
		nonRoot:      cfg.Bool(fieldRunAsNonRoot),
		readonly:     cfg.Bool(fieldReadonlyRootfs),
		workdir:      cfg.String(fieldWorkdir),
		env:          maps.Clone(cfg.StringMap(fieldEnv)),
		startup:      cfg.Duration(fieldStartupTimeout),
	}
	if c.startup <= 0 {
		c.startup = defaultStartupTimeout
	}
	if u := cfg.String(fieldUser); u != "" {
		c.uid, c.gid, _ = parseUser(u)
	}
	for _, s := range cfg.Strings(fieldTolerations) {
		t, _ := parseToleration(s)
		c.tolerations = append(c.tolerations, t)
	}
	c.resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	for field, rl := range map[string]struct {
		list corev1.ResourceList
		name corev1.ResourceName
	}{
		fieldCPURequest: {c.resources.Requests, corev1.ResourceCPU}, fieldCPULimit: {c.resources.Limits, corev1.ResourceCPU},
		fieldMemoryRequest: {c.resources.Requests, corev1.ResourceMemory}, fieldMemoryLimit: {c.resources.Limits, corev1.ResourceMemory},
	} {
		if s := cfg.String(field); s != "" {
			rl.list[rl.name] = resource.MustParse(s)
		}
	}
	return c, nil
}
