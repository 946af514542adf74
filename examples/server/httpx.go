package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/internal/errmsg"
)

// maxBody bounds every request body.
const maxBody = 1 << 20

var (
	// errMethod is a method a route does not serve.
	errMethod = errcode.New(errcode.Invalid, "server: method not allowed")
	// errNoRoute is a path the API does not serve.
	errNoRoute = errcode.New(errcode.NotFound, "server: no such route")
	// errIfMatchMissing is an update without If-Match (428).
	errIfMatchMissing = errcode.New(errcode.Invalid, `server: If-Match: "<revision>" is required (the ETag a GET returned)`)
	// errTooManyStreams is an event stream over the principal's limit.
	errTooManyStreams = errcode.New(errcode.Unavailable, "server: too many open event streams for this principal")
)

// fieldErr names the request field (or header) a problem is about, and
// optionally its target.
type fieldErr struct {
	err    error
	field  string
	target string
}

func (e *fieldErr) Error() string {
	if e.field == "" {
		return e.err.Error()
	}
	return e.field + ": " + e.err.Error()
}
func (e *fieldErr) Unwrap() error { return e.err }

// invalid returns an invalid-request error naming field, with a sentence
// for a person.
func invalid(field, format string, a ...any) error {
	what := fmt.Sprintf(format, a...)
	return &errcode.Error{Code: errcode.Invalid, Field: field,
		Message: errmsg.Sentence(fmt.Sprintf("%s: %s", field, what)),
		Err:     fmt.Errorf("%s: %s: %w", field, what, errcode.ErrInvalid)}
}

// apiError is the error shape of every API response that fails: the
// coarse code and the finer reason for programs, one sentence for a
// person, the technical chain as the detail, and the field and target
// the error is about.
type apiError struct {
	Code    string `json:"code"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message"`
	Detail  string `json:"detail,omitempty"`
	Field   string `json:"field,omitempty"`
	Target  string `json:"target,omitempty"`
}

// statusOf maps an error to its HTTP status: the one place where codes
// become statuses.
func statusOf(err error) int {
	var fe *environment.Error
	switch {
	case errors.Is(err, errUnauthenticated):
		return http.StatusUnauthorized
	case isQuota(err): // the run caps and the library's lease quota (runs.go)
		return http.StatusTooManyRequests
	case errors.Is(err, errIfMatchMissing):
		return http.StatusPreconditionRequired
	case errors.Is(err, errMethod):
		return http.StatusMethodNotAllowed
	case errors.Is(err, errTooManyStreams), errcode.ReasonOf(err) == "quota_exceeded":
		return http.StatusTooManyRequests
	case errors.As(err, &fe) && fe.Field == "baseRevision" && errcode.Code(err) == errcode.Conflict,
		errcode.ReasonOf(err) == "stale_revision":
		return http.StatusPreconditionFailed // a stale If-Match
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	switch errcode.Code(err) {
	case errcode.NotFound:
		return http.StatusNotFound
	case errcode.AlreadyExists, errcode.Conflict:
		return http.StatusConflict
	case errcode.Denied:
		return http.StatusForbidden
	case errcode.Invalid:
		return http.StatusBadRequest
	case errcode.Unsupported:
		return http.StatusUnprocessableEntity
	case errcode.Unavailable, errcode.Canceled:
		return http.StatusServiceUnavailable
	case errcode.Unreachable, errcode.AuthFailed:
		return http.StatusBadGateway // the target refused or could not be reached
	case errcode.Timeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// codeOf is the error code shown for err: always one of errcode's names
// (a finer cause such as missing_credentials is the reason).
func codeOf(err error) string {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return errcode.Invalid.String()
	}
	c := errcode.Code(err)
	if c == errcode.OK {
		c = errcode.Unknown
	}
	return c.String()
}

// errorBody builds the error shape of err (see apiError). The parts come
// from errcode (ReasonOf, MessageOf, FieldOf, TargetOf); the server's own
// field errors and the environment package's errors fill what is left.
func errorBody(err error) apiError {
	e := apiError{Code: codeOf(err), Reason: errcode.ReasonOf(err), Message: errcode.MessageOf(err), Detail: err.Error(),
		Field: errcode.FieldOf(err), Target: errcode.TargetOf(err)}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		e.Message = fmt.Sprintf("The request body is larger than %d bytes, the most this server reads.", mbe.Limit)
	}
	var fe *fieldErr
	var ee *environment.Error
	var ce *environment.ConfigError
	switch {
	case e.Field != "":
	case errors.As(err, &fe):
		e.Field, e.Target = fe.field, fe.target
	case errors.As(err, &ee) && ee.Field != "":
		e.Field = ee.Field
	}
	if errors.As(err, &ce) && e.Field == "" {
		if f, ok := missingSecret(ce.Err); ok {
			e.Field = "config." + f // the field the reason is about
		} else if f := ce.Fields(); len(f) > 0 {
			e.Field = "config." + f[0]
		}
	}
	if e.Target == "" && fe != nil {
		e.Target = fe.target
	}
	if e.Target == "" && ce != nil {
		e.Target = ce.Name
	}
	return e
}

// missingSecret returns the field of the first required secret field
// that err (an errors.Join tree of *config.Error) reports absent.
func missingSecret(err error) (string, bool) {
	var ce *config.Error
	if errors.As(err, &ce) && errors.Is(ce, config.ErrCredentialsMissing) {
		return ce.Field, true
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if f, ok := missingSecret(e); ok {
				return f, true
			}
		}
	}
	return "", false
}

