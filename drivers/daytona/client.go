package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/errcode"
)

// client is a focused client of the Daytona REST API and of the toolbox API
// reached through the sandbox's toolbox proxy. One attempt per call of send;
// retries are the caller's (see backoff). It never puts the API key anywhere
// but the Authorization header, and scrubs it from any text it reports.
type client struct {
	http  *http.Client
	api   *url.URL // the API base, for example https://app.daytona.io/api
	key   string
	org   string // X-Daytona-Organization-ID, "" for none
	retry backoff
	log   *slog.Logger
}

// apiError is an error answer of the API or the toolbox. It unwraps to the
// drivers sentinel its status maps to: 401/403 ErrAuth, 404 ErrNotFound, 408
// ErrTimeout, 409/429/5xx ErrTransient; other statuses wrap no sentinel.
type apiError struct {
	op         string // "POST /sandbox/<id>/stop"
	host       string // the API or toolbox host
	status     int
	message    string // the provider's message, key scrubbed
	retryAfter time.Duration
	kind       error
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("daytona: %s at %s: %d %s", e.op, e.host, e.status, http.StatusText(e.status))
	if e.message != "" {
		s += ": " + e.message
	}
	if e.kind != nil {
		s += " (" + e.kind.Error() + ")"
	}
	return s
}

// Unwrap returns the sentinel of the status; a refused key also gets a
// sentence for a person (errcode.MessageOf).
func (e *apiError) Unwrap() error {
	if e.kind == drivers.ErrAuth {
		return &errcode.Error{Target: "Daytona at " + e.host,
			Message: fmt.Sprintf("Daytona at %s refused the API key (%d %s): check the key and its organization.", e.host, e.status, http.StatusText(e.status)),
			Err:     e.kind}
	}
	return e.kind
}

// statusKind maps an HTTP status to the drivers sentinel.
func statusKind(status int) error {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return drivers.ErrAuth
	case status == http.StatusNotFound:
		return errcode.ErrNotFound
	case status == http.StatusRequestTimeout:
		return drivers.ErrTimeout
	case status == http.StatusConflict, status == http.StatusTooManyRequests, status >= 500:
		return drivers.ErrTransient
	}
	return nil
}

func statusOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status
	}
	return 0
}

func messageOf(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.message
	}
	return ""
}

// seg joins path segments, escaping each.
func seg(parts ...string) string {
	esc := make([]string, len(parts))
	for i, p := range parts {
		esc[i] = url.PathEscape(p)
	}
	return strings.Join(esc, "/")
}

// Bounds of the answers the client reads (every answer is bounded, so that
// a provider, or a command writing to the toolbox's stdout, cannot exhaust
// the host's memory).
const (
	// apiAnswerLimit bounds one answer of the REST API (a list page of 100
	// sandboxes with labels is well under it).
	apiAnswerLimit = 8 << 20
	// errorBodyLimit bounds the part of an error body that is read.
	errorBodyLimit = 64 << 10
)

// errAnswerTooLarge marks an answer longer than the bound the request set.
var errAnswerTooLarge = errors.New("answer exceeds its size bound")

// errRedirect marks a redirect the client refused.
var errRedirect = errors.New("redirect refused")

// send makes one request to base joined with path (already escaped, see
// seg) and query, with in as the JSON body when not nil, and decodes a 2xx
// answer of at most apiAnswerLimit bytes into out when not nil.
func (c *client) send(ctx context.Context, base *url.URL, method, path string, query url.Values, in, out any) error {
	return c.sendLimit(ctx, base, method, path, query, in, out, apiAnswerLimit)
}

// sendLimit is send with the answer bounded to limit bytes: a longer
// answer is not read further and fails with an error naming the bound.
// The bearer token goes only to the configured API origin or to an https
// origin (see tokenAllowed); redirects are refused when they change
// scheme, host or port (see checkRedirect). A TLS verification failure is
// drivers.ErrTLSUnverified, never transient.
func (c *client) sendLimit(ctx context.Context, base *url.URL, method, path string, query url.Values, in, out any, limit int64) error {
	var body io.Reader
	contentType := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("daytona: %s %s: encoding request: %w", method, path, err)
		}
		body, contentType = bytes.NewReader(b), "application/json"
	}
	resp, op, host, err := c.do(ctx, base, method, path, query, body, contentType)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("daytona: %s at %s: reading answer: %w", op, host, cerr)
		}
		return fmt.Errorf("daytona: %s at %s: reading answer: %w: %s", op, host, drivers.ErrTransient, c.scrub(err.Error()))
	}
	if int64(len(raw)) > limit {
		return fmt.Errorf("daytona: %s at %s: %w: more than %d bytes", op, host, errAnswerTooLarge, limit)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("daytona: %s at %s: decoding answer: %w: %v", op, host, drivers.ErrTransient, err)
	}
	return nil
}

