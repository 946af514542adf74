package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/templates"
)

// The custom-image routes (UI-4) over System.Templates(): every call
// passes the request's principal, and the library decides (operators act,
// board members read, agents nothing).

// registerTemplateRoutes registers the template, setup-session and
// terminal routes.
func (s *server) registerTemplateRoutes() {
	s.handle("GET", "/api/v1/environments/{id}/templates", s.listTemplates)
	s.handle("GET", "/api/v1/environments/{id}/template-history", s.templateHistory)
	s.handle("POST", "/api/v1/templates/{id}/promote", s.promoteTemplate)
	s.handle("POST", "/api/v1/templates/{id}/rollback", s.rollbackTemplate)
	s.handle("POST", "/api/v1/templates/{id}/revoke", s.revokeTemplate)
	s.handle("GET", "/api/v1/environments/{id}/setup-sessions", s.listSetupSessions)
	s.handle("POST", "/api/v1/environments/{id}/setup-sessions", s.startSetup)
	s.handle("GET", "/api/v1/setup-sessions/{id}", s.getSetupSession)
	s.handle("GET", "/api/v1/setup-sessions/{id}/events", s.setupEvents)
	s.handle("POST", "/api/v1/setup-sessions/{id}/capture", s.captureSetup)
	s.handle("POST", "/api/v1/setup-sessions/{id}/cancel", s.cancelSetup)
	s.handle("POST", "/api/v1/setup-sessions/{id}/terminal-token", s.mintTerminalToken)
	// The WebSocket terminal: the token (single use, bound to this path
	// and to the principal) is redeemed by the library before it upgrades;
	// the principal is the one the server's authentication found. No
	// OriginPatterns: only the server's own origin may connect.
	term := s.sys.Templates().TerminalHandler(func(r *http.Request) (authz.Principal, error) { return principalOf(r), nil })
	s.handle("GET", terminalPattern, term.ServeHTTP)
}

// terminalPattern is the terminal's route; a token is minted for its
// concrete path.
const terminalPattern = "/api/v1/setup-sessions/{id}/terminal"

func terminalPath(session string) string { return "/api/v1/setup-sessions/" + session + "/terminal" }

// items is a list response.
type items[T any] struct {
	Items []T `json:"items"`
}

func (s *server) listTemplates(w http.ResponseWriter, r *http.Request) {
	ts, err := s.sys.Templates().List(r.Context(), principalOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ts == nil {
		ts = []*templates.Template{}
	}
	s.writeJSON(w, r, http.StatusOK, items[*templates.Template]{ts})
}

func (s *server) templateHistory(w http.ResponseWriter, r *http.Request) {
	evs, err := s.sys.Templates().History(r.Context(), principalOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if evs == nil {
		evs = []*templates.Event{}
	}
	s.writeJSON(w, r, http.StatusOK, items[*templates.Event]{evs})
}

func (s *server) promoteTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.sys.Templates().Promote(r.Context(), principalOf(r), r.PathValue("id"))
	s.writeTemplate(w, r, "template.promote", t, err)
}

func (s *server) rollbackTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := s.sys.Templates().Rollback(r.Context(), principalOf(r), r.PathValue("id"))
	s.writeTemplate(w, r, "template.rollback", t, err)
}