// writeError writes err in the API's error shape.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	st := statusOf(err)
	if st >= 500 {
		s.log.Error("request failed", "id", requestID(w), "error", err.Error())
	}
	s.writeJSON(w, r, st, struct {
		Error apiError `json:"error"`
	}{errorBody(err)})
}

// writeJSON writes v as the JSON body with status st.
func (s *server) writeJSON(w http.ResponseWriter, _ *http.Request, st int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		st, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"The server could not encode its answer: please report it.","detail":"server: encoding the response failed"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(st)
	w.Write(append(b, '\n'))
}

// decode reads a bounded JSON body into v, refusing unknown fields and
// trailing data; an empty body is allowed only when optional.
func decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	data, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if optional {
			return nil
		}
		return invalid("body", "a JSON body is required")
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return invalid("Content-Type", "want application/json, got %q", ct)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return invalid(te.Field, "want a %s", te.Type)
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return invalid(strings.Trim(f, `"`), "unknown field")
		}
		return invalid("body", "malformed JSON: %v", err)
	}
	if dec.More() {
		return invalid("body", "trailing data after the JSON value")
	}
	return nil
}

// statusRecorder records the status of a response for the request log.
type statusRecorder struct {
	http.ResponseWriter
	status int
	id     string
	who    string
}

func (w *statusRecorder) WriteHeader(st int) {
	if w.status == 0 {
		w.status = st
	}
	w.ResponseWriter.WriteHeader(st)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes flushes on (event streams).
func (w *statusRecorder) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController find the connection.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestID returns the id the logging middleware gave the request.
func requestID(w http.ResponseWriter) string {
	if rec, ok := w.(*statusRecorder); ok {
		return rec.id
	}
	return ""
}

// logRequests logs one line per request: its id, method, path (never the
// query, which may hold a login link), status and duration. No CORS
// headers are ever set.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 8)
		rand.Read(b)
		rec := &statusRecorder{ResponseWriter: w, id: hex.EncodeToString(b)}
		rec.Header().Set("X-Request-Id", rec.id)
		rec.Header().Set("X-Content-Type-Options", "nosniff")
		start := time.Now()
		next.ServeHTTP(rec, r)
		s.log.Info("request", "id", rec.id, "method", r.Method, "path", r.URL.Path,
			"status", rec.status, "duration", time.Since(start), "who", rec.who)
	})
}

