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
<html lang="en"><head><meta charset="utf-8"><title>Sessions: berth</title>
<link rel="stylesheet" href="/assets/envs.css"></head>
<body>
<header class="topbar"><p class="crumbs"><a href="/" class="brand">berth</a> <span aria-hidden="true">›</span> Settings <span aria-hidden="true">›</span> Sessions</p></header>
<div class="layout">
<nav class="sections" aria-label="Sections"><ul>
<li><a href="` + envPagePath + `#environments">Environments</a></li>
<li><a href="` + envPagePath + `#images">Images</a></li>
<li><a href="` + envPagePath + `#assignments">Assignments</a></li>
<li><a href="` + envPagePath + `#runs">Runs</a></li>
<li><a href="` + envPagePath + `#leases">Leases</a></li>
<li><a href="` + envPagePath + `#settings">Settings</a></li>
<li><a href="` + sessionsPagePath + `" aria-current="page">Sessions</a></li>
</ul></nav>
<main id="sessions"><section class="tab" aria-labelledby="sessions-h"><h1 id="sessions-h">Sessions</h1>
<p>Every live cookie session of this instance. A session ends at its 12 h cap, after the idle timeout, when its token leaves the tokens file or changes grant, or when revoked here.</p>
<div class="table-wrap"><table class="stack">
<thead><tr><th>Who</th><th>Role</th><th>Companies</th><th>Source</th><th>Created</th><th>Last seen</th><th>Expires</th><th><span class="visually-hidden">Action</span></th></tr></thead>
<tbody>
{{range .}}<tr data-session="{{.ID}}"><td class="name">{{.Principal.ID}}</td><td data-label="Role">{{.Principal.Role}}</td><td data-label="Companies">{{join .Principal.Companies ", "}}</td><td data-label="Source">{{.Source}}</td><td data-label="Created">{{when .CreatedAt}}</td><td data-label="Last seen">{{when .LastSeenAt}}</td><td data-label="Expires">{{when .ExpiresAt}}</td><td>{{if .Current}}<span class="badge">this session</span>{{else}}<button type="button" class="revoke" data-id="{{.ID}}" aria-label="Revoke the session of {{.Principal.ID}}">Revoke</button>{{end}}</td></tr>
{{end}}</tbody></table></div>
<p id="sessions-status" role="status"></p>
</section>
<script src="/assets/sessions.js" defer></script>
</main></div></body></html>
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