// revokeBody is the optional body of POST /api/v1/templates/{id}/revoke.
type revokeBody struct {
	Delete bool   `json:"delete,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (s *server) revokeTemplate(w http.ResponseWriter, r *http.Request) {
	var body revokeBody
	var t *templates.Template
	err := decode(w, r, &body, true)
	if err == nil {
		t, err = s.sys.Templates().Revoke(r.Context(), principalOf(r), r.PathValue("id"), templates.RevokeOptions{Delete: body.Delete, Reason: body.Reason})
	}
	s.writeTemplate(w, r, "template.revoke", t, err)
}

func (s *server) writeTemplate(w http.ResponseWriter, r *http.Request, action string, t *templates.Template, err error) {
	env := ""
	if t != nil {
		env = t.Environment
	}
	s.audit(r, action, env, err, "template", r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, t)
}

func (s *server) listSetupSessions(w http.ResponseWriter, r *http.Request) {
	ss, err := s.sys.Templates().Sessions(r.Context(), principalOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ss == nil {
		ss = []*templates.Session{}
	}
	s.writeJSON(w, r, http.StatusOK, items[*templates.Session]{ss})
}

// setupBody is the body of POST /api/v1/environments/{id}/setup-sessions:
// a scripted setup carries its script (the JSON form the templates package doc shows), an
// interactive one may carry one too.
type setupBody struct {
	Name        string          `json:"name,omitempty"`
	Script      json.RawMessage `json:"script,omitempty"`
	Interactive bool            `json:"interactive,omitempty"`
	Promote     bool            `json:"promote,omitempty"`
	Rebuild     bool            `json:"rebuild,omitempty"`
}

// startSetup starts a setup session in the background (its steps and a
// scripted capture outlive the request) and answers 202 with the session
// once it is recorded, or the error that refused it. Progress is read
// with GET .../events after a cursor.
func (s *server) startSetup(w http.ResponseWriter, r *http.Request) {
	envID := r.PathValue("id")
	var body setupBody
	if err := decode(w, r, &body, false); err != nil {
		s.audit(r, "setup.start", envID, err)
		s.writeError(w, r, err)
		return
	}
	req := templates.SetupRequest{Environment: envID, Name: body.Name, Interactive: body.Interactive, Promote: body.Promote, Rebuild: body.Rebuild}
	if len(body.Script) > 0 && !bytes.Equal(bytes.TrimSpace(body.Script), []byte("null")) {
		req.Script = bytes.NewReader(body.Script)
	}
	started := make(chan string, 1)
	req.Progress = func(e *templates.SessionEvent) {
		select {
		case started <- e.Session:
		default:
		}
	}
	type result struct {
		ses *templates.Session
		err error
	}
	done := make(chan result, 1)
	p := principalOf(r)
	rs := s.runs
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		s.writeError(w, r, errShuttingDown)
		return
	}
	rs.wg.Add(1)
	rs.mu.Unlock()
	go func() {
		defer rs.wg.Done()
		ses, err := s.sys.Templates().Setup(rs.base, p, req)
		done <- result{ses, err}
	}()
	var ses *templates.Session
	var err error
	select {
	case id := <-started:
		ses, err = s.sys.Templates().Session(r.Context(), p, id)
	case res := <-done:
		ses, err = res.ses, res.err
	case <-r.Context().Done():
		err = r.Context().Err()
	}
	s.audit(r, "setup.start", envID, err, "interactive", strconv.FormatBool(body.Interactive))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/setup-sessions/"+ses.ID)
	s.writeJSON(w, r, http.StatusAccepted, ses)
}

func (s *server) getSetupSession(w http.ResponseWriter, r *http.Request) {
	ses, err := s.sys.Templates().Session(r.Context(), principalOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, ses)
}

// eventsPage is the answer of GET .../events: the events after the cursor
// asked for, and the next cursor (the last event's seq, or the one asked
// for when there is none).
type eventsPage struct {
	Items  []*templates.SessionEvent `json:"items"`
	Cursor int64                     `json:"cursor"`
}

func (s *server) setupEvents(w http.ResponseWriter, r *http.Request) {
	var after int64
	if a := r.URL.Query().Get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			s.writeError(w, r, invalid("after", "want a cursor (a non-negative integer), got %q", a))
			return
		}
		after = n
	}
	evs, err := s.sys.Templates().Events(r.Context(), principalOf(r), r.PathValue("id"), after)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	page := eventsPage{Items: evs, Cursor: after}
	if page.Items == nil {
		page.Items = []*templates.SessionEvent{}
	}
	if n := len(evs); n > 0 {
		page.Cursor = evs[n-1].Seq
	}
	s.writeJSON(w, r, http.StatusOK, page)
}

// captureBody is the optional body of POST .../capture.
type captureBody struct {
	Promote bool `json:"promote,omitempty"`
}

func (s *server) captureSetup(w http.ResponseWriter, r *http.Request) {
	var body captureBody
	var ses *templates.Session
	err := decode(w, r, &body, true)
	if err == nil {
		// The capture outlives a client that goes away.
		ses, err = s.sys.Templates().CaptureSession(context.WithoutCancel(r.Context()), principalOf(r), r.PathValue("id"), body.Promote)
	}
	s.writeSession(w, r, "setup.capture", ses, err)
}

func (s *server) cancelSetup(w http.ResponseWriter, r *http.Request) {
	ses, err := s.sys.Templates().Cancel(r.Context(), principalOf(r), r.PathValue("id"))
	s.writeSession(w, r, "setup.cancel", ses, err)
}

func (s *server) writeSession(w http.ResponseWriter, r *http.Request, action string, ses *templates.Session, err error) {
	env := ""
	if ses != nil {
		env = ses.Environment
	}
	s.audit(r, action, env, err, "session", r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, ses)
}

// mintTerminalToken mints the single-use token of the session's web
// terminal, bound to the caller and to the terminal's path. The token is
// in this answer only, never in a log.
func (s *server) mintTerminalToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	path := terminalPath(id)
	tok, expires, err := s.sys.Templates().MintTerminalToken(r.Context(), principalOf(r), id, path)
	s.audit(r, "setup.terminal-token", "", err, "session", id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusCreated, terminalToken{Token: tok, Session: id, Path: path, ExpiresAt: expires})
}

// terminalToken is the answer of POST .../terminal-token: the token
// travels once, to the client.
type terminalToken struct {
	Token     string    `json:"token"`
	Session   string    `json:"session"`
	Path      string    `json:"path"`
	ExpiresAt time.Time `json:"expiresAt"`
}
