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
// the administrator has logged in before (the login-link command makes
// a new one then).
func (h *hostDB) ensureAdmin(ctx context.Context, now time.Time) (string, error) {
	if err := h.createAdmin(ctx, now); err != nil {
		return "", err
	}
	var used int
	if err := h.db.QueryRowContext(ctx, h.q(`SELECT COUNT(*) FROM server_login_links WHERE user_id = ? AND used_at > 0`), adminID).Scan(&used); err != nil {
		return "", fmt.Errorf("server: read the login links: %w", err)
	}
	if used > 0 {
		return "", nil
	}
	return h.newLoginLink(ctx, now)
}

// createAdmin creates the instance administrator unless it exists.
func (h *hostDB) createAdmin(ctx context.Context, now time.Time) error {
	if _, err := h.db.ExecContext(ctx, h.q(`INSERT INTO server_users (id, role, companies, created_at) VALUES (?, ?, '', ?) ON CONFLICT (id) DO NOTHING`),
		adminID, string(authz.RoleInstanceAdmin), now.Unix()); err != nil {
		return fmt.Errorf("server: create the administrator: %w", err)
	}
	return nil
}

// newLoginLink stores a fresh one-time login link of the administrator
// (valid loginLinkTTL, once) and returns its token.
func (h *hostDB) newLoginLink(ctx context.Context, now time.Time) (string, error) {
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
	id        string
	principal authz.Principal
	csrf      string
	tokenHash string
	// source is the identity of the credential the session was made
	// from (tokenIdentity or linkIdentity), checked at every lookup.
	source    string
	createdAt time.Time
	lastSeen  time.Time
}

