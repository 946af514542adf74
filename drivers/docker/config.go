package docker

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/registry"
	"github.com/docker/docker/client"
	"github.com/docker/go-units"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/berthdev/berth/drivers/config"
)

// Config field names.
const (
	fieldHost           = "host"
	fieldImage          = "image"
	fieldRegistryAuth   = "registry_auth"
	fieldPullPolicy     = "pull_policy"
	fieldCPUs           = "cpus"
	fieldMemory         = "memory"
	fieldPidsLimit      = "pids_limit"
	fieldNetwork        = "network"
	fieldPorts          = "ports"
	fieldReadonlyRootfs = "readonly_rootfs"
	fieldUser           = "user"
	fieldWorkdir        = "workdir"
	fieldEnv            = "env"
	fieldLabels         = "labels"
	fieldStartupTimeout = "startup_timeout"
	fieldCaptureRepo    = "capture_repository"
)

// Pull policies of the pull_policy field.
const (
	pullMissing = "missing" // pull only when the engine lacks the image (the Docker CLI's default)
	pullAlways  = "always"  // pull tags on every acquire; pinned digests are still pulled only when missing
	pullNever   = "never"   // never pull; a missing image is ErrImageNotFound
)

// Defaults of the knobs.
const (
	defaultMemory         = "1g"
	defaultPidsLimit      = 512
	defaultNetwork        = "none"
	defaultWorkdir        = "/"
	defaultStartupTimeout = 60 * time.Second
)

// localRegistry is the registry host of images that exist only in one
// engine (templates captured without a capture_repository). Their identity
// is "berth.local/templates/NAME@sha256:<image id>": the digest is the
// engine's image ID (the digest of the image config), which is as immutable
// as a manifest digest but valid only on the engine that holds the image.
const localRegistry = "berth.local"

// settings is a normalized Config read into typed values.
type settings struct {
	host        string
	image       string
	ref         name.Reference
	auth        string // encoded X-Registry-Auth, "" when none
	secret      string // the resolved registry_auth value; never logged or put in errors
	pullPolicy  string
	nanoCPUs    int64
	memory      int64
	pids        int64
	network     string
	ports       []string
	readonly    bool
	user        string // "UID" or "UID:GID"; "" runs as the image's user
	workdir     string
	env         map[string]string // secret values: handed to each exec, never to the container
	labels      map[string]string
	startup     time.Duration
	captureRepo string
	runtime     string // the OCI runtime; "" the engine's default
}

