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

func (e *apiError) Unwrap() error { return e.kind }

// statusKind maps an HTTP status to the drivers sentinel.
func statusKind(status int) error {
	switch {
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		return drivers.ErrAuth
	case status == http.StatusNotFound:
		return drivers.ErrNotFound
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

// scrub removes the API key from text that came from outside.
func (c *client) scrub(s string) string {
	if c.key != "" {
		s = strings.ReplaceAll(s, c.key, drivers.Redacted)
	}
	return s
}

// send makes one request to base joined with path (already escaped, see
// seg) and query, with in as the JSON body when not nil, and decodes a 2xx
// answer into out when not nil.
func (c *client) send(ctx context.Context, base *url.URL, method, path string, query url.Values, in, out any) error {
	u := *base
	u.Path = strings.TrimRight(base.Path, "/") + "/" + path
	u.RawPath = strings.TrimRight(base.EscapedPath(), "/") + "/" + path
	u.RawQuery = query.Encode()
	op := method + " " + strings.TrimPrefix(u.Path, strings.TrimRight(c.api.Path, "/"))
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("daytona: %s: encoding request: %w", op, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("daytona: %s at %s: %w", op, u.Host, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "berth-daytona")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.org != "" {
		req.Header.Set("X-Daytona-Organization-ID", c.org)
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		c.log.DebugContext(ctx, "daytona request failed", "op", op, "host", u.Host, "elapsed", time.Since(start))
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("daytona: %s at %s: %w", op, u.Host, cerr)
		}
		kind := drivers.ErrTransient
		if ne := (*net.OpError)(nil); errors.As(err, &ne) && ne.Op == "dial" {
			kind = drivers.ErrUnreachable
		}
		return fmt.Errorf("daytona: %s at %s: %w: %s", op, u.Host, kind, c.scrub(transportReason(err)))
	}
	defer resp.Body.Close()
	c.log.DebugContext(ctx, "daytona request", "op", op, "host", u.Host, "status", resp.StatusCode, "elapsed", time.Since(start))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return &apiError{
			op:         op,
			host:       u.Host,
			status:     resp.StatusCode,
			message:    c.scrub(errorMessage(raw)),
			retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
			kind:       statusKind(resp.StatusCode),
		}
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("daytona: %s at %s: reading answer: %w", op, u.Host, cerr)
		}
		return fmt.Errorf("daytona: %s at %s: decoding answer: %w: %v", op, u.Host, drivers.ErrTransient, err)
	}
	return nil
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

// errorMessage reads the provider's message out of an error body, falling
// back to the raw text, shortened.
func errorMessage(raw []byte) string {
	var b apiErrorBody
	if json.Unmarshal(raw, &b) == nil && b.Message != "" {
		return shorten(b.Message)
	}
	return shorten(strings.TrimSpace(string(raw)))
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
func (c *client) listSandboxes(ctx context.Context, labels map[string]string) ([]apiSandbox, error) {
	var all []apiSandbox
	q := url.Values{"limit": {"100"}}
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
		all = append(all, resp.Items...)
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
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("daytona: sandbox %s: toolbox proxy URL %q is not an http(s) URL", sb.ID, proxy)
	}
	return u.JoinPath(sb.ID), nil
}

// execute runs one toolbox process/execute request, without retries: a
// command must not run twice.
func (c *client) execute(ctx context.Context, toolbox *url.URL, req apiExecuteRequest) (*apiExecuteResponse, error) {
	var out apiExecuteResponse
	if err := c.send(ctx, toolbox, http.MethodPost, "process/execute", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