// audit logs one audit line: who did what to which environment, and the
// outcome (ok, or the error code).
func (s *server) audit(r *http.Request, action, env string, err error, attrs ...any) {
	who := "anonymous"
	if c := callerOf(r); c != nil {
		who = c.principal.String()
	}
	outcome := "ok"
	if err != nil {
		outcome = codeOf(err)
	}
	args := append([]any{"who", who, "action", action, "environment", env, "outcome", outcome}, attrs...)
	s.log.LogAttrs(r.Context(), slog.LevelInfo, "audit", argsToAttrs(args)...)
}

func argsToAttrs(args []any) []slog.Attr {
	var out []slog.Attr
	for i := 0; i+1 < len(args); i += 2 {
		out = append(out, slog.Any(fmt.Sprint(args[i]), args[i+1]))
	}
	return out
}

// page is one page of a list: its items and, when more follow, the opaque
// cursor of the next page.
type page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// paginate returns the page of items (sorted by key) after the request's
// cursor, of at most ?limit= items (default 50, at most 200).
func paginate[T any](r *http.Request, items []T, key func(T) string) (page[T], error) {
	limit := 50
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 200 {
			return page[T]{}, invalid("limit", "want 1..200, got %q", l)
		}
		limit = n
	}
	after := ""
	if c := r.URL.Query().Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || !bytes.HasPrefix(b, []byte("after:")) {
			return page[T]{}, invalid("cursor", "not a cursor this server returned")
		}
		after = string(b[len("after:"):])
	}
	sortBy(items, key)
	p := page[T]{Items: []T{}}
	for _, it := range items {
		if after != "" && key(it) <= after {
			continue
		}
		if len(p.Items) == limit {
			p.NextCursor = base64.RawURLEncoding.EncodeToString([]byte("after:" + key(p.Items[len(p.Items)-1])))
			break
		}
		p.Items = append(p.Items, it)
	}
	return p, nil
}

