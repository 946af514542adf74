package main

import (
	"html/template"
	"net/http"
)

// pageTmpl is the landing page; the Environments settings page builds on
// it (its own issue).
var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>berth</title></head>
<body><main>
<h1>berth</h1>
{{if .}}<p>Signed in as {{.}}.</p>
<p>The API is at <a href="/api/v1/environments">/api/v1/</a>; its document is <a href="/api/openapi.json">/api/openapi.json</a>.</p>
{{else}}<p><a href="/login">Log in</a></p>{{end}}
</main></body></html>
`))

// servePage serves the landing page, naming the session's principal.
func (s *server) servePage(w http.ResponseWriter, r *http.Request) {
	who := ""
	if ck, err := r.Cookie(sessionCookie); err == nil {
		if sess, err := s.host.lookupSession(r.Context(), ck.Value, s.now()); err == nil && sess != nil {
			who = sess.principal.String()
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'")
	pageTmpl.Execute(w, who)
}
