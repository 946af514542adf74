package main

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/errcode"
)

const (
	// sessionCookie is the name of the cookie session.
	sessionCookie = "berth_session"
	// csrfHeader carries the session's CSRF token on cookie mutations.
	csrfHeader = "X-CSRF-Token"
	// sessionTTL is how long a cookie session lasts.
	sessionTTL = 12 * time.Hour
	// loginLinkTTL is how long the one-time login link is valid.
	loginLinkTTL = 15 * time.Minute
	// adminID is the instance administrator the first start creates.
	adminID = "admin"
)

var (
	// errUnauthenticated is a request without valid credentials.
	errUnauthenticated = errcode.New(errcode.AuthFailed, "server: authentication required (a bearer token or a session cookie)")
	// errCSRF is a cookie mutation without its CSRF token.
	errCSRF = errcode.New(errcode.Denied, "server: a cookie-authenticated mutation needs the session's "+csrfHeader+" header")
)

// randomToken returns 32 random bytes, URL-safe base64.
func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ensureAdmin creates the instance administrator on the first start and,
// while the administrator has never logged in, a fresh one-time login
// link (valid loginLinkTTL, once). It returns the link's token, or "" when
// the administrator has logged in before.
func (h *hostDB) ensureAdmin(ctx context.Context, now time.Time) (string, error) {
	if _, err := h.db.ExecContext(ctx, h.q(`INSERT INTO server_users (id, role, companies, created_at) VALUES (?, ?, '', ?) ON CONFLICT (id) DO NOTHING`),
		adminID, string(authz.RoleInstanceAdmin), now.Unix()); err != nil {
		return "", fmt.Errorf("server: create the administrator: %w", err)
	}
	var used int
	if err := h.db.QueryRowContext(ctx, h.q(`SELECT COUNT(*) FROM server_login_links WHERE user_id = ? AND used_at > 0`), adminID).Scan(&used); err != nil {
		return "", fmt.Errorf("server: read the login links: %w", err)
	}
	if used > 0 {
		return "", nil
	}
	tok := randomToken()
	if _, err := h.db.ExecContext(ctx, h.q(`INSERT INTO server_login_links (token_hash, user_id, expires_at) VALUES (?, ?, ?)`),
		hashToken(tok), adminID, now.Add(loginLinkTTL).Unix()); err != nil {
		return "", fmt.Errorf("server: create the login link: %w", err)
	}
	return tok, nil
}

// useLoginLink consumes the one-time link tok and returns its user's
// principal; an unknown, used or expired link is errUnauthenticated.
func (h *hostDB) useLoginLink(ctx context.Context, tok string, now time.Time) (authz.Principal, error) {
	res, err := h.db.ExecContext(ctx, h.q(`UPDATE server_login_links SET used_at = ? WHERE token_hash = ? AND used_at = 0 AND expires_at > ?`),
		now.Unix(), hashToken(tok), now.Unix())
	if err != nil {
		return authz.Principal{}, fmt.Errorf("server: login link: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return authz.Principal{}, fmt.Errorf("server: the login link is unknown, used or expired: %w", errUnauthenticated)
	}
	var p authz.Principal
	var role, companies string
	err = h.db.QueryRowContext(ctx, h.q(`SELECT u.id, u.role, u.companies FROM server_users u JOIN server_login_links l ON l.user_id = u.id WHERE l.token_hash = ?`),
		hashToken(tok)).Scan(&p.ID, &role, &companies)
	if err != nil {
		return authz.Principal{}, fmt.Errorf("server: login link: %w", err)
	}
	p.Role, p.Companies = authz.Role(role), splitCompanies(companies)
	return p, nil
}

func splitCompanies(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// session is a cookie session's record.
type session struct {
	principal authz.Principal
	csrf      string
	tokenHash string
}

// newSession stores a session for p and returns its cookie token.
func (h *hostDB) newSession(ctx context.Context, p authz.Principal, now time.Time) (tok string, s *session, err error) {
	tok = randomToken()
	s = &session{principal: p, csrf: randomToken(), tokenHash: hashToken(tok)}
	_, err = h.db.ExecContext(ctx, h.q(`INSERT INTO server_sessions (token_hash, user_id, role, companies, csrf, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`),
		s.tokenHash, p.ID, string(p.Role), strings.Join(p.Companies, ","), s.csrf, now.Unix(), now.Add(sessionTTL).Unix())
	if err != nil {
		return "", nil, fmt.Errorf("server: store the session: %w", err)
	}
	return tok, s, nil
}

// lookupSession returns the live session of cookie token tok, or nil.
func (h *hostDB) lookupSession(ctx context.Context, tok string, now time.Time) (*session, error) {
	s := &session{tokenHash: hashToken(tok)}
	var role, companies string
	err := h.db.QueryRowContext(ctx, h.q(`SELECT user_id, role, companies, csrf FROM server_sessions WHERE token_hash = ? AND revoked = 0 AND expires_at > ?`),
		s.tokenHash, now.Unix()).Scan(&s.principal.ID, &role, &companies, &s.csrf)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("server: read the session: %w", err)
	}
	s.principal.Role, s.principal.Companies = authz.Role(role), splitCompanies(companies)
	return s, nil
}

// revokeSession ends a session.
func (h *hostDB) revokeSession(ctx context.Context, tokenHash string) error {
	_, err := h.db.ExecContext(ctx, h.q(`UPDATE server_sessions SET revoked = 1 WHERE token_hash = ?`), tokenHash)
	return err
}

// caller is who made a request, as the authentication found it.
type caller struct {
	principal authz.Principal
	session   *session // nil for a bearer token
}

type callerKey struct{}

// callerOf returns the request's caller (set by authenticate).
func callerOf(r *http.Request) *caller {
	c, _ := r.Context().Value(callerKey{}).(*caller)
	return c
}

// principalOf returns the request's principal.
func principalOf(r *http.Request) authz.Principal { return callerOf(r).principal }

// authenticate finds the caller of an API request: a bearer token of the
// -tokens file or a cookie session, whose mutations need its CSRF token.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	var c *caller
	if auth := r.Header.Get("Authorization"); auth != "" {
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		p, known := s.tokens[hashToken(strings.TrimSpace(tok))]
		if !ok || !known {
			s.writeError(w, r, fmt.Errorf("server: unknown bearer token: %w", errUnauthenticated))
			return r, false
		}
		c = &caller{principal: p}
	} else if ck, err := r.Cookie(sessionCookie); err == nil {
		sess, err := s.host.lookupSession(r.Context(), ck.Value, s.now())
		if err != nil {
			s.writeError(w, r, err)
			return r, false
		}
		if sess == nil {
			s.writeError(w, r, fmt.Errorf("server: the session is unknown, expired or revoked: %w", errUnauthenticated))
			return r, false
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		default:
			if got := r.Header.Get(csrfHeader); subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
				s.writeError(w, r, &fieldErr{err: errCSRF, field: csrfHeader})
				return r, false
			}
		}
		c = &caller{principal: sess.principal, session: sess}
	} else {
		s.writeError(w, r, errUnauthenticated)
		return r, false
	}
	if rec, ok := w.(*statusRecorder); ok {
		rec.who = c.principal.String()
	}
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c)), true
}