// newSession stores a session for p, made from the credential of
// identity source, and returns its cookie token.
func (h *hostDB) newSession(ctx context.Context, p authz.Principal, source string, now time.Time) (tok string, s *session, err error) {
	tok = randomToken()
	s = &session{id: randomToken()[:22], principal: p, csrf: randomToken(), tokenHash: hashToken(tok), source: source, createdAt: now, lastSeen: now}
	_, err = h.db.ExecContext(ctx, h.q(`INSERT INTO server_sessions (token_hash, id, user_id, role, companies, csrf, source, created_at, last_seen, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		s.tokenHash, s.id, p.ID, string(p.Role), strings.Join(p.Companies, ","), s.csrf, source, now.Unix(), now.Unix(), now.Add(sessionTTL).Unix())
	if err != nil {
		return "", nil, fmt.Errorf("server: store the session: %w", err)
	}
	return tok, s, nil
}

// lookupSession returns the live session of cookie token tok, or nil. A
// session is live until its 12 h cap, while used within the idle timeout,
// and while the credential it was made from still exists with the same
// grant (the -tokens file's token, or the administrator of the login
// link): otherwise it is deleted and nil is returned.
func (h *hostDB) lookupSession(ctx context.Context, tok string, now time.Time) (*session, error) {
	s := &session{tokenHash: hashToken(tok)}
	var role, companies string
	var created, seen int64
	err := h.db.QueryRowContext(ctx, h.q(`SELECT id, user_id, role, companies, csrf, source, created_at, last_seen FROM server_sessions WHERE token_hash = ? AND revoked = 0 AND expires_at > ?`),
		s.tokenHash, now.Unix()).Scan(&s.id, &s.principal.ID, &role, &companies, &s.csrf, &s.source, &created, &seen)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("server: read the session: %w", err)
	}
	s.principal.Role, s.principal.Companies = authz.Role(role), splitCompanies(companies)
	s.createdAt, s.lastSeen = time.Unix(created, 0), time.Unix(seen, 0)
	live := now.Sub(s.lastSeen) < h.idleTimeout()
	if live {
		if live, err = h.sourceValid(ctx, s.source, s.principal); err != nil {
			return nil, err
		}
	}
	if !live {
		if err := h.revokeSession(ctx, s.tokenHash); err != nil {
			return nil, fmt.Errorf("server: delete the session: %w", err)
		}
		return nil, nil
	}
	// last_seen is written at most once a minute per session.
	if now.Sub(s.lastSeen) >= time.Minute {
		if _, err := h.db.ExecContext(ctx, h.q(`UPDATE server_sessions SET last_seen = ? WHERE token_hash = ?`), now.Unix(), s.tokenHash); err != nil {
			return nil, fmt.Errorf("server: update the session: %w", err)
		}
		s.lastSeen = now
	}
	return s, nil
}

// defaultSessionIdle is the idle timeout of a session (-session-idle).
const defaultSessionIdle = 30 * time.Minute

func (h *hostDB) idleTimeout() time.Duration {
	if h.idle > 0 {
		return h.idle
	}
	return defaultSessionIdle
}

// sourceValid reports whether the credential of identity source still
// grants p: a token of the current -tokens file, or the user of a login
// link as the users table holds it.
func (h *hostDB) sourceValid(ctx context.Context, source string, p authz.Principal) (bool, error) {
	if strings.HasPrefix(source, "token:") {
		if h.tokens == nil {
			return false, nil
		}
		cur, ok := h.tokens.byID(source)
		return ok && samePrincipal(cur, p), nil
	}
	user, ok := strings.CutPrefix(source, "link:")
	if !ok {
		return false, nil // a session of before sources, or unknown
	}
	var role, companies string
	err := h.db.QueryRowContext(ctx, h.q(`SELECT role, companies FROM server_users WHERE id = ?`), user).Scan(&role, &companies)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("server: read the session's user: %w", err)
	}
	return samePrincipal(authz.Principal{ID: user, Role: authz.Role(role), Companies: splitCompanies(companies)}, p), nil
}

// sessionInfo is one session as GET /api/v1/sessions lists it.
type sessionInfo struct {
	ID        string          `json:"id"`
	Principal authz.Principal `json:"principal"`
	// Source is "link" (the administrator's one-time login link) or
	// "token" (a bearer token of the -tokens file traded at /login).
	Source     string    `json:"source"`
	CreatedAt  time.Time `json:"createdAt"`
	LastSeenAt time.Time `json:"lastSeenAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// Current marks the caller's own session.
	Current bool `json:"current,omitempty"`
}

// listSessions returns the live sessions, newest first: not past their
// cap, not idle, and made from a credential that still grants what they
// hold (the others are deleted on the way).
func (h *hostDB) listSessions(ctx context.Context, now time.Time) ([]sessionInfo, error) {
	all, sources, err := h.readSessions(ctx, now)
	if err != nil {
		return nil, err
	}
	out := []sessionInfo{}
	for i, si := range all {
		ok, err := h.sourceValid(ctx, sources[i], si.Principal)
		if err != nil {
			return nil, err
		}
		if !ok {
			if _, err := h.deleteSessionByID(ctx, si.ID); err != nil {
				return nil, err
			}
			continue
		}
		out = append(out, si)
	}
	return out, nil
}

// readSessions reads the sessions not past their cap nor idle, and their
// sources.
func (h *hostDB) readSessions(ctx context.Context, now time.Time) ([]sessionInfo, []string, error) {
	rows, err := h.db.QueryContext(ctx, h.q(`SELECT id, user_id, role, companies, source, created_at, last_seen, expires_at FROM server_sessions
		WHERE revoked = 0 AND expires_at > ? AND last_seen > ? AND source <> '' ORDER BY created_at DESC, id`),
		now.Unix(), now.Add(-h.idleTimeout()).Unix())
	if err != nil {
		return nil, nil, fmt.Errorf("server: list the sessions: %w", err)
	}
	defer rows.Close()
	var out []sessionInfo
	var sources []string
	for rows.Next() {
		var si sessionInfo
		var role, companies, source string
		var created, seen, expires int64
		if err := rows.Scan(&si.ID, &si.Principal.ID, &role, &companies, &source, &created, &seen, &expires); err != nil {
			return nil, nil, fmt.Errorf("server: list the sessions: %w", err)
		}
		si.Principal.Role, si.Principal.Companies = authz.Role(role), splitCompanies(companies)
		si.Source, _, _ = strings.Cut(source, ":")
		si.CreatedAt, si.LastSeenAt, si.ExpiresAt = time.Unix(created, 0).UTC(), time.Unix(seen, 0).UTC(), time.Unix(expires, 0).UTC()
		out = append(out, si)
		sources = append(sources, source)
	}
	return out, sources, rows.Err()
}

// deleteSessionByID ends the session of id; false when there is none.
func (h *hostDB) deleteSessionByID(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	res, err := h.db.ExecContext(ctx, h.q(`DELETE FROM server_sessions WHERE id = ?`), id)
	if err != nil {
		return false, fmt.Errorf("server: revoke the session: %w", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// revokeSession ends a session (its row is deleted).
func (h *hostDB) revokeSession(ctx context.Context, tokenHash string) error {
	_, err := h.db.ExecContext(ctx, h.q(`DELETE FROM server_sessions WHERE token_hash = ?`), tokenHash)
	return err
}

// caller is who made a request, as the authentication found it.
type caller struct {
	principal authz.Principal
	// identity is the credential's identity (tokenIdentity, or the
	// session's source): what per-caller records and limits are keyed by.
	identity string
	session  *session // nil for a bearer token
}

type callerKey struct{}

// callerOf returns the request's caller (set by authenticate).
func callerOf(r *http.Request) *caller {
	c, _ := r.Context().Value(callerKey{}).(*caller)
	return c
}

// principalOf returns the request's principal.
func principalOf(r *http.Request) authz.Principal { return callerOf(r).principal }

// identityOf returns the request's credential identity.
func identityOf(r *http.Request) string { return callerOf(r).identity }

// authenticate finds the caller of an API request: a bearer token of the
// -tokens file or a cookie session, whose mutations need its CSRF token
// and must come from the server's own origin.
func (s *server) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	var c *caller
	if auth := r.Header.Get("Authorization"); auth != "" {
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		p, id, known := s.tokens.lookup(strings.TrimSpace(tok))
		if !ok || !known {
			s.writeError(w, r, fmt.Errorf("server: unknown bearer token: %w", errUnauthenticated))
			return r, false
		}
		c = &caller{principal: p, identity: id}
	} else if ck, err := r.Cookie(sessionCookie); err == nil {
		sess, err := s.host.lookupSession(r.Context(), ck.Value, s.now())
		if err != nil {
			s.writeError(w, r, err)
			return r, false
		}
		if sess == nil {
			s.writeError(w, r, fmt.Errorf("server: the session is unknown, expired, idle or revoked, or its credential changed: log in again: %w", errUnauthenticated))
			return r, false
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead:
		default:
			if err := s.checkOrigin(r); err != nil {
				s.writeError(w, r, err)
				return r, false
			}
			if got := r.Header.Get(csrfHeader); subtle.ConstantTimeCompare([]byte(got), []byte(sess.csrf)) != 1 {
				s.writeError(w, r, &errcode.Error{Field: csrfHeader, Message: "This change did not come with your session's CSRF token: reload the page and try again.", Err: errCSRF})
				return r, false
			}
		}
		c = &caller{principal: sess.principal, identity: sess.source, session: sess}
	} else {
		s.writeError(w, r, errUnauthenticated)
		return r, false
	}
	if rec, ok := w.(*statusRecorder); ok {
		rec.who = c.principal.String()
	}
	return r.WithContext(context.WithValue(r.Context(), callerKey{}, c)), true
}

// errCrossSite refuses a browser request that another site made.
var errCrossSite = errcode.New(errcode.Denied, "server: a cross-site request is refused (log in and act from this server's own page)")

// crossSite is errCrossSite about request header field.
func crossSite(field string) error {
	return &errcode.Error{Field: field, Message: "This request came from another site and was refused: act from this server's own page.", Err: errCrossSite}
}

// checkOrigin refuses a state-changing browser request that did not come
// from the server's own origin: Sec-Fetch-Site other than same-origin,
// or an Origin other than this server's. An Origin of "null" passes only
// with Sec-Fetch-Site: same-origin (a browser sends "null" for a form
// posted under Referrer-Policy: no-referrer, the login form's case).
// Clients that send neither header (bearer-token scripts, curl) pass; a
// browser sends at least one.
func (s *server) checkOrigin(r *http.Request) error {
	sfs := r.Header.Get("Sec-Fetch-Site")
	if sfs != "" && sfs != "same-origin" {
		return crossSite("Sec-Fetch-Site")
	}
	o := r.Header.Get("Origin")
	switch {
	case o == "":
		return nil
	case o == "null":
		if sfs == "same-origin" {
			return nil
		}
		return crossSite("Origin")
	}
	scheme := "http"
	if s.tls || r.TLS != nil {
		scheme = "https"
	}
	if o != scheme+"://"+r.Host {
		return crossSite("Origin")
	}
	return nil
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
// session (a form from another origin is refused). The session follows
// its credential: see lookupSession.
func (s *server) handleLogin(w http.ResponseWriter, r *http.Request) {
	var p authz.Principal
	var source string
	switch {
	case r.Method == http.MethodGet && r.URL.Query().Get("link") != "":
		var err error
		if p, err = s.host.useLoginLink(r.Context(), r.URL.Query().Get("link"), s.now()); err != nil {
			s.writeError(w, r, err)
			return
		}
		source = linkIdentity(p.ID)
	case r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprint(w, loginPage)
		return
	case r.Method == http.MethodPost:
		if err := s.checkOrigin(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4096)
		known := false
		if err := r.ParseForm(); err == nil {
			p, source, known = s.tokens.lookup(r.PostForm.Get("token"))
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
	tok, _, err := s.host.newSession(r.Context(), p, source, s.now())
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

// errSessionNotFound is a session id that names no live session.
var errSessionNotFound = errcode.New(errcode.NotFound, "server: session not found (ended already?)")

// errNotInstanceAdmin refuses the sessions routes to everyone else.
var errNotInstanceAdmin = errcode.New(errcode.Denied, "server: only an instance administrator may list or revoke sessions")

// listSessions serves GET /api/v1/sessions: every live session (who,
// role, companies, created, last seen, source), for instance admins.
func (s *server) listSessions(w http.ResponseWriter, r *http.Request) {
	if principalOf(r).Role != authz.RoleInstanceAdmin {
		s.writeError(w, r, errNotInstanceAdmin)
		return
	}
	items, err := s.host.listSessions(r.Context(), s.now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if c := callerOf(r); c.session != nil {
		for i := range items {
			items[i].Current = items[i].ID == c.session.id
		}
	}
	s.writeJSON(w, r, http.StatusOK, struct {
		Items []sessionInfo `json:"items"`
	}{items})
}

// revokeSessionByID serves DELETE /api/v1/sessions/{id}: an instance
// admin ends any session (its next request is 401).
func (s *server) revokeSessionByID(w http.ResponseWriter, r *http.Request) {
	var err error
	if principalOf(r).Role != authz.RoleInstanceAdmin {
		err = errNotInstanceAdmin
	} else if ok, derr := s.host.deleteSessionByID(r.Context(), r.PathValue("id")); derr != nil {
		err = derr
	} else if !ok {
		err = &fieldErr{err: errSessionNotFound, target: r.PathValue("id")}
	}
	s.audit(r, "session.revoke", "", err, "session", r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
