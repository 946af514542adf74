package ssh

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers/config"
	xssh "golang.org/x/crypto/ssh"
)

// The config fields of the ssh driver.
const (
	fieldHost           = "host"
	fieldPort           = "port"
	fieldUser           = "user"
	fieldPrivateKey     = "private_key"
	fieldKnownHosts     = "known_hosts"
	fieldWorkdir        = "workdir"
	fieldConnectTimeout = "connect_timeout"
	fieldKeepalive      = "keepalive"
	fieldMaxSessions    = "max_sessions"
	fieldForwarding     = "forwarding"
)

// defaultMaxSessions is the default of max_sessions: OpenSSH's default
// MaxSessions.
const defaultMaxSessions = 10

func newSchema() *config.Schema {
	return &config.Schema{
		Driver: driverName,
		Fields: []config.Field{
			{Name: fieldHost, Kind: config.KindIdentity, Type: config.TypeString, Required: true,
				Doc: "host name or IP address of the SSH server", Check: checkHost},
			{Name: fieldPort, Kind: config.KindIdentity, Type: config.TypeInt, Default: int64(22),
				Doc: "TCP port of the SSH server", Check: checkPort},
			{Name: fieldUser, Kind: config.KindIdentity, Type: config.TypeString, Required: true,
				Doc: "login user", Check: checkUser},
			{Name: fieldPrivateKey, Kind: config.KindSecret, Type: config.TypeString, Required: true,
				Doc: "unencrypted private key in PEM form (OpenSSH, PKCS#1, PKCS#8 or SEC1)", Check: checkPrivateKey},
			{Name: fieldKnownHosts, Kind: config.KindIdentity, Type: config.TypeStringList,
				Doc:   "trusted host keys as known_hosts lines; without a line for the host every connection is refused (a failed Test offers Trust host key, and envctl env trust-host-key ENV, which scan the key and show its fingerprint to compare with the server's before it is saved; ssh-keyscan -p PORT HOST prints them too)",
				Check: checkKnownHosts},
			{Name: fieldWorkdir, Kind: config.KindIdentity, Type: config.TypeString, Default: "~",
				Doc:   `remote workspace directory, created if missing: "~" is the login user's home, "~/x" and relative paths are under it, absolute paths are used as given`,
				Check: checkWorkdir},
			{Name: fieldConnectTimeout, Advanced: true, Kind: config.KindKnob, Type: config.TypeDuration, Default: "10s",
				Doc: "limit for TCP connect plus SSH handshake and authentication"},
			{Name: fieldKeepalive, Advanced: true, Kind: config.KindKnob, Type: config.TypeDuration,
				Doc: "interval of keepalive@openssh.com requests on idle connections; 0 or absent disables them"},
			{Name: fieldMaxSessions, Advanced: true, Kind: config.KindKnob, Type: config.TypeInt, Default: int64(defaultMaxSessions),
				Doc:   "the server's MaxSessions: channels opened at once on one connection (one is kept for control commands)",
				Check: checkMaxSessions},
			{Name: fieldForwarding, Advanced: true, Kind: config.KindKnob, Type: config.TypeString, Check: checkForwarding,
				Doc: `what the server forwards for the runner's ingress, as a Test measured it: "unix", "tcp" or "none"; ` +
					`with "none" this environment cannot host runs that need the runner, which are refused before anything is started; absent: not measured (a unix socket is tried, then TCP)`},
		},
	}
}

func checkHost(v any) error {
	s, _ := v.(string)
	if s == "" || strings.ContainsAny(s, " \t\r\n@/") {
		return fmt.Errorf("%q is not a host name or address", s)
	}
	return nil
}

func checkForwarding(v any) error {
	switch s, _ := v.(string); s {
	case "", forwardingUnix, forwardingTCP, forwardingNone:
		return nil
	default:
		return fmt.Errorf("%q is not one of unix, tcp, none", s)
	}
}

func checkPort(v any) error {
	n, _ := v.(int64)
	if n < 1 || n > 65535 {
		return fmt.Errorf("port %d is not between 1 and 65535", n)
	}
	return nil
}

func checkUser(v any) error {
	s, _ := v.(string)
	if s == "" || strings.ContainsAny(s, " \t\r\n@:/") {
		return fmt.Errorf("%q is not a login name", s)
	}
	return nil
}

func checkWorkdir(v any) error {
	s, _ := v.(string)
	if strings.ContainsAny(s, "\x00\n") {
		return errors.New("path contains a NUL or newline")
	}
	return nil
}