// setSessionCookie sets the cookie of session token tok: HttpOnly,
// SameSite=Strict, Secure over TLS.
func (s *server) setSessionCookie(w http.ResponseWriter, tok string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: tok, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.tls,
	})
}

// handleLogin serves /login: GET ?link=TOKEN trades the one-time link for
// a cookie session and lands on the page; GET without a link shows a form
// that POSTs a bearer token of the -tokens file, traded for a cookie
// session.
func (s *server) handleLogin(w http.ResponseWriter, r *http.Request) {
	var p authz.Principal
	switch {
	case r.Method == http.MethodGet && r.URL.Query().Get("link") != "":
		var err error
		if p, err = s.host.useLoginLink(r.Context(), r.URL.Query().Get("link"), s.now()); err != nil {
			s.writeError(w, r, err)
			return
		}
	case r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, loginPage)
		return
	case r.Method == http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 4096)
		known := false
		if err := r.ParseForm(); err == nil {
			p, known = s.tokens[hashToken(r.PostForm.Get("token"))]
		}
		if !known {
			s.writeError(w, r, fmt.Errorf("server: unknown token: %w", errUnauthenticated))
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		s.writeError(w, r, errMethod)
		return
	}
	tok, _, err := s.host.newSession(r.Context(), p, s.now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.setSessionCookie(w, tok, int(sessionTTL/time.Second))
	s.audit(r, "login", "", nil, "role", string(p.Role))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

const loginPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Log in: berth</title></head>
<body><main><h1>Log in</h1>
<form method="post" action="/login">
<label for="token">Access token</label>
<input id="token" name="token" type="password" autocomplete="off" required>
<button type="submit">Log in</button>
</form></main></body></html>
`

// sessionView is GET /api/v1/session.
type sessionView struct {
	Principal authz.Principal `json:"principal"`
	// CSRFToken is the token a cookie session sends in X-CSRF-Token on
	// mutations; "" for a bearer token.
	CSRFToken string `json:"csrfToken,omitempty"`
}

func (s *server) getSession(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	v := sessionView{Principal: c.principal}
	if c.session != nil {
		v.CSRFToken = c.session.csrf
	}
	s.writeJSON(w, r, http.StatusOK, v)
}

func (s *server) deleteSession(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	if c.session != nil {
		if err := s.host.revokeSession(r.Context(), c.session.tokenHash); err != nil {
			s.writeError(w, r, err)
			return
		}
		s.setSessionCookie(w, "", -1)
	}
	s.audit(r, "logout", "", nil)
	w.WriteHeader(http.StatusNoContent)
}
