package kubernetes

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// apiErr classifies an API server error (PRB-5): a certificate that failed
// verification is drivers.ErrTLSUnverified; an API server that cannot be
// reached drivers.ErrUnavailable (the cluster's control plane); 401
// drivers.ErrAuth; 403 (RBAC denies what the driver needs)
// drivers.ErrUnavailable with a sentence naming the permission; 404
// errcode.ErrNotFound; 429, 5xx and timeouts drivers.ErrTransient;
// cancellation as it is. target names the cluster and object, what the
// operation ("create pod").
func (c *cluster) apiErr(target, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %s: %w", target, what, err)
	case isTLSErr(err):
		return &errcode.Error{Target: "the Kubernetes API server at " + c.server,
			Message: fmt.Sprintf("The certificate of the Kubernetes API server at %s failed verification: check the kubeconfig's certificate-authority-data.", c.server),
			Err:     fmt.Errorf("%s: %s: %v: %w", target, what, err, drivers.ErrTLSUnverified)}
	case apierrors.IsUnauthorized(err):
		return &errcode.Error{Target: "the Kubernetes API server at " + c.server,
			Message: fmt.Sprintf("The Kubernetes API server at %s refused the kubeconfig's credentials: renew the token or certificate in the environment's kubeconfig.", c.server),
			Err:     fmt.Errorf("%s: %s: %v: %w", target, what, err, drivers.ErrAuth)}
	case apierrors.IsForbidden(err):
		return &errcode.Error{Target: "the Kubernetes API server at " + c.server,
			Message: fmt.Sprintf("The Kubernetes API server at %s forbids the credentials to %s (%s): grant the Role that docs/kubernetes.md lists.", c.server, what, reasonText(err)),
			Err:     fmt.Errorf("%s: %s: %v: %w", target, what, err, drivers.ErrUnavailable)}
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s: %s: %v: %w", target, what, err, errcode.ErrNotFound)
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsInternalError(err), apierrors.IsTimeout(err):
		return fmt.Errorf("%s: %s: %v: %w", target, what, err, drivers.ErrTransient)
	case brokenStream(err):
		// The exec's stream (WebSocket or SPDY through the API server)
		// ended without the command's exit status: the command may have
		// run; a caller whose call can be repeated tries again.
		return fmt.Errorf("%s: %s: the stream through the API server broke before the command's status came: %v: %w", target, what, err, drivers.ErrTransient)
	case isNetErr(err):
		return &errcode.Error{Target: "the Kubernetes API server at " + c.server,
			Message: fmt.Sprintf("The Kubernetes API server at %s is not reachable: check that the cluster runs and the kubeconfig's server.", c.server),
			Err:     fmt.Errorf("%s: %s: %v: %w", target, what, err, drivers.ErrUnavailable)}
	}
	return fmt.Errorf("%s: %s: %w", target, what, err)
}

// reasonText is the API server's message of a status error, bounded.
func reasonText(err error) string {
	var se apierrors.APIStatus
	msg := err.Error()
	if errors.As(err, &se) {
		msg = se.Status().Message
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// isTLSErr reports whether err is a failed certificate verification.
func isTLSErr(err error) bool {
	var (
		cv *tls.CertificateVerificationError
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
	)
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return true
	}
	return strings.Contains(err.Error(), "x509: ") || strings.Contains(err.Error(), "tls: failed to verify certificate")
}

func isNetErr(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		strings.Contains(err.Error(), "connection refused")
}

// brokenStream reports whether err is an exec stream that ended without
// its status: an abnormal WebSocket closure (1006), a connection reset or
// an unexpected EOF on the stream.
func brokenStream(err error) bool {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "websocket: close 1006") || strings.Contains(msg, "error reading from error stream")
}