// defaultHost returns the engine host the Docker CLI would use: DOCKER_HOST,
// else the platform's default socket. (Docker CLI contexts are not read.)
func defaultHost() string {
	if h := os.Getenv(client.EnvOverrideHost); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

func newSchema(host string) *config.Schema {
	return &config.Schema{
		Driver:     driverName,
		ImageField: fieldImage,
		Fields: []config.Field{
			{Name: fieldHost, Advanced: true, Kind: config.KindIdentity, Type: config.TypeString, Default: host, Check: checkHost,
				Doc: "Docker engine host (unix:///var/run/docker.sock, tcp://HOST:2376, ssh is not supported); default: DOCKER_HOST of the berth host, else the default socket. TLS settings come from DOCKER_CERT_PATH / DOCKER_TLS_VERIFY of the berth host."},
			{Name: fieldImage, Kind: config.KindIdentity, Type: config.TypeString, Required: true, Check: checkImage,
				Doc: "image reference; pin it as repo@sha256:... for qualification. berth.local/templates/NAME@sha256:ID names a template captured into the engine only."},
			{Name: fieldRegistryAuth, Advanced: true, Kind: config.KindSecret, Type: config.TypeString, Check: checkAuth,
				Doc: `registry credential for pulls and capture pushes: "username:password", or a bare bearer token (sent as the registry token)`},
			{Name: fieldPullPolicy, Kind: config.KindKnob, Type: config.TypeString, Default: pullMissing, Enum: []string{pullMissing, pullAlways, pullNever},
				Doc: "when to pull a tag: missing (default), always, never; a pinned digest is pulled only when missing"},
			{Name: fieldCPUs, Kind: config.KindKnob, Type: config.TypeString, Check: checkCPUs,
				Doc: `CPU limit as a decimal number of CPUs ("1.5"); default: no CPU limit`},
			{Name: fieldMemory, Kind: config.KindKnob, Type: config.TypeString, Default: defaultMemory, Check: checkMemory,
				Doc: `memory limit in bytes or with a unit ("512m", "2g"); swap is disabled; default "1g"`},
			{Name: fieldPidsLimit, Kind: config.KindKnob, Type: config.TypeInt, Default: int64(defaultPidsLimit), Check: checkPids,
				Doc: "maximum number of processes in the container; default 512"},
			{Name: fieldNetwork, Kind: config.KindKnob, Type: config.TypeString, Default: defaultNetwork, Check: checkNetwork,
				Doc: `network: "none" (default: no network), "bridge" or a user network name; "host" and "container:..." are refused`},
			{Name: fieldPorts, Advanced: true, Kind: config.KindKnob, Type: config.TypeStringList, Check: checkPorts,
				Doc: `container ports to publish ("8080", "8080/tcp"), always on 127.0.0.1 with an ephemeral host port; needs a network other than none`},
			{Name: fieldReadonlyRootfs, Advanced: true, Kind: config.KindKnob, Type: config.TypeBool, Default: false,
				Doc: "mount the root filesystem read-only; default false. Commands can then write only to /tmp and the workdir, " +
					"each an empty tmpfs (exec, so that code built there runs; nosuid, nodev; owned by the user knob's uid and gid) whose contents count against the memory limit and vanish with the container. " +
					"It trades persistence for integrity: nothing a command does survives outside those two, the image's own files in the workdir are hidden by the tmpfs, " +
					"and a workdir other than \"/\" is required (\"/\" cannot be a tmpfs)"},
			{Name: fieldUser, Advanced: true, Kind: config.KindKnob, Type: config.TypeString, Check: checkUser,
				Doc: `numeric user the container and every command run as: "UID" or "UID:GID" (names are not looked up in the image); default: the image's user, which is root for most images. ` +
					`root in the container keeps no capabilities and cannot gain privileges, but owns every file of the image; a non-root uid cannot change the image's files or the /tmp and workdir of other uids, ` +
					`and may lack write access to directories the image made for root (give it readonly_rootfs, whose tmpfs workdir it owns, or an image made for it)`},
			{Name: fieldWorkdir, Kind: config.KindKnob, Type: config.TypeString, Default: defaultWorkdir, Check: checkAbs,
				Doc: `default working directory of commands; default "/". With readonly_rootfs it is a writable tmpfs and must not be "/"`},
			{Name: fieldEnv, Advanced: true, Kind: config.KindSecretMap, Type: config.TypeStringMap, Check: checkEnv,
				Doc: "environment variables of every command (exec, stream, terminal), for tokens and other secrets as well: " +
					"each value is kept in the secret store and handed to each command when it starts, never put in the container's own " +
					"environment (which docker inspect shows) or in a captured template; a command's own env wins on a clash"},
			{Name: fieldLabels, Advanced: true, Kind: config.KindMetadata, Type: config.TypeStringMap, Check: checkLabels,
				Doc: `extra container labels; keys starting with "berth." are reserved`},
			{Name: fieldStartupTimeout, Advanced: true, Kind: config.KindKnob, Type: config.TypeDuration, Default: defaultStartupTimeout.String(),
				Doc: "time an acquire may take (pull, create, start), within the caller's deadline; default 60s"},
			{Name: fieldCaptureRepo, Advanced: true, Kind: config.KindKnob, Type: config.TypeString, Check: checkRepo,
				Doc: "repository captured templates are pushed to (REGISTRY/PATH); default: none, templates stay in the engine as berth.local/templates/NAME"},
		},
		Check: func(c config.Config) error {
			if len(c.Strings(fieldPorts)) > 0 && c.String(fieldNetwork) == "none" {
				return &config.Error{Driver: driverName, Field: fieldPorts, Reason: `publishing ports needs a network other than "none"`}
			}
			if c.Bool(fieldReadonlyRootfs) && path.Clean(c.String(fieldWorkdir)) == "/" {
				return &config.Error{Driver: driverName, Field: fieldWorkdir,
					Reason: `readonly_rootfs needs a writable workdir other than "/" (it gets a tmpfs), such as "/workspace"`}
			}
			return nil
		},
	}
}

func checkHost(v any) error {
	h := v.(string)
	switch {
	case h == "":
		return errors.New("must not be empty")
	case strings.HasPrefix(h, "unix://"), strings.HasPrefix(h, "tcp://"), strings.HasPrefix(h, "npipe://"):
		return nil
	}
	return fmt.Errorf("%q: want unix://PATH or tcp://HOST:PORT", h)
}

func parseImage(s string) (name.Reference, error) {
	return name.ParseReference(s, name.WeakValidation)
}

func checkImage(v any) error {
	_, err := parseImage(v.(string))
	if err != nil {
		return fmt.Errorf("invalid image reference %q: %v", v, err)
	}
	return nil
}

func checkRepo(v any) error {
	if _, err := name.NewRepository(v.(string)); err != nil {
		return fmt.Errorf("invalid repository %q: %v", v, err)
	}
	return nil
}

// checkAuth validates the credential's shape. It never quotes the value.
func checkAuth(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil // a SecretRef; resolved before Acquire
	}
	if strings.ContainsAny(s, "\r\n") {
		return errors.New("must be username:password or a token on one line")
	}
	return nil
}