// do makes one request to base joined with path and query, with body of
// contentType when not nil, under send's rules (the token, redirects,
// TLS), and returns a 2xx answer for the caller to read and close, the
// operation's name and the host; another status is an *apiError.
func (c *client) do(ctx context.Context, base *url.URL, method, path string, query url.Values, body io.Reader, contentType string) (*http.Response, string, string, error) {
	u := *base
	u.Path = strings.TrimRight(base.Path, "/") + "/" + path
	u.RawPath = strings.TrimRight(base.EscapedPath(), "/") + "/" + path
	u.RawQuery = query.Encode()
	op := method + " " + strings.TrimPrefix(u.Path, strings.TrimRight(c.api.Path, "/"))
	if err := c.tokenAllowed(&u); err != nil {
		return nil, op, u.Host, fmt.Errorf("daytona: %s at %s: %w", op, u.Host, err)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, op, u.Host, fmt.Errorf("daytona: %s at %s: %w", op, u.Host, err)
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "berth-daytona")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.org != "" {
		req.Header.Set("X-Daytona-Organization-ID", c.org)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.log.DebugContext(ctx, "daytona request failed", "op", op, "host", u.Host, "elapsed", time.Since(start))
		if cerr := ctx.Err(); cerr != nil {
			return nil, op, u.Host, fmt.Errorf("daytona: %s at %s: %w", op, u.Host, cerr)
		}
		var kind error = drivers.ErrTransient
		switch {
		case tlsUnverified(err):
			kind = drivers.ErrTLSUnverified
		case errors.Is(err, errRedirect):
			kind = errRedirect
		case isDial(err) && sameOrigin(&u, c.api):
			// The API is the provider's control plane (PRB-5).
			kind = drivers.ErrUnavailable
		case isDial(err):
			kind = drivers.ErrUnreachable // the sandbox's toolbox
		}
		err = fmt.Errorf("daytona: %s at %s: %w: %s", op, u.Host, kind, c.scrub(transportReason(err)))
		switch kind {
		case drivers.ErrUnavailable:
			return nil, op, u.Host, &errcode.Error{Message: fmt.Sprintf("Daytona at %s cannot be reached: check the api_url setting and the network path to it.", u.Host), Err: err}
		case drivers.ErrUnreachable:
			return nil, op, u.Host, &errcode.Error{Message: fmt.Sprintf("The sandbox's toolbox at %s cannot be reached: check that the sandbox is running.", u.Host), Err: err}
		case drivers.ErrTLSUnverified:
			return nil, op, u.Host, &errcode.Error{Message: fmt.Sprintf("The certificate of %s failed verification: check the api_url and the certificate it presents.", u.Host), Err: err}
		}
		return nil, op, u.Host, err
	}
	c.log.DebugContext(ctx, "daytona request", "op", op, "host", u.Host, "status", resp.StatusCode, "elapsed", time.Since(start))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyLimit))
		return nil, op, u.Host, &apiError{
			op:         op,
			host:       u.Host,
			status:     resp.StatusCode,
			message:    errorMessage(raw, c.scrub),
			retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
			kind:       statusKind(resp.StatusCode),
		}
	}
	return resp, op, u.Host, nil
}

// isDial reports whether err is a failure to connect.
func isDial(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && ne.Op == "dial"
}

// transportReason returns the innermost reason of a transport error without
// the URL that url.Error adds (URLs carry no secret, but the reason is
// shorter).
func transportReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// errorMessage reads the provider's message out of an error body (the
// API's and toolbox's "message", the PTY's "error"), falling back to the
// raw text; it scrubs the text first and shortens it after, so that a
// secret cut by the shortening is still removed.
func errorMessage(raw []byte, scrub func(string) string) string {
	var b apiErrorBody
	if json.Unmarshal(raw, &b) == nil && b.Message != "" {
		return shorten(scrub(b.Message))
	}
	if b.Message == "" && b.Error != "" && b.StatusCode == 0 {
		return shorten(scrub(b.Error))
	}
	return shorten(scrub(strings.TrimSpace(string(raw))))
}

