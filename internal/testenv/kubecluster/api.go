package kubecluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"
)

// apiClient calls the API server as the admin user, with JSON (the package
// stays free of client-go so that it compiles fast).
type apiClient struct{ http *http.Client }

func newAPIClient(d layout) (*apiClient, error) {
	cert, err := tls.LoadX509KeyPair(d.path("pki/admin.crt"), d.path("pki/admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(d.path("pki/ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	return &apiClient{http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
		},
	}}, nil
}

// do sends a request with in as its JSON body (none when nil) and returns
// the status and the body (at most 8 MiB).
func (a *apiClient) do(ctx context.Context, method, path string, in any) (int, []byte, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, APIServer+path, body)
	if err != nil {
		return 0, nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, b, err
}

// Do sends one request to the API server as the admin user: method, a
// path ("/api/v1/namespaces/x/pods"), in marshalled as the JSON body (none
// when nil). It returns the response's status and body (at most 8 MiB); an
// error only when no response came.
func (c *Cluster) Do(ctx context.Context, method, path string, in any) (status int, body []byte, err error) {
	return c.api.do(ctx, method, path, in)
}

// Namespace creates a namespace named prefix plus a random suffix, waits
// until its default service account exists (the API server refuses pods
// in a namespace before that), and deletes it when t ends (unless the
// cluster has stopped), without waiting for its pods to go. It returns
// the namespace's name; it fails t when the namespace cannot be created.
func (c *Cluster) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	return c.namespace(t, prefix, true)
}

// namespace is Namespace, deleting the namespace when t ends only if
// cleanup.
func (c *Cluster) namespace(t testing.TB, prefix string, cleanup bool) string {
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := prefix + "-" + hex.EncodeToString(suffix)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, body, err := c.api.do(ctx, "POST", "/api/v1/namespaces", map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name},
	})
	if err != nil || code != http.StatusCreated {
		t.Fatalf("kubecluster: create namespace %s: %d %v %s", name, code, err, body)
	}
	t.Cleanup(func() {
		if !cleanup {
			return
		}
		c.mu.Lock()
		stopped := c.stopped
		c.mu.Unlock()
		if stopped { // gone with the cluster
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if code, body, err := c.api.do(ctx, "DELETE", "/api/v1/namespaces/"+name, nil); err != nil || (code != http.StatusOK && code != http.StatusAccepted && code != http.StatusNotFound) {
			t.Errorf("kubecluster: delete namespace %s: %d %v %s", name, code, err, body)
		}
	})
	if err := c.waitFor(ctx, "the default service account of namespace "+name, func() (bool, error) {
		code, _, err := c.api.do(ctx, "GET", "/api/v1/namespaces/"+name+"/serviceaccounts/default", nil)
		return err == nil && code == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("kubecluster: %v", err)
	}
	return name
}

// apiError describes a response that was not the expected one.
func apiError(what string, code int, body []byte) error {
	var st struct{ Message string }
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		return fmt.Errorf("%s: HTTP %d: %s", what, code, st.Message)
	}
	return fmt.Errorf("%s: HTTP %d: %.300s", what, code, body)
}
