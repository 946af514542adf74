package ssh

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/errcode"
	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// hostKeyError reports a host key that strict checking refused. It wraps
// drivers.ErrHostKeyUnknown (no trusted key for the host) or
// drivers.ErrHostKeyMismatch (the host offered another key, or a revoked
// one). It names the host, the port and the offered key's fingerprint so that
// an operator can compare it with the server's.
type hostKeyError struct {
	// Host and Port are the target as configured.
	Host string
	Port int
	// KeyType and Fingerprint describe the key the server offered
	// (Fingerprint in "SHA256:..." form).
	KeyType     string
	Fingerprint string
	// Trusted are the SHA256 fingerprints known_hosts trusts for the host
	// (empty for an unknown host).
	Trusted []string
	// Revoked is true when the offered key is marked @revoked.
	Revoked bool
	// Err is drivers.ErrHostKeyUnknown or drivers.ErrHostKeyMismatch.
	Err error
}

// Error names the host and port, the sentinel, and the offered key's type
// and fingerprint; for an unknown host it says how to trust the key.
func (e *hostKeyError) Error() string {
	addr := joinHostPort(e.Host, e.Port)
	switch {
	case e.Revoked:
		return fmt.Sprintf("ssh %s: %v: server offered revoked %s key %s", addr, e.Err, e.KeyType, e.Fingerprint)
	case len(e.Trusted) == 0:
		return fmt.Sprintf("ssh %s: %v: server offered %s key %s, and known_hosts has no entry for the host (save the key with an explicit scan after checking it)", addr, e.Err, e.KeyType, e.Fingerprint)
	default:
		return fmt.Sprintf("ssh %s: %v: server offered %s key %s, known_hosts trusts %s", addr, e.Err, e.KeyType, e.Fingerprint, strings.Join(e.Trusted, ", "))
	}
}

// Unwrap returns the sentinel, behind an *errcode.Error that names the
// target and says to a person what to check (errcode.MessageOf).
func (e *hostKeyError) Unwrap() error {
	addr := joinHostPort(e.Host, e.Port)
	var m string
	switch {
	case e.Revoked:
		m = fmt.Sprintf("The host key of %s is revoked in known_hosts: do not connect until the server's key is replaced.", addr)
	case len(e.Trusted) == 0:
		m = fmt.Sprintf("The host key of %s is not trusted yet: check that %s is the server's key, then trust it.", addr, e.Fingerprint)
	default:
		m = fmt.Sprintf("The host key of %s changed to %s, which known_hosts does not trust: check the server before trusting the new key.", addr, e.Fingerprint)
	}
	return &errcode.Error{Target: addr, Message: m, Err: e.Err}
}

// hostKeyDB is a parsed list of known_hosts lines.
type hostKeyDB struct {
	lines []knownLine
}

type knownLine struct {
	revoked  bool
	patterns []hostPattern
	key      xssh.PublicKey
}

type hostPattern struct {
	negate bool
	// hashed entries (|1|salt|hash) match the normalized address.
	salt, hash []byte
	host, port string
}

// parseKnownHosts parses known_hosts lines (an element may hold several
// lines). Blank lines and comments are skipped. @cert-authority lines are
// refused: host certificates are not supported.
func parseKnownHosts(lines []string) (*hostKeyDB, error) {
	db := &hostKeyDB{}
	n := 0
	for _, elem := range lines {
		for _, line := range strings.Split(elem, "\n") {
			n++
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			marker, hosts, key, _, _, err := xssh.ParseKnownHosts([]byte(line))
			if err != nil {
				return nil, fmt.Errorf("line %d: not a known_hosts line: %v", n, err)
			}
			kl := knownLine{key: key}
			switch marker {
			case "":
			case "revoked":
				kl.revoked = true
			default:
				return nil, fmt.Errorf("line %d: marker @%s is not supported", n, marker)
			}
			for _, h := range hosts {
				p, err := parsePattern(h)
				if err != nil {
					return nil, fmt.Errorf("line %d: host pattern %q: %v", n, h, err)
				}
				kl.patterns = append(kl.patterns, p)
			}
			if !kl.revoked && len(kl.patterns) == 0 {
				return nil, fmt.Errorf("line %d: no host pattern", n)
			}
			db.lines = append(db.lines, kl)
		}
	}
	return db, nil
}

func parsePattern(p string) (hostPattern, error) {
	var hp hostPattern
	if strings.HasPrefix(p, "!") {
		hp.negate = true
		p = p[1:]
	}
	if p == "" {
		return hp, errors.New("empty pattern")
	}
	if strings.HasPrefix(p, "|") {
		parts := strings.Split(p, "|")
		if len(parts) != 4 || parts[1] != "1" {
			return hp, errors.New("unsupported hashed host")
		}
		var err error
		if hp.salt, err = base64.StdEncoding.DecodeString(parts[2]); err != nil {
			return hp, errors.New("bad salt in hashed host")
		}
		if hp.hash, err = base64.StdEncoding.DecodeString(parts[3]); err != nil {
			return hp, errors.New("bad hash in hashed host")
		}
		return hp, nil
	}
	if strings.HasPrefix(p, "[") {
		h, port, err := net.SplitHostPort(p)
		if err != nil {
			return hp, err
		}
		hp.host, hp.port = h, port
		return hp, nil
	}
	hp.host, hp.port = p, "22"
	return hp, nil
}

