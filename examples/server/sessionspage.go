package main

import (
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
)

// sessionsPagePath is the instance administrator's list of sessions: a
// plain table with a Revoke button per row (assets/sessions.js calls
// DELETE /api/v1/sessions/{id} with the session's CSRF token).
const sessionsPagePath = "/company/settings/instance/sessions"

var sessionsTmpl = template.Must(template.New("sessions").Funcs(template.FuncMap{
	"join": strings.Join,
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sessions: berth</title></head>
<body><main id="sessions"><h1>Sessions</h1>
<p>Every live cookie session of this instance. A session ends at its 12 h cap, after the idle timeout, when its token leaves the tokens file or changes grant, or when revoked here.</p>
<table>
<thead><tr><th>Who</th><th>Role</th><th>Companies</th><th>Source</th><th>Created</th><th>Last seen</th><th>Expires</th><th></th></tr></thead>
<tbody>
{{range .}}<tr data-session="{{.ID}}"><td>{{.Principal.ID}}</td><td>{{.Principal.Role}}</td><td>{{join .Principal.Companies ", "}}</td><td>{{.Source}}</td><td>{{when .CreatedAt}}</td><td>{{when .LastSeenAt}}</td><td>{{when .ExpiresAt}}</td><td>{{if .Current}}this session{{else}}<button type="button" class="revoke" data-id="{{.ID}}">Revoke</button>{{end}}</td></tr>
{{end}}</tbody></table>
<p id="sessions-status" role="status"></p>
<script src="/assets/sessions.js" defer></script>
</main></body></html>
`))

// serveSessionsPage serves sessionsPagePath to instance admins.
func (s *server) serveSessionsPage(w http.ResponseWriter, r *http.Request) {
	sess := s.sessionOf(r)
	if sess == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	setPageHeaders(w)
	if sess.principal.Role != authz.RoleInstanceAdmin {
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Not available: berth</title></head><body><main><h1>Sessions</h1><p id="no-page">This page is for instance administrators.</p></main></body></html>`))
		return
	}
	items, err := s.host.listSessions(r.Context(), s.now())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	for i := range items {
		items[i].Current = items[i].ID == sess.id
	}
	if err := sessionsTmpl.Execute(w, items); err != nil {
		s.log.Error("render the sessions page", "error", err.Error())
	}
}
