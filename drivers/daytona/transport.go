package daytona

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/berthdev/berth/drivers/config"
)

// Transport safety of the client: secret redaction, the origins the bearer
// token may go to, the redirect policy and the classification of TLS
// verification failures.

// scrub removes the API key from text that came from outside (CFG-3): not
// only the whole key but every run of 8 or more bytes that is a substring of
// it, so that a key cut by a provider's (or anyone's) truncation, or split
// across a line, is still redacted. Callers scrub before they shorten.
func (c *client) scrub(s string) string { return redactSecret(s, c.key) }

// minSecretRun is the shortest run of a secret that redactSecret removes.
const minSecretRun = 8

// redactSecret replaces in s every maximal run of at least minSecretRun
// bytes that occurs in secret with config.Redacted.
func redactSecret(s, secret string) string {
	if len(secret) < minSecretRun || len(s) < minSecretRun {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, config.Redacted)
		}
		return s
	}
	grams := make(map[string]struct{}, len(secret))
	for i := 0; i+minSecretRun <= len(secret); i++ {
		grams[secret[i:i+minSecretRun]] = struct{}{}
	}
	var b strings.Builder
	last := 0
	for i := 0; i+minSecretRun <= len(s); {
		if _, ok := grams[s[i:i+minSecretRun]]; !ok {
			i++
			continue
		}
		j := i + minSecretRun
		for j < len(s) && strings.Contains(secret, s[i:j+1]) {
			j++
		}
		b.WriteString(s[last:i])
		b.WriteString(config.Redacted)
		last, i = j, j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// tlsUnverified reports whether err is a failed certificate verification:
// a permanent failure of the target's configuration (PRB-5), not a
// transient one.
func tlsUnverified(err error) bool {
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var ce x509.ConstraintViolationError
	return errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &ce)
}

// sameOrigin reports whether a and b have the same scheme, host and port
// (default ports made explicit).
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}

// tokenAllowed checks that the bearer token may go to u: the configured
// API origin, or any https origin (a toolbox proxy the API names). Plain
// http to another origin is refused.
func (c *client) tokenAllowed(u *url.URL) error {
	if sameOrigin(u, c.api) || strings.EqualFold(u.Scheme, "https") {
		return nil
	}
	return fmt.Errorf("refusing to send the API key over %s to %s, which is not the configured API origin %s://%s",
		u.Scheme, u.Host, c.api.Scheme, c.api.Host)
}

// checkRedirect is the client's redirect policy: a redirect is followed
// only to the same scheme, host and port as the request it answers, at
// most 5 times; anything else ends the request with errRedirect, so that
// the bearer token never follows a redirect elsewhere (Go's client keeps
// Authorization across ports of one host).
func checkRedirect(req *http.Request, via []*http.Request) error {
	prev := via[len(via)-1].URL
	if !sameOrigin(req.URL, prev) {
		return fmt.Errorf("%w: %s://%s to %s://%s", errRedirect, prev.Scheme, prev.Host, req.URL.Scheme, req.URL.Host)
	}
	if len(via) >= 5 {
		return fmt.Errorf("%w: more than 5 redirects", errRedirect)
	}
	return nil
}

// withRedirectPolicy returns a copy of hc whose redirects follow
// checkRedirect.
func withRedirectPolicy(hc *http.Client) *http.Client {
	c := *hc
	c.CheckRedirect = checkRedirect
	return &c
}