func (p hostPattern) match(host string, port int) bool {
	if p.hash != nil {
		mac := hmac.New(sha1.New, p.salt)
		mac.Write([]byte(knownhosts.Normalize(joinHostPort(host, port))))
		return hmac.Equal(mac.Sum(nil), p.hash)
	}
	return p.port == strconv.Itoa(port) && wildcardMatch(p.host, host)
}

// wildcardMatch matches OpenSSH host patterns: '*' any run, '?' one byte.
func wildcardMatch(pat, s string) bool {
	for len(pat) > 0 {
		switch pat[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if wildcardMatch(pat[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || !strings.EqualFold(pat[:1], s[:1]) {
				return false
			}
		}
		pat, s = pat[1:], s[1:]
	}
	return s == ""
}

func (l knownLine) matches(host string, port int) bool {
	matched := false
	for _, p := range l.patterns {
		if p.match(host, port) {
			if p.negate {
				return false
			}
			matched = true
		}
	}
	return matched
}

// trusted returns the non-revoked keys trusted for host:port.
func (db *hostKeyDB) trusted(host string, port int) []xssh.PublicKey {
	var out []xssh.PublicKey
	for _, l := range db.lines {
		if !l.revoked && l.matches(host, port) {
			out = append(out, l.key)
		}
	}
	return out
}

func (db *hostKeyDB) revoked(key xssh.PublicKey) bool {
	for _, l := range db.lines {
		if l.revoked && bytes.Equal(l.key.Marshal(), key.Marshal()) {
			return true
		}
	}
	return false
}

// algorithms returns the host key algorithms to negotiate so that the server
// offers a key of a type known_hosts trusts (as OpenSSH orders them), or nil
// when none is trusted.
func algorithms(keys []xssh.PublicKey) []string {
	var out []string
	seen := map[string]bool{}
	add := func(a ...string) {
		for _, s := range a {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	for _, k := range keys {
		if k.Type() == xssh.KeyAlgoRSA {
			add(xssh.KeyAlgoRSASHA512, xssh.KeyAlgoRSASHA256, xssh.KeyAlgoRSA)
		} else {
			add(k.Type())
		}
	}
	return out
}

// callback is the strict host key check: the offered key must equal a
// trusted, non-revoked key for host:port.
func (db *hostKeyDB) callback(host string, port int) xssh.HostKeyCallback {
	return func(_ string, _ net.Addr, key xssh.PublicKey) error {
		e := &hostKeyError{Host: host, Port: port, KeyType: key.Type(), Fingerprint: xssh.FingerprintSHA256(key)}
		if db.revoked(key) {
			e.Revoked, e.Err = true, drivers.ErrHostKeyMismatch
			return e
		}
		trusted := db.trusted(host, port)
		for _, k := range trusted {
			if bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
			e.Trusted = append(e.Trusted, xssh.FingerprintSHA256(k))
		}
		e.Err = drivers.ErrHostKeyUnknown
		if len(trusted) > 0 {
			e.Err = drivers.ErrHostKeyMismatch
		}
		return e
	}
}

var errScanned = errors.New("ssh: host key scanned")

// ScanHostKey connects to host:port, reads the host key the server offers
// and disconnects before authenticating. It returns a known_hosts line for
// the key and the key's SHA256 fingerprint, for an operator to compare with
// the server's and save in the known_hosts field: this is the only way to
// trust a key on first use, and the driver never does it by itself. The
// context bounds the whole scan; errors wrap drivers.ErrUnreachable when the
// server cannot be reached.
func ScanHostKey(ctx context.Context, host string, port int) (knownHostsLine, fingerprint string, err error) {
	if err := checkHost(host); err != nil {
		return "", "", fmt.Errorf("ssh: scan: %w: %v", config.ErrInvalid, err)
	}
	if err := checkPort(int64(port)); err != nil {
		return "", "", fmt.Errorf("ssh: scan: %w: %v", config.ErrInvalid, err)
	}
	addr := joinHostPort(host, port)
	var offered xssh.PublicKey
	cfg := &xssh.ClientConfig{
		User: "berth-scan",
		HostKeyCallback: func(_ string, _ net.Addr, key xssh.PublicKey) error {
			offered = key
			return errScanned
		},
		HostKeyAlgorithms: []string{xssh.KeyAlgoED25519, xssh.KeyAlgoECDSA256, xssh.KeyAlgoECDSA384, xssh.KeyAlgoECDSA521, xssh.KeyAlgoRSASHA512, xssh.KeyAlgoRSASHA256},
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	conn, err := dialTCP(ctx, addr)
	if err != nil {
		return "", "", err
	}
	defer conn.Close()
	stop := closeOnDone(ctx, conn)
	defer stop()
	_, _, _, err = xssh.NewClientConn(conn, addr, cfg)
	if offered == nil {
		return "", "", classifyHandshake(ctx, addr, "", err)
	}
	return knownhosts.Line([]string{addr}, offered), xssh.FingerprintSHA256(offered), nil
}
