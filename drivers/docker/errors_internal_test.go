package docker

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/docker/docker/client"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/internal/reason"
)

// PRB-5: an engine endpoint whose certificate fails verification is
// ErrTLSUnverified (code tls_unverified), never ErrUnavailable or
// ErrUnreachable. The engine client talks to a real TLS server on loopback
// whose self-signed certificate the client does not trust.
func TestEngineCertificateFailureIsTLSUnverified(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	host := "tcp://" + strings.TrimPrefix(srv.URL, "https://")
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithHTTPClient(hc), client.WithVersion("1.41"))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	_, perr := cli.Ping(context.Background())
	if perr == nil {
		t.Fatal("Ping of an untrusted TLS endpoint succeeded")
	}
	err = engineErr(host, "ping", perr)
	if !errors.Is(err, drivers.ErrTLSUnverified) || errors.Is(err, drivers.ErrUnavailable) || !strings.Contains(err.Error(), host) {
		t.Errorf("engineErr = %v, want ErrTLSUnverified (not ErrUnavailable) naming %s", err, host)
	}
	if got := reason.Of(err); got != reason.TLSUnverified {
		t.Errorf("CodeOf = %s, want %s", got, reason.TLSUnverified)
	}
}
