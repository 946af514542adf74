package prpwire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/prp"
	"github.com/berthdev/berth/internal/prpkeys"
)

// Token errors, each with a stable code (CodeOf).
var (
	// ErrTokenMalformed: the text is not a token.
	ErrTokenMalformed = errcode.New(errcode.AuthFailed, "prp: token malformed")
	// ErrTokenInvalid: the signature does not verify or the key is unknown.
	ErrTokenInvalid = errcode.New(errcode.AuthFailed, "prp: token invalid")
	// ErrTokenExpired: the token's expiry has passed.
	ErrTokenExpired = errcode.New(errcode.AuthFailed, "prp: token expired")
)

// DefaultTokenTTL is the default lifetime of a task-scoped connection token;
// the controller renews it while the runner is connected.
const DefaultTokenTTL = 15 * time.Minute

// MaxProbeTokenTTL is the longest a probe-scoped token lives.
const MaxProbeTokenTTL = 2 * time.Minute

// MaxTokenLen bounds a token's text form.
const MaxTokenLen = 2048

const tokenPrefix = "prpk1"

var kidRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Claims are what a connection token grants: one lease and run of one
// company, a scope, and the session it belongs to.
type Claims struct {
	Lease     string    `json:"lease"`
	Run       string    `json:"run"`
	Company   string    `json:"company"`
	Scope     prp.Scope `json:"scope"`
	Session   string    `json:"session"`
	IssuedAt  time.Time `json:"iat"`
	ExpiresAt time.Time `json:"exp"`
}

// Validate checks the claims' fields.
func (c *Claims) Validate() error {
	switch {
	case !ValidID(c.Lease) || !ValidID(c.Run) || !ValidID(c.Company) || !ValidID(c.Session):
		return errors.New("claims: fields lease, run, company and session must be valid ids")
	case !c.Scope.Valid():
		return fmt.Errorf("claims: field scope %q is unknown", c.Scope)
	case !c.ExpiresAt.After(c.IssuedAt):
		return errors.New("claims: field exp must be after iat")
	}
	return nil
}

// Authorize returns nil if a command for lease and run is in the claims'
// scope, else prp.ErrScopeDenied naming the command's lease and run. A
// probe scope authorizes no command.
func (c *Claims) Authorize(lease, run string) error {
	if c.Scope != prp.ScopeTask {
		return fmt.Errorf("%w: a %s identity runs no command", prp.ErrScopeDenied, c.Scope)
	}
	if lease != c.Lease || run != c.Run {
		return fmt.Errorf("%w: command for lease %q run %q on a connection for another lease or run", prp.ErrScopeDenied, lease, run)
	}
	return nil
}

// keysOf returns s's keys (prp.Signer is defined on prpkeys.Keys); a nil
// Signer has none, and its Keys read as empty.
func keysOf(s *prp.Signer) *prpkeys.Keys { return (*prpkeys.Keys)(s) }

// Mint returns the text form of a token carrying c, signed with s's current
// key.
func Mint(s *prp.Signer, c Claims) (string, error) {
	if err := c.Validate(); err != nil {
		return "", fmt.Errorf("prp: mint token: %w", err)
	}
	k := keysOf(s)
	if k.Key(k.Current()) == nil {
		return "", errors.New("prp: mint token: no signer")
	}
	c.IssuedAt, c.ExpiresAt = c.IssuedAt.UTC(), c.ExpiresAt.UTC()
	payload, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("prp: mint token: %w", err)
	}
	head := tokenPrefix + "." + k.Current() + "." + base64.RawURLEncoding.EncodeToString(payload)
	tok := head + "." + base64.RawURLEncoding.EncodeToString(mac(k, k.Current(), head))
	if len(tok) > MaxTokenLen {
		return "", fmt.Errorf("prp: mint token: %d characters, limit %d", len(tok), MaxTokenLen)
	}
	return tok, nil
}

func mac(k *prpkeys.Keys, kid, head string) []byte {
	m := hmac.New(sha256.New, k.Key(kid))
	m.Write([]byte(head))
	return m.Sum(nil)
}

// Verify checks tok's signature under s's keys and its expiry at now and
// returns its claims: ErrTokenMalformed, ErrTokenInvalid (unknown key, bad
// signature, bad claims) or ErrTokenExpired. Errors never quote the token.
func Verify(s *prp.Signer, tok string, now time.Time) (Claims, error) {
	c, err := verifySignature(keysOf(s), tok)
	if err != nil {
		return Claims{}, err
	}
	if !now.Before(c.ExpiresAt) {
		return Claims{}, fmt.Errorf("%w: session %s expired at %s", ErrTokenExpired, c.Session, c.ExpiresAt.Format(time.RFC3339))
	}
	return c, nil
}

func verifySignature(k *prpkeys.Keys, tok string) (Claims, error) {
	if len(tok) > MaxTokenLen {
		return Claims{}, fmt.Errorf("%w: longer than %d characters", ErrTokenMalformed, MaxTokenLen)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || parts[0] != tokenPrefix || !kidRE.MatchString(parts[1]) {
		return Claims{}, fmt.Errorf("%w: want %s.<key id>.<claims>.<mac>", ErrTokenMalformed, tokenPrefix)
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(parts[3])
	if err != nil || len(sig) != sha256.Size {
		return Claims{}, fmt.Errorf("%w: the mac is not base64url of %d bytes", ErrTokenMalformed, sha256.Size)
	}
	if k.Key(parts[1]) == nil {
		return Claims{}, fmt.Errorf("%w: key id %q is unknown", ErrTokenInvalid, parts[1])
	}
	head := tok[:len(tok)-len(parts[3])-1]
	if !hmac.Equal(sig, mac(k, parts[1], head)) {
		return Claims{}, fmt.Errorf("%w: signature does not verify", ErrTokenInvalid)
	}
	payload, err := base64.RawURLEncoding.Strict().DecodeString(parts[2])
	if err != nil {
		return Claims{}, fmt.Errorf("%w: claims are not base64url", ErrTokenInvalid)
	}
	var c Claims
	if err := strictUnmarshal(payload, &c); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrTokenInvalid, err)
	}
	if err := c.Validate(); err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrTokenInvalid, err)
	}
	return c, nil
}

// StateKeyLen is the length of a session's state key (StateKey).
const StateKeyLen = sha256.Size

// StateKey returns the state key of session: the HMAC-SHA-256, under s's
// current signing key, of a fixed label and the session id. It is never
// stored: every replica sharing the Signer's keys derives the same key,
// and a resume exchange hands it to a restarted runner again. The runner
// keeps it in memory and authenticates its journal and outbox records with
// it, so that records a task wrote into its state directory are not
// trusted. (Rotating the current key changes it: a runner resumed after a
// rotation finds its older records unauthenticated and treats them as
// lost, never as commands to run.)
func StateKey(s *prp.Signer, session string) []byte {
	k := keysOf(s)
	m := hmac.New(sha256.New, k.Key(k.Current()))
	m.Write([]byte("berth prp state key v1\x00"))
	m.Write([]byte(session))
	return m.Sum(nil)
}
