package runner

import (
	"context"
	"net"
	"net/http"
	"time"
)

// unixScheme prefixes a controller URL that names a unix socket rather
// than a host: "unix:/run/berth/prp.sock". The controller serves its PRP
// endpoints at the socket's root. This is how a runner reaches the host
// through a sandbox's runner ingress (drivers.RunnerIngress), which sends
// no IP traffic: the form drivers.RunnerIngress.Endpoint documents; the
// runner imports no driver package.
const unixScheme = "unix:"

// unixClient is an HTTP client whose every connection dials the unix
// socket at path, whatever host the URL names.
func unixClient(path string) *http.Client {
	var d net.Dialer
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, "unix", path)
			},
			MaxIdleConns:    1,
			IdleConnTimeout: 90 * time.Second,
		},
	}
}