func shorten(s string) string {
	const maxLen = 300
	if len(s) > maxLen {
		return s[:maxLen] + "..."
	}
	return s
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// sendPublic makes one GET to a public API route (no credentials sent)
// and decodes its bounded answer into out. It shares send's transport
// rules (redirects, TLS, bounds).
func (c *client) sendPublic(ctx context.Context, path string, out any) error {
	anon := *c
	anon.key, anon.org = "", ""
	return anon.send(ctx, c.api, http.MethodGet, path, nil, nil, out)
}

// call is send with retries of transient failures inside ctx's deadline.
func (c *client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	return c.retry.do(ctx, func(ctx context.Context) error {
		return c.send(ctx, c.api, method, path, query, in, out)
	})
}

func (c *client) getSandbox(ctx context.Context, idOrName string) (*apiSandbox, error) {
	var sb apiSandbox
	if err := c.call(ctx, http.MethodGet, seg("sandbox", idOrName), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// createSandbox creates a sandbox. req.Name must be set and unique: a retry
// of a create whose answer was lost then meets the API's name conflict
// (409), and the sandbox is read back by that name instead of being created
// twice.
func (c *client) createSandbox(ctx context.Context, req apiCreateSandbox) (*apiSandbox, error) {
	var sb apiSandbox
	err := c.retry.do(ctx, func(ctx context.Context) error {
		err := c.send(ctx, c.api, http.MethodPost, "sandbox", nil, req, &sb)
		if statusOf(err) == http.StatusConflict {
			got, gerr := c.send1Sandbox(ctx, req.Name)
			if gerr == nil {
				sb = *got
				return nil
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &sb, nil
}

// send1Sandbox reads a sandbox once, without retries.
func (c *client) send1Sandbox(ctx context.Context, idOrName string) (*apiSandbox, error) {
	var sb apiSandbox
	if err := c.send(ctx, c.api, http.MethodGet, seg("sandbox", idOrName), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

func (c *client) sandboxAction(ctx context.Context, id, action string) (*apiSandbox, error) {
	var sb apiSandbox
	if err := c.call(ctx, http.MethodPost, seg("sandbox", id, action), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

//lint:ignore U1000 drivers/daytona is being rewritten in parallel (issue 15); that rewrite decides whether DELETE /sandbox is used or removed.
func (c *client) deleteSandbox(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, seg("sandbox", id), nil, nil, nil)
}

// listSandboxes walks every cursor page of GET /sandbox filtered by labels.
// It asks for sort=createdAt, order=asc: the API's default order is
// lastActivityAt desc with the cursor keyed on it (v0.190.0
// apps/api/src/sandbox/dto/list-sandboxes-query.dto.ts and
// adapters/sandbox-typeorm-search.adapter.ts), and the proxy bumps that
// field on every toolbox request, so a walk in that order skips or repeats
// sandboxes that are used while it runs. Creation times do not change;
// ties break on the id. The endpoint is still eventually consistent: a
// sandbox created or changed during the walk may be missing from it, and
// is found by the next one. Ids seen twice are kept once.
func (c *client) listSandboxes(ctx context.Context, labels map[string]string) ([]apiSandbox, error) {
	var all []apiSandbox
	seen := map[string]bool{}
	q := url.Values{"limit": {"100"}, "sort": {"createdAt"}, "order": {"asc"}}
	if len(labels) > 0 {
		b, err := json.Marshal(labels)
		if err != nil {
			return nil, fmt.Errorf("daytona: encoding labels: %w", err)
		}
		q.Set("labels", string(b))
	}
	for page := 0; ; page++ {
		var resp apiListSandboxes
		if err := c.call(ctx, http.MethodGet, "sandbox", q, nil, &resp); err != nil {
			return nil, err
		}
		for _, it := range resp.Items {
			if !seen[it.ID] {
				seen[it.ID] = true
				all = append(all, it)
			}
		}
		if resp.NextCursor == nil || *resp.NextCursor == "" {
			return all, nil
		}
		if page > 10000 {
			return nil, fmt.Errorf("daytona: GET /sandbox at %s: more than 10000 pages", c.api.Host)
		}
		q.Set("cursor", *resp.NextCursor)
	}
}

func (c *client) getSnapshot(ctx context.Context, id string) (*apiSnapshot, error) {
	var s apiSnapshot
	if err := c.call(ctx, http.MethodGet, seg("snapshots", id), nil, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func (c *client) deleteSnapshot(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, seg("snapshots", id), nil, nil, nil)
}

func (c *client) snapshotSandbox(ctx context.Context, id, name string) (*apiSandbox, error) {
	var sb apiSandbox
	err := c.call(ctx, http.MethodPost, seg("sandbox", id, "snapshot"), nil, apiCreateSandboxSnapshot{Name: name}, &sb)
	if err != nil {
		return nil, err
	}
	return &sb, nil
}

// toolboxBase returns the toolbox API base of sandbox sb:
// {toolboxProxyUrl}/{sandboxId}. When the sandbox record carries no proxy
// URL it is asked for (GET /sandbox/{id}/toolbox-proxy-url).
func (c *client) toolboxBase(ctx context.Context, sb *apiSandbox) (*url.URL, error) {
	proxy := sb.ToolboxProxyURL
	if proxy == "" {
		var p apiToolboxProxyURL
		if err := c.call(ctx, http.MethodGet, seg("sandbox", sb.ID, "toolbox-proxy-url"), nil, nil, &p); err != nil {
			return nil, err
		}
		proxy = p.URL
	}
	u, err := url.Parse(proxy)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("daytona: sandbox %s at %s: toolbox proxy URL %q is not an http(s) URL", sb.ID, c.api.Host, proxy)
	}
	if err := c.tokenAllowed(u); err != nil {
		return nil, fmt.Errorf("daytona: sandbox %s: toolbox proxy URL: %w", sb.ID, err)
	}
	return u.JoinPath(sb.ID), nil
}

// execute runs one toolbox process/execute request, without retries: a
// command must not run twice. The answer is bounded to limit bytes.
func (c *client) execute(ctx context.Context, toolbox *url.URL, req apiExecuteRequest, limit int64) (*apiExecuteResponse, error) {
	var out apiExecuteResponse
	if err := c.sendLimit(ctx, toolbox, http.MethodPost, "process/execute", nil, req, &out, limit); err != nil {
		return nil, err
	}
	return &out, nil
}