// bufferedWriter keeps a response for the idempotency record.
type bufferedWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedWriter) Header() http.Header { return b.header }
func (b *bufferedWriter) WriteHeader(st int) {
	if b.status == 0 {
		b.status = st
	}
}
func (b *bufferedWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// idempotent serves creates and runs with an Idempotency-Key header: the
// first request's response (below 500) is stored under the principal and
// key, and a retry with the same key and the same request gets it again
// without running anything; the same key with another request is a
// conflict, and so is a retry while the first is still running. Records
// last idempotencyTTL; one still running after idempotencyPending (its
// server died or its write failed) is given up, so that a retry runs.
func (s *server) idempotent(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			next(w, r)
			return
		}
		if len(key) > 200 {
			s.writeError(w, r, invalid("Idempotency-Key", "at most 200 characters"))
			return
		}
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		sum := sha256.Sum256(append([]byte(r.Method+" "+r.URL.Path+"\n"), data...))
		fp := hex.EncodeToString(sum[:])
		// Records are keyed by the credential's identity (never "ROLE ID",
		// which leaves out the grant) and replayed only to the grant they
		// were made for; the route's authorization ran before (authorizeFirst).
		who, grantee := identityOf(r), granteeOf(principalOf(r))
		ctx := r.Context()
		h := s.host
		now := s.now()
		if _, err := h.db.ExecContext(ctx, h.q(`DELETE FROM server_idempotency WHERE created_at < ? OR (principal = ? AND idem_key = ? AND status = 0 AND created_at < ?)`),
			now.Add(-idempotencyTTL).Unix(), who, key, now.Add(-idempotencyPending).Unix()); err != nil {
			s.writeError(w, r, fmt.Errorf("server: Idempotency-Key: %w", err))
			return
		}
		_, ierr := h.db.ExecContext(ctx, h.q(`INSERT INTO server_idempotency (principal, idem_key, request, status, body, created_at, grantee) VALUES (?, ?, ?, 0, '', ?, ?)`),
			who, key, fp, now.Unix(), grantee)
		if ierr != nil {
			var req, hdrs, body, grantedTo string
			var st int
			err := h.db.QueryRowContext(ctx, h.q(`SELECT request, status, headers, body, grantee FROM server_idempotency WHERE principal = ? AND idem_key = ?`), who, key).Scan(&req, &st, &hdrs, &body, &grantedTo)
			switch {
			case errors.Is(err, sql.ErrNoRows):
				s.writeError(w, r, fmt.Errorf("server: Idempotency-Key: %w", ierr))
			case err != nil:
				s.writeError(w, r, err)
			case grantedTo != grantee:
				s.writeError(w, r, &errcode.Error{Field: "Idempotency-Key", Message: "This Idempotency-Key was recorded for another grant of your credential: use a new key.",
					Err: fmt.Errorf("server: Idempotency-Key: %w", errOtherGrant)})
			case req != fp:
				s.writeError(w, r, &errcode.Error{Field: "Idempotency-Key", Message: "This Idempotency-Key was used for another request: use a new key for a new request.",
					Err: fmt.Errorf("server: this Idempotency-Key was used for another request: %w", errcode.ErrConflict)})
			case st == 0:
				s.writeError(w, r, &errcode.Error{Field: "Idempotency-Key", Message: "The first request with this Idempotency-Key is still running: wait for it, then retry.",
					Err: fmt.Errorf("server: the first request with this Idempotency-Key is still running: %w", errcode.ErrConflict)})
			default:
				var kept map[string]string
				json.Unmarshal([]byte(hdrs), &kept)
				for k, v := range kept {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Idempotent-Replayed", "true")
				w.WriteHeader(st)
				io.WriteString(w, body)
			}
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		bw := &bufferedWriter{header: w.Header()}
		next(bw, r)
		ctx = context.WithoutCancel(ctx) // the record is written even when the client went away
		if bw.status == 0 {
			bw.status = http.StatusOK
		}
		if bw.status >= 500 {
			h.db.ExecContext(ctx, h.q(`DELETE FROM server_idempotency WHERE principal = ? AND idem_key = ?`), who, key)
		} else {
			kept := map[string]string{}
			for _, k := range []string{"ETag", "Location"} {
				if v := w.Header().Get(k); v != "" {
					kept[k] = v
				}
			}
			hdrs, _ := json.Marshal(kept)
			h.db.ExecContext(ctx, h.q(`UPDATE server_idempotency SET status = ?, headers = ?, body = ? WHERE principal = ? AND idem_key = ?`), bw.status, string(hdrs), bw.body.String(), who, key)
		}
		w.WriteHeader(bw.status)
		w.Write(bw.body.Bytes())
	}
}

// How long idempotency records last, and how long one may stay running
// before a retry is let through (creates answer at once; a run answers
// 202 once its task is started in the background).
const (
	idempotencyTTL     = 24 * time.Hour
	idempotencyPending = 5 * time.Minute
)

// ifMatch returns the revision of the request's If-Match header:
// errIfMatchMissing without one.
func ifMatch(r *http.Request) (int64, error) {
	v := strings.TrimSpace(r.Header.Get("If-Match"))
	if v == "" {
		return 0, &errcode.Error{Field: "If-Match", Message: "The If-Match header is required: send the ETag that a GET of the record returned.", Err: errIfMatchMissing}
	}
	n, err := strconv.ParseInt(strings.Trim(strings.TrimPrefix(v, "W/"), `"`), 10, 64)
	if err != nil || n <= 0 {
		return 0, invalid("If-Match", `want "<revision>", got %q`, v)
	}
	return n, nil
}

// etag is the ETag of a record at revision rev.
func etag(rev int64) string { return `"` + strconv.FormatInt(rev, 10) + `"` }