func checkCPUs(v any) error {
	f, err := strconv.ParseFloat(v.(string), 64)
	if err != nil || f <= 0 || f > 1024 || math.IsNaN(f) {
		return fmt.Errorf("%q: want a positive number of CPUs such as \"1.5\"", v)
	}
	return nil
}

func checkMemory(v any) error {
	n, err := units.RAMInBytes(v.(string))
	if err != nil {
		return fmt.Errorf("%q: want bytes or a size such as \"512m\"", v)
	}
	if n < 6<<20 {
		return fmt.Errorf("%q: the engine needs at least 6m", v)
	}
	return nil
}

func checkPids(v any) error {
	if n := v.(int64); n < 1 {
		return fmt.Errorf("%d: want at least 1", n)
	}
	return nil
}

func checkNetwork(v any) error {
	n := v.(string)
	switch {
	case n == "":
		return errors.New("must not be empty")
	case n == "host":
		return errors.New(`"host" would share the host's network; refused`)
	case strings.HasPrefix(n, "container:"):
		return fmt.Errorf("%q would join another container's network; refused", n)
	}
	return nil
}

func checkPorts(v any) error {
	for _, p := range v.([]string) {
		if _, err := parsePort(p); err != nil {
			return err
		}
	}
	return nil
}

// parsePort reads "8080" or "8080/tcp" into "8080/tcp".
func parsePort(p string) (string, error) {
	num, proto, ok := strings.Cut(p, "/")
	if !ok {
		proto = "tcp"
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n > 65535 || (proto != "tcp" && proto != "udp") {
		return "", fmt.Errorf("port %q: want PORT or PORT/tcp|udp", p)
	}
	return strconv.Itoa(n) + "/" + proto, nil
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
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("invalid variable name %q", k)
		}
	}
	return nil
}