func checkMaxSessions(v any) error {
	n, _ := v.(int64)
	if n < 2 || n > 1024 {
		return fmt.Errorf("%d is not between 2 and 1024", n)
	}
	return nil
}

// checkPrivateKey validates a private key value. A secret reference (not yet
// resolved) is accepted as is. The error never contains key material: the
// parser's own message is not passed on.
func checkPrivateKey(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil // a SecretRef: checked when resolved, at Acquire
	}
	_, err := parseSigner(s)
	return err
}

func parseSigner(pemText string) (xssh.Signer, error) {
	signer, err := xssh.ParsePrivateKey([]byte(pemText))
	if err == nil {
		return signer, nil
	}
	var pp *xssh.PassphraseMissingError
	if errors.As(err, &pp) {
		return nil, errors.New("private key is encrypted with a passphrase, which is not supported")
	}
	if !strings.Contains(pemText, "-----BEGIN ") {
		return nil, errors.New("not a PEM-encoded private key")
	}
	return nil, errors.New("private key could not be parsed (unsupported type or corrupt PEM)")
}

func checkKnownHosts(v any) error {
	l, _ := v.([]string)
	_, err := parseKnownHosts(l)
	return err
}

// target is a parsed, validated config: everything a connection needs.
type target struct {
	host           string
	port           int
	user           string
	signer         xssh.Signer
	known          *hostKeyDB
	workdir        string
	connectTimeout time.Duration
	keepalive      time.Duration
	maxSessions    int
	// poolKey identifies the connection: a hash of the identity fields
	// that shape it and of the client public key (never the private key).
	poolKey string
}

func (t *target) addr() string {
	return joinHostPort(t.host, t.port)
}

func joinHostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// parseTarget reads a normalized config whose secrets are resolved. Errors
// wrap config.ErrInvalid or config.ErrCredentialsMissing and never
// contain the private key.
func parseTarget(schema *config.Schema, cfg config.Config) (*target, error) {
	cfgErr := func(field, reason string) error {
		return &config.Error{Driver: driverName, Field: field, Reason: reason}
	}
	t := &target{
		host:           cfg.String(fieldHost),
		port:           int(cfg.Int(fieldPort)),
		user:           cfg.String(fieldUser),
		workdir:        cfg.String(fieldWorkdir),
		connectTimeout: cfg.Duration(fieldConnectTimeout),
		keepalive:      cfg.Duration(fieldKeepalive),
		maxSessions:    int(cfg.Int(fieldMaxSessions)),
	}
	if t.port == 0 {
		t.port = 22
	}
	if t.workdir == "" {
		t.workdir = "~"
	}
	if t.connectTimeout <= 0 {
		t.connectTimeout = 10 * time.Second
	}
	if t.maxSessions == 0 {
		t.maxSessions = defaultMaxSessions
	}
	for _, c := range []struct {
		field string
		v     any
		check func(any) error
	}{
		{fieldHost, t.host, checkHost},
		{fieldPort, int64(t.port), checkPort},
		{fieldUser, t.user, checkUser},
		{fieldWorkdir, t.workdir, checkWorkdir},
		{fieldMaxSessions, int64(t.maxSessions), checkMaxSessions},
	} {
		if err := c.check(c.v); err != nil {
			return nil, cfgErr(c.field, err.Error())
		}
	}
	if _, isRef := cfg.SecretRef(fieldPrivateKey); isRef {
		return nil, fmt.Errorf("ssh %s@%s: private_key is an unresolved secret reference: %w", t.user, t.addr(), config.ErrCredentialsMissing)
	}
	key := cfg.String(fieldPrivateKey)
	if key == "" {
		return nil, fmt.Errorf("ssh %s@%s: private_key is missing: %w", t.user, t.addr(), config.ErrCredentialsMissing)
	}
	signer, err := parseSigner(key)
	if err != nil {
		return nil, cfgErr(fieldPrivateKey, err.Error())
	}
	t.signer = signer
	known, err := parseKnownHosts(cfg.Strings(fieldKnownHosts))
	if err != nil {
		return nil, cfgErr(fieldKnownHosts, err.Error())
	}
	t.known = known

	h := sha256.New()
	for _, part := range []string{
		t.host, strconv.Itoa(t.port), t.user,
		strings.Join(cfg.Strings(fieldKnownHosts), "\n"),
		string(signer.PublicKey().Marshal()),
		t.keepalive.String(), strconv.Itoa(t.maxSessions),
	} {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	t.poolKey = hex.EncodeToString(h.Sum(nil))
	return t, nil
}