// checkUser accepts "UID" or "UID:GID", decimal, each below 2^31.
func checkUser(v any) error {
	u := v.(string)
	parts := strings.Split(u, ":")
	ok := len(parts) <= 2
	for _, n := range parts {
		ok = ok && n != "" && strings.Trim(n, "0123456789") == ""
		if ok {
			_, err := strconv.ParseUint(n, 10, 31)
			ok = err == nil
		}
	}
	if !ok {
		return fmt.Errorf("%q: want a numeric UID or UID:GID such as \"1000\" or \"1000:1000\"", u)
	}
	return nil
}

func checkLabels(v any) error {
	for k := range v.(map[string]string) {
		if k == "" {
			return errors.New("empty label key")
		}
		if strings.HasPrefix(k, "berth.") {
			return fmt.Errorf("label %q: the berth. prefix is reserved", k)
		}
	}
	return nil
}

// encodeAuth turns a registry_auth value into an X-Registry-Auth header
// value for the registry of ref. The error never contains the value.
func encodeAuth(secret string, ref name.Reference) (string, error) {
	if secret == "" {
		return "", nil
	}
	ac := registry.AuthConfig{ServerAddress: ref.Context().RegistryStr()}
	if u, p, ok := strings.Cut(secret, ":"); ok {
		ac.Username, ac.Password = u, p
	} else {
		ac.RegistryToken = secret
	}
	s, err := registry.EncodeAuthConfig(ac)
	if err != nil {
		return "", fmt.Errorf("docker config: field %q: cannot encode the credential: %w", fieldRegistryAuth, config.ErrInvalid)
	}
	return s, nil
}

// parseConfig reads a normalized config (secrets resolved). A config that
// has not been normalized is normalized first, so that Acquire never runs
// with unchecked values.
func (d *driver) parseConfig(raw config.Config) (*settings, error) {
	cfg, err := d.schema.Normalize(map[string]any(raw))
	if err != nil {
		return nil, err
	}
	if _, isRef := cfg.SecretRef(fieldRegistryAuth); isRef {
		return nil, fmt.Errorf("docker config: field %q holds an unresolved secret reference: %w", fieldRegistryAuth, config.ErrCredentialsMissing)
	}
	if refs := cfg.SecretMapRefs(fieldEnv); len(refs) > 0 {
		return nil, fmt.Errorf("docker config: field %q: key %q holds an unresolved secret reference: %w",
			fieldEnv, slices.Sorted(maps.Keys(refs))[0], config.ErrCredentialsMissing)
	}
	c := &settings{
		host:        cfg.String(fieldHost),
		image:       cfg.String(fieldImage),
		pullPolicy:  cfg.String(fieldPullPolicy),
		pids:        cfg.Int(fieldPidsLimit),
		network:     cfg.String(fieldNetwork),
		readonly:    cfg.Bool(fieldReadonlyRootfs),
		user:        cfg.String(fieldUser),
		workdir:     cfg.String(fieldWorkdir),
		env:         maps.Clone(cfg.StringMap(fieldEnv)),
		labels:      maps.Clone(cfg.StringMap(fieldLabels)),
		startup:     cfg.Duration(fieldStartupTimeout),
		captureRepo: cfg.String(fieldCaptureRepo),
		runtime:     cfg.String(fieldRuntime),
	}
	if c.ref, err = parseImage(c.image); err != nil {
		return nil, err
	}
	c.secret = cfg.String(fieldRegistryAuth)
	if c.auth, err = encodeAuth(c.secret, c.ref); err != nil {
		return nil, err
	}
	if s := cfg.String(fieldCPUs); s != "" {
		f, _ := strconv.ParseFloat(s, 64)
		c.nanoCPUs = int64(f * 1e9)
	}
	c.memory, _ = units.RAMInBytes(cfg.String(fieldMemory))
	for _, p := range cfg.Strings(fieldPorts) {
		pp, _ := parsePort(p)
		c.ports = append(c.ports, pp)
	}
	if c.startup <= 0 {
		c.startup = defaultStartupTimeout
	}
	return c, nil
}
