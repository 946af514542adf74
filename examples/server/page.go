package main

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/instance"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/qualification"
)

// envPagePath is the canonical URL of the operator's Environments page
// (SPEC UI): Settings → Environments.
const envPagePath = "/company/settings/instance/environments"

// assets are the page's template, script and style sheet, embedded: no
// build step, no npm.
//
//go:embed assets
var assets embed.FS

// pageTmpl is the landing page.
var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>berth</title></head>
<body><main>
<h1>berth</h1>
{{if .}}<p>Signed in as {{.}}.</p>
<p><a href="` + envPagePath + `">Settings → Environments</a></p>
<p>The API is at <a href="/api/v1/environments">/api/v1/</a>; its document is <a href="/api/openapi.json">/api/openapi.json</a>.</p>
{{else}}<p><a href="/login">Log in</a></p>{{end}}
</main></body></html>
`))

// envTmpl is the Environments page, server-rendered; assets/envs.js
// makes its forms call /api/v1.
var envTmpl = template.Must(template.New("envs.html").Funcs(template.FuncMap{
	"join": strings.Join,
}).ParseFS(assets, "assets/envs.html"))

// sessionOf returns the cookie session of r, or nil.
func (s *server) sessionOf(r *http.Request) *session {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	sess, err := s.host.lookupSession(r.Context(), ck.Value, s.now())
	if err != nil {
		return nil
	}
	return sess
}

// servePage serves the landing page, naming the session's principal.
func (s *server) servePage(w http.ResponseWriter, r *http.Request) {
	who := ""
	if sess := s.sessionOf(r); sess != nil {
		who = sess.principal.String()
	}
	setPageHeaders(w)
	pageTmpl.Execute(w, who)
}

// setPageHeaders sets the headers of every page: HTML, no caching, and a
// content security policy that allows only the server's own scripts and
// styles (no inline script can run).
func setPageHeaders(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
}

// serveAsset serves an embedded script or style sheet.
func (s *server) serveAsset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var ct string
	switch {
	case strings.HasSuffix(name, ".js"):
		ct = "text/javascript; charset=utf-8"
	case strings.HasSuffix(name, ".css"):
		ct = "text/css; charset=utf-8"
	default:
		http.NotFound(w, r)
		return
	}
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}

// when is a time as the page shows it: relative, with the exact time on
// hover.
type when struct {
	Ago, Exact, ISO string
}

// whenOf renders t against now ("3 min ago", exact UTC on hover).
func whenOf(t, now time.Time) when {
	if t.IsZero() {
		return when{Ago: "never"}
	}
	return when{Ago: ago(now.Sub(t)), Exact: t.UTC().Format("2006-01-02 15:04:05 UTC"), ISO: t.UTC().Format(time.RFC3339)}
}

// ago is a duration in plain words.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		return "just now"
	case d < 45*time.Second:
		return "just now"
	case d < 90*time.Second:
		return "1 min ago"
	case d < time.Hour:
		return strconv.Itoa(int(d.Round(time.Minute)/time.Minute)) + " min ago"
	case d < 2*time.Hour:
		return "1 hour ago"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " hours ago"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " days ago"
}

// envPage is what the Environments page renders.
type envPage struct {
	Who       string
	Company   string
	Companies []string // the principal's grants; empty for instance-wide roles
	Error     string   // a read that failed, shown at the top

	Settings    instance.Settings
	SettingsRev string
	Disabled    bool
	ManagedOnly bool

	Drivers     []driverRow
	DriversUp   int         // how many are available
	Offered     []driverRow // drivers the create form offers
	Unavailable []driverRow // drivers listed with their reason, never offered
	Envs        []envRow
	Editor      *editor
	Bindings    []bindingRow
	Leases      []leaseRow

	Can perms
	// Admin: the principal is an instance administrator, who also gets
	// the Sessions page.
	Admin bool
	// XTerm: the server serves Debian's libjs-xterm under /xterm/ (else
	// the terminal is a plain line terminal).
	XTerm bool
}

// OnlyLocal reports whether the managed local environment is the only
// one saved: the page then says what to do first.
func (p *envPage) OnlyLocal() bool {
	return len(p.Envs) == 1 && p.Envs[0].Local
}

// perms are the controls the principal gets; each is asked of the
// library's authorizer, so that the page shows what the API would allow.
type perms struct {
	Create, Update, Archive, Delete, Probe, Bind, Run, Settings, ReadConfig bool
}

type driverRow struct {
	Name, Kind string
	Isolation  string // the level it declares for its defaults
	Below      string // its isolation at its defaults is below the minimum, or ""
	Plugin     string // "plugin VERSION, pin SHA256[:12]" for a driver a plugin serves, or ""
	PluginFull string // the whole pin and the binary, on hover
	Available  bool
	Reason     string // the library's whole error, on hover
	Short      string // one short sentence
	Caps       []capRow
	Limits     []string
	Health     []healthRow
}

type healthRow struct {
	Endpoint  string
	Available bool
	Reason    string // on hover
	Checked   when
}

type envRow struct {
	ID, Name, Driver, Description string
	Revision                      int64
	Status                        string // in plain words
	Unavailable                   string // the library's whole reason, on hover
	Short                         string // the reason in one short sentence
	Local                         bool
	Archived                      bool
	Health                        bool // the driver measures provider health
	// NoRunner: its driver (with its config) cannot host berth's runner,
	// so the run form offers it disabled, with that reason.
	NoRunner bool
	Updated  when
	Selected bool
	// Isolation is the level its driver declares for its config; Require
	// its requireIsolation ("" for none); Below says the level is below
	// the minimum in force.
	Isolation, Require string
	Below              bool
	// Last is the company's last Test of it (stored by the library), nil
	// when none; Failing and NotQualified are what it and the
	// qualification add to the state.
	Last                  *lastTestRow
	Failing, NotQualified bool
	Host                  bool // a host target: nothing to qualify
}

// lastTestRow is a stored last Test as the page shows it.
type lastTestRow struct {
	OK            bool
	Code, Message string
	At            when
}

// Tone is the colour of the row's state badge: ok, warn, bad or muted.
func (r envRow) Tone() string {
	switch {
	case r.Archived:
		return "muted"
	case r.Unavailable != "", r.Failing:
		return "bad"
	case r.NotQualified:
		return "warn"
	}
	return "ok"
}

// withTest combines the row's availability with the company's last Test
// and qualification (qv): "failing since 10:42 UTC" after a failed Test
// while the target is available, "ready — not qualified" for a sandbox
// target without a qualification that applies; an unavailable or
// archived row keeps its state.
func (r *envRow) withTest(qv qualification.View, host bool, now time.Time) {
	if lt := qv.LastTest; lt != nil {
		r.Last = &lastTestRow{OK: lt.OK, Code: lt.Code, Message: lt.Message, At: whenOf(lt.At, now)}
	}
	if r.Archived || r.Unavailable != "" {
		return
	}
	switch lt := qv.LastTest; {
	case lt != nil && !lt.OK:
		since := lt.FailingSince
		if since.IsZero() {
			since = lt.At
		}
		r.Status, r.Failing = "failing since "+clockOf(since, now), true
	case !host && !qv.Qualified:
		r.Status, r.NotQualified = "ready — not qualified", true
	}
}

// clockOf is t as a time of day in UTC ("10:42 UTC"), with its date when
// it is not today's.
func clockOf(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04 UTC")
	}
	return t.Format("Jan 2 15:04 UTC")
}

type bindingRow struct {
	Kind, Key, EnvID, EnvName string
	Revision                  int64
	Updated                   when
}

type leaseRow struct {
	ID, EnvName, Provider, Status, Workspace string
	Acquired                                 when
}

// editor is the create or edit form of one environment, generated from
// its driver's schema (UI-1).
type editor struct {
	Create      bool
	ID          string
	Driver      string
	Name        string
	Description string
	Revision    int64
	Redacted    bool
	Local       bool
	Archived    bool
	Env         string // the environment's env vars, KEY=VALUE per line
	Metadata    string // its metadata, KEY=VALUE per line
	SecretEnv   string // the label of the driver's secret env map field, if any
	Fields      []fieldRow
	Caps        []capRow
	Limits      []string
	Isolation   string // the level the driver declares for the config
	Require     string // the environment's requireIsolation, "" for none
	Unavailable string
	Short       string // Unavailable in one short sentence
	Qual        *qualRow
	Template    string // the active template and its drift, or ""
	// Saved is the revision a save from this page just wrote (the
	// address's saved=N while it is still the environment's revision),
	// shown until the next edit; 0 for none.
	Saved  int64
	Images *imagesRow
}

// imagesRow is the images panel of a saved environment (UI-4): what its
// driver allows and whether the principal acts (operators) or reads
// (board members); the script reads the templates and sessions.
type imagesRow struct {
	EnvID, Driver string
	Act           bool // the principal may set up, capture, promote
	Capture       bool // the driver has template_capture
	Terminal      bool // the driver has terminal
	Active        string
	Drift         string // none, relinked, detached
}

type qualRow struct {
	Qualified   bool
	Code        string
	Reason      string
	Platform    string
	Recorded    when
	Invalidated when
}

// fieldRow is one config field of the editor.
type fieldRow struct {
	Name, Label, Kind, Type, Doc string
	Help                         string // the doc and the default, as sentences
	Required                     bool
	// Advanced: the schema marks the field as seldom changed, so the
	// editor shows it in its Advanced group (never a required one).
	Advanced bool
	// Set: an advanced field holds a value other than its default, so
	// the Advanced group opens to show it.
	Set     bool
	Default string
	Enum    []string
	// Pinnable: the field is the schema's image reference (an OCI
	// reference), so the editor offers "Pin to digest" beside it.
	Pinnable bool
	// Pickable: the field is the schema's image field and the driver
	// lists its provider's images (drivers.ImageLister), so the editor
	// offers a picker beside it.
	Pickable bool
	Value    string // the current value in the form's text form
	Checked  bool   // a boolean's current value
	// A secret field holding a reference shows "set (version N)"; its
	// reference (never a value) goes back unchanged unless replaced.
	SecretSet     bool
	SecretVersion int64
	SecretRef     string // JSON of the reference
	SecretKeys    []secretKey
	SecretRefs    string // JSON of a secret map's key → reference
}

// secretKey is one key of a secret map field: its name and the version
// of its value (never the value).
type secretKey struct {
	Key     string
	Version int64
}

// Multiline reports whether the field is edited in a textarea.
func (f fieldRow) Multiline() bool {
	switch f.Type {
	case "list", "map":
		return true
	}
	return f.Kind == "secret"
}

// servePageEnvironments serves the Environments page to a signed-in
// operator: a signed-out visitor goes to the login form, an agent gets no
// page (403).
func (s *server) serveEnvironmentsPage(w http.ResponseWriter, r *http.Request) {
	sess := s.sessionOf(r)
	if sess == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	p := sess.principal
	ctx := r.Context()
	setPageHeaders(w)
	cat := s.sys.Catalog()
	if p.Role == authz.RoleAgent || cat.Authorize(ctx, p, authz.ActionRead, authz.Resource{Kind: authz.ResourceKindEnvironment}) != nil {
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Not available: berth</title></head><body><main><h1>Environments</h1><p id="no-page">This page is for operators; agents use the API.</p></main></body></html>`)
		return
	}
	pg, err := s.buildEnvPage(ctx, p, r)
	if err != nil {
		pg = &envPage{Who: p.String(), Error: err.Error()}
	}
	if err := envTmpl.Execute(w, pg); err != nil {
		s.log.Error("render the environments page", "error", err.Error())
	}
}

func (s *server) allowed(ctx context.Context, p authz.Principal, a authz.Action, res authz.Resource) bool {
	return s.sys.Catalog().Authorize(ctx, p, a, res) == nil
}

// buildEnvPage reads, as p, everything the page shows.
func (s *server) buildEnvPage(ctx context.Context, p authz.Principal, r *http.Request) (*envPage, error) {
	now := s.now()
	q := r.URL.Query()
	pg := &envPage{Who: p.String(), Companies: p.Companies, XTerm: s.xtermDir != "", Admin: p.Role == authz.RoleInstanceAdmin}
	pg.Company = strings.TrimSpace(q.Get("company"))
	if len(p.Companies) > 0 && !slices.Contains(p.Companies, pg.Company) {
		pg.Company = p.Companies[0]
	}
	if pg.Company == "" {
		pg.Company = "default"
	}
	envRes := authz.Resource{Kind: authz.ResourceKindEnvironment}
	pg.Can = perms{
		Create:     s.allowed(ctx, p, authz.ActionCreate, envRes),
		Update:     s.allowed(ctx, p, authz.ActionUpdate, envRes),
		Archive:    s.allowed(ctx, p, authz.ActionArchive, envRes),
		Delete:     s.allowed(ctx, p, authz.ActionDelete, envRes),
		Probe:      s.allowed(ctx, p, authz.ActionProbe, authz.Resource{Kind: authz.ResourceKindEnvironment, Company: pg.Company}),
		Bind:       s.allowed(ctx, p, authz.ActionBind, authz.Resource{Kind: authz.ResourceKindBinding, Company: pg.Company}),
		Run:        s.allowed(ctx, p, authz.ActionLease, authz.Resource{Kind: authz.ResourceKindEnvironment, Company: pg.Company}),
		Settings:   s.allowed(ctx, p, authz.ActionUpdate, authz.Resource{Kind: authz.ResourceKindInstanceSettings}),
		ReadConfig: s.allowed(ctx, p, authz.ActionReadConfig, envRes),
	}

	st, err := s.sys.Settings().Get(ctx, p)
	if err != nil {
		return nil, err
	}
	pg.Settings, pg.SettingsRev = st, strconv.FormatInt(st.Revision, 10)
	pg.Disabled, pg.ManagedOnly = !st.EnableEnvironments, st.ManagedSandboxOnly

	health, err := s.stores.Health.ListProviderHealth(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := s.sys.Catalog().Drivers(ctx, p)
	if err != nil {
		return nil, err
	}
	hostDriver := map[string]bool{}
	for _, info := range infos {
		hostDriver[info.Name] = info.Kind == drivers.KindHost
		if err := st.Admit(info.Name, info.Kind == drivers.KindHost); err != nil && info.Available {
			info.Available, info.Reason, info.Effective = false, err.Error(), 0
		}
		row := driverRow{Name: info.Name, Kind: info.Kind.String(), Isolation: info.Isolation.String(), Available: info.Available, Reason: info.Reason,
			Below: belowMinimum(info, st)}
		if p := info.Plugin; p != nil {
			row.Plugin = fmt.Sprintf("plugin %s, pin %.12s", p.Version, p.SHA256)
			row.PluginFull = fmt.Sprintf("pin sha256:%s, binary %s", p.SHA256, p.Binary)
		}
		if info.Available { // an unavailable driver's reason says it all
			row.Caps, row.Limits = capNames(info.Effective), limitsOf(info.Effective)
			pg.DriversUp++
		} else {
			row.Short = shortReason(info.Reason, st, info.Kind == drivers.KindHost, nil, now)
		}
		for _, h := range health {
			if h.Driver == info.Name {
				row.Health = append(row.Health, healthRow{Endpoint: h.Endpoint, Available: h.Available, Reason: h.Reason, Checked: whenOf(h.CheckedAt, now)})
			}
		}
		pg.Drivers = append(pg.Drivers, row)
		switch {
		case info.Name == "local": // the managed one only (CFG-4)
		case info.Available:
			pg.Offered = append(pg.Offered, row)
		default:
			pg.Unavailable = append(pg.Unavailable, row)
		}
	}

	envs, err := s.sys.Catalog().List(ctx, p, environment.ListFilter{})
	if err != nil {
		return nil, err
	}
	sortBy(envs, func(v *environment.View) string { return v.Name })
	names := map[string]string{}
	editID := q.Get("edit")
	for _, v := range envs {
		names[v.ID] = v.Name
		_, hc := s.driver(v.Driver).(drivers.HealthChecker)
		row := envRow{ID: v.ID, Name: v.Name, Driver: v.Driver, Description: v.Description, Revision: v.Revision,
			Status: statusWords(v), Unavailable: v.Unavailable, Local: v.Driver == "local", Health: hc,
			Archived: v.Status == environment.StatusArchived, Updated: whenOf(v.UpdatedAt, now), Selected: v.ID == editID,
			Isolation: v.Isolation.String()}
		if v.RequireIsolation != drivers.IsolationNone {
			row.Require = v.RequireIsolation.String()
		}
		if v.Unavailable != "" {
			row.Short = shortReason(v.Unavailable, st, hostDriver[v.Driver], v.Health, now)
			if short := isolationShort(v, st); short != "" && strings.Contains(v.Unavailable, "below the minimum") {
				row.Short, row.Below = short, true
			}
		}
		if drv := s.driver(v.Driver); drv != nil {
			eff := drivers.Effective(drv, 0)
			if v.Config != nil {
				eff = drivers.Effective(drv, drivers.ConfigNarrowing(drv, v.Config))
			}
			row.NoRunner = !eff.Has(drivers.CapRunnerIngress)
		}
		if qv, err := s.sys.Prober().Qualification(ctx, p, v.ID, pg.Company); err == nil {
			row.Host = hostDriver[v.Driver]
			row.withTest(qv, row.Host, now)
		}
		pg.Envs = append(pg.Envs, row)
	}

	switch {
	case editID != "":
		v, err := s.sys.Catalog().Get(ctx, p, editID)
		if err != nil {
			return nil, err
		}
		pg.Editor = s.editorOf(ctx, p, v, pg.Company, now)
		if n, err := strconv.ParseInt(q.Get("saved"), 10, 64); err == nil && n == v.Revision {
			pg.Editor.Saved = n
		}
		if v.Unavailable != "" {
			pg.Editor.Short = shortReason(v.Unavailable, st, hostDriver[v.Driver], v.Health, now)
			if short := isolationShort(v, st); short != "" && strings.Contains(v.Unavailable, "below the minimum") {
				pg.Editor.Short = short
			}
		}
	case q.Get("new") != "" && pg.Can.Create:
		d := q.Get("new")
		for _, o := range pg.Offered {
			if o.Name == d {
				pg.Editor = s.newEditor(d)
			}
		}
		if pg.Editor == nil {
			pg.Error = fmt.Sprintf("driver %q is not offered: it is unknown, unavailable, or the managed local one", d)
		}
	}

	if bs, err := s.sys.Assignments().List(ctx, p, environment.BindingFilter{Company: pg.Company}); err == nil {
		for _, b := range bs {
			pg.Bindings = append(pg.Bindings, bindingRow{Kind: string(b.Kind), Key: b.Key, EnvID: b.EnvironmentID,
				EnvName: names[b.EnvironmentID], Revision: b.Revision, Updated: whenOf(b.UpdatedAt, now)})
		}
	}
	if ls, err := s.sys.Leases().List(ctx, p, lease.Filter{Company: pg.Company, Live: true}); err == nil {
		for _, l := range ls {
			pg.Leases = append(pg.Leases, leaseRow{ID: l.ID, EnvName: names[l.Environment], Provider: l.Provider,
				Status: string(l.Status), Workspace: l.Workspace, Acquired: whenOf(l.AcquiredAt, now)})
		}
	}
	return pg, nil
}

// driver returns the registered driver name, or nil.
func (s *server) driver(name string) drivers.Driver {
	d, _ := s.sys.Drivers().Lookup(name)
	return d
}

// statusWords says an environment's state in plain words.
func statusWords(v *environment.View) string {
	switch {
	case v.Status == environment.StatusArchived:
		return "archived"
	case v.Unavailable != "":
		return "unavailable"
	case v.Health != nil && v.Health.CheckedAt != nil && v.Health.Status == environment.HealthAvailable:
		return "ready (provider reachable)"
	}
	return "ready"
}

// shortReason says in one short sentence why a driver or an environment
// is not a target now (the whole reason, the library's error chain, goes
// on hover): the instance settings' refusals and a provider last measured
// unavailable have a sentence each; any other reason is shown without the
// chain's trailing sentinel.
func shortReason(full string, st instance.Settings, host bool, h *environment.HealthView, now time.Time) string {
	switch {
	case !st.EnableEnvironments:
		return "Environments are disabled on this instance."
	case host && st.ManagedSandboxOnly:
		return "Host targets are off: this instance allows managed sandboxes only."
	case h != nil && h.Status == environment.HealthUnavailable && h.CheckedAt != nil:
		return providerSentence(h, now)
	}
	s := strings.TrimSpace(full)
	for _, tail := range []string{": " + drivers.ErrUnavailable.Error(), ": " + drivers.ErrUnsupported.Error()} {
		s = strings.TrimSuffix(s, tail)
	}
	if s == "" {
		return "Unavailable."
	}
	s = strings.ToUpper(s[:1]) + s[1:]
	if !strings.HasSuffix(s, ".") && !strings.HasSuffix(s, ")") {
		s += "."
	}
	return s
}

// isolationShort says in one short sentence that v's isolation is below
// the minimum in force (the instance's, or v's requireIsolation), naming
// the setting, or returns "" when it is not (issue 56). The gate refuses
// such a target with isolation_below_minimum.
func isolationShort(v *environment.View, st instance.Settings) string {
	if !st.EnableEnvironments {
		return ""
	}
	m, by := st.Minimum(), "minimumIsolation"
	if m > st.MinimumIsolation {
		by = "managed sandboxes only"
	}
	if v.RequireIsolation > m {
		m, by = v.RequireIsolation, "this environment requires it"
	}
	if v.Isolation >= m {
		return ""
	}
	return fmt.Sprintf("Isolation %s is below the minimum %s (%s).", v.Isolation, m, by)
}

// providerSentence says why a provider last measured unavailable was, by
// the measurement's reason code: refused credentials are not an
// unreachable provider.
func providerSentence(h *environment.HealthView, now time.Time) string {
	at := ", " + whenOf(*h.CheckedAt, now).Ago + "."
	who := "The provider"
	if h.Endpoint != "" {
		who += " at " + h.Endpoint
	}
	switch h.Code {
	case "auth_failed":
		return who + " refused the credentials when last checked" + at + " Check the API key and its organization, then Check provider again."
	case "host_key_mismatch", "host_key_unknown", "tls_unverified":
		return who + " could not be verified when last checked (" + h.Code + ")" + at
	case "timeout":
		return who + " did not answer in time when last checked" + at
	case "unreachable", "provider_unavailable", "":
		return who + " was unreachable when last checked" + at
	}
	return who + " was unavailable when last checked (" + h.Code + ")" + at
}

// capRow is a capability as the page shows it: in words, with its
// token (the API's name) beside them.
type capRow struct{ Token, Words string }

// capWords says what each capability lets an operator do.
var capWords = map[drivers.Capability]string{
	drivers.CapExec:            "runs commands",
	drivers.CapStreamExec:      "streams their output",
	drivers.CapReattach:        "reopens a sandbox from another process",
	drivers.CapReuse:           "reuses a sandbox across leases",
	drivers.CapList:            "lists its sandboxes",
	drivers.CapDestroyByID:     "cleans up a sandbox by its id",
	drivers.CapImageIdentity:   "reports the image it ran",
	drivers.CapTerminal:        "interactive terminal",
	drivers.CapTemplateCapture: "captures templates",
	drivers.CapTemplateDelete:  "deletes templates",
	drivers.CapRunnerIngress:   "hosts berth's runner",
	drivers.CapFiles:           "reads and downloads files",
}

// capNames lists the capabilities of set, in words with their tokens.
func capNames(set drivers.Set) []capRow {
	var out []capRow
	for _, c := range set.List() {
		w := capWords[c]
		if w == "" {
			w = strings.ReplaceAll(c.String(), "_", " ")
		}
		out = append(out, capRow{Token: c.String(), Words: w})
	}
	return out
}

// limitsOf says what an environment with capabilities set cannot do
// (UI-2).
func limitsOf(set drivers.Set) []string {
	var out []string
	if !set.Has(drivers.CapTerminal) {
		out = append(out, "no interactive setup: this driver has no terminal")
	}
	if !set.Has(drivers.CapTemplateCapture) {
		out = append(out, "no template capture")
	}
	if !set.Has(drivers.CapRunnerIngress) {
		out = append(out, "no runs through the runner: this target cannot host it")
	}
	return out
}

// newEditor is the create form of driver d.
func (s *server) newEditor(d string) *editor {
	drv := s.driver(d)
	ed := &editor{Create: true, Driver: d}
	if drv == nil {
		return ed
	}
	ed.Fields = pickable(fieldsOf(drv.Schema(), nil), drv)
	ed.SecretEnv = secretMapLabel(ed.Fields)
	eff := drivers.Effective(drv, 0)
	ed.Caps, ed.Limits = capNames(eff), limitsOf(eff)
	ed.Isolation = drivers.IsolationOf(drv, nil).String()
	return ed
}

// editorOf is the edit form (or, for the redacted view, the read-only
// view) of v.
func (s *server) editorOf(ctx context.Context, p authz.Principal, v *environment.View, company string, now time.Time) *editor {
	ed := &editor{ID: v.ID, Driver: v.Driver, Name: v.Name, Description: v.Description, Revision: v.Revision,
		Redacted: v.Redacted, Local: v.Driver == "local", Unavailable: v.Unavailable,
		Archived: v.Status == environment.StatusArchived, Env: textOf(v.Env), Metadata: textOf(v.Metadata)}
	if drv := s.driver(v.Driver); drv != nil {
		if !v.Redacted {
			ed.Fields = pickable(fieldsOf(drv.Schema(), v.Config), drv)
			ed.SecretEnv = secretMapLabel(ed.Fields)
		}
		eff := drivers.Effective(drv, 0)
		if v.Config != nil {
			eff = drivers.Effective(drv, drivers.ConfigNarrowing(drv, v.Config))
		}
		ed.Caps, ed.Limits = capNames(eff), limitsOf(eff)
		ed.Isolation = v.Isolation.String()
	}
	if v.RequireIsolation != drivers.IsolationNone {
		ed.Require = v.RequireIsolation.String()
	}
	if at := v.ActiveTemplate; at != nil {
		ed.Template = fmt.Sprintf("%s (%s), drift: %s", at.ID, at.Identity, at.Drift)
	}
	im := &imagesRow{EnvID: v.ID, Driver: v.Driver, Drift: string(environment.DriftNone),
		Act: s.allowed(ctx, p, authz.ActionSetup, authz.Resource{Kind: authz.ResourceKindTemplate, Name: v.ID, Driver: v.Driver})}
	if drv := s.driver(v.Driver); drv != nil {
		eff := drivers.Effective(drv, 0)
		im.Capture, im.Terminal = eff.Has(drivers.CapTemplateCapture), eff.Has(drivers.CapTerminal)
	}
	if at := v.ActiveTemplate; at != nil {
		im.Active, im.Drift = at.ID, string(at.Drift)
	}
	ed.Images = im
	if qv, err := s.sys.Prober().Qualification(ctx, p, v.ID, company); err == nil {
		ed.Qual = qualOf(qv, now)
		// A host target never gets a record (PRB-6): say why rather than
		// "probe with a pinned image".
		if drv := s.driver(v.Driver); drv != nil && drv.Capabilities().Kind == drivers.KindHost && qv.Code == "no_record" {
			ed.Qual.Code = "host_target"
			ed.Qual.Reason = "a host target runs no image, so there is nothing to qualify" +
				map[bool]string{true: ".", false: "; Test still checks that it is reachable."}[ed.Local]
		}
	}
	return ed
}

// secretMapLabel is the label of the first secret map field (a driver's
// secret env vars), or "".
func secretMapLabel(fs []fieldRow) string {
	for _, f := range fs {
		if f.Kind == config.KindSecretMap.String() {
			return f.Label
		}
	}
	return ""
}

func qualOf(v qualification.View, now time.Time) *qualRow {
	q := &qualRow{Qualified: v.Qualified, Code: string(v.Code), Reason: v.Reason}
	if v.InvalidatedAt != nil {
		// The time is shown beside it: the reason says what changed.
		if _, rest, ok := strings.Cut(v.Reason, ": "); ok && strings.HasPrefix(v.Reason, "invalidated at ") {
			q.Reason = rest
		}
	}
	if v.Platform != nil {
		q.Platform = v.Platform.String()
	}
	if v.Isolation != "" {
		q.Platform += ", isolation " + v.Isolation + " measured"
	}
	if v.RecordedAt != nil {
		q.Recorded = whenOf(*v.RecordedAt, now)
	}
	if v.InvalidatedAt != nil {
		q.Invalidated = whenOf(*v.InvalidatedAt, now)
	}
	return q
}

// pickable marks the image field of rows Pickable when drv lists its
// provider's images.
func pickable(rows []fieldRow, drv drivers.Driver) []fieldRow {
	if _, err := drivers.DriverAs[drivers.ImageLister](drv); err != nil {
		return rows
	}
	for i := range rows {
		rows[i].Pickable = rows[i].Name == drv.Schema().ImageField
	}
	return rows
}

// fieldsOf lists sc's fields with cfg's values (nil for a new config).
// Secret values are never in cfg (the full view holds references), and
// never rendered.
func fieldsOf(sc *config.Schema, cfg config.Config) []fieldRow {
	var out []fieldRow
	for _, f := range sc.Fields {
		row := fieldRow{Name: f.Name, Label: strings.ReplaceAll(f.Name, "_", " "), Kind: f.Kind.String(), Type: typeWord(f.Type),
			Doc: f.Doc, Required: f.Required, Enum: f.Enum, Advanced: f.Advanced && !f.Required,
			Pinnable: f.Name == sc.ImageField && sc.ImageReference == nil && f.Type == config.TypeString && f.Kind == config.KindIdentity}
		row.Help = strings.TrimSpace(f.Doc)
		if row.Help != "" && !strings.HasSuffix(row.Help, ".") && !strings.HasSuffix(row.Help, ")") {
			row.Help += "."
		}
		if f.Default != nil {
			row.Default = textOf(f.Default)
			row.Help = strings.TrimSpace(row.Help + " Default: " + row.Default + ".")
			if b, ok := f.Default.(bool); ok {
				row.Checked = b
			}
		}
		v, present := cfg[f.Name]
		switch {
		case f.Kind == config.KindSecret:
			if ref, ok := cfg.SecretRef(f.Name); ok {
				b, _ := json.Marshal(ref)
				row.SecretSet, row.SecretVersion, row.SecretRef = true, ref.Version, string(b)
			}
		case f.Kind == config.KindSecretMap:
			if refs := cfg.SecretMapRefs(f.Name); len(refs) > 0 {
				b, _ := json.Marshal(refs)
				row.SecretRefs = string(b)
				for k, ref := range refs {
					row.SecretKeys = append(row.SecretKeys, secretKey{Key: k, Version: ref.Version})
				}
				sort.Slice(row.SecretKeys, func(i, j int) bool { return row.SecretKeys[i].Key < row.SecretKeys[j].Key })
			}
		case present && f.Type == config.TypeBool:
			row.Checked, _ = v.(bool)
		case present:
			row.Value = textOf(v)
		}
		row.Set = row.SecretSet || len(row.SecretKeys) > 0 || (row.Value != "" && row.Value != row.Default) ||
			(f.Type == config.TypeBool && present && row.Checked != (f.Default == true))
		out = append(out, row)
	}
	return out
}

// Basic lists the editor's fields shown first.
func (e *editor) Basic() []fieldRow { return e.fieldsWhere(false) }

// Advanced lists the fields of the editor's Advanced group.
func (e *editor) Advanced() []fieldRow { return e.fieldsWhere(true) }

// AdvancedSet reports whether an advanced field holds a value other than
// its default (the group is then open, to show it).
func (e *editor) AdvancedSet() bool {
	for _, f := range e.Fields {
		if f.Advanced && f.Set {
			return true
		}
	}
	return false
}

func (e *editor) fieldsWhere(advanced bool) []fieldRow {
	var out []fieldRow
	for _, f := range e.Fields {
		if f.Advanced == advanced {
			out = append(out, f)
		}
	}
	return out
}

func typeWord(t config.Type) string {
	switch t {
	case config.TypeInt:
		return "int"
	case config.TypeBool:
		return "bool"
	case config.TypeDuration:
		return "duration"
	case config.TypeStringList:
		return "list"
	case config.TypeStringMap:
		return "map"
	}
	return "string"
}

// textOf is a config value in the form's text form: lists one per line,
// maps KEY=VALUE per line.
func textOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []string:
		return strings.Join(x, "\n")
	case []any:
		var ss []string
		for _, e := range x {
			ss = append(ss, fmt.Sprint(e))
		}
		return strings.Join(ss, "\n")
	case map[string]string:
		var ss []string
		for k, e := range x {
			ss = append(ss, k+"="+e)
		}
		sort.Strings(ss)
		return strings.Join(ss, "\n")
	case map[string]any:
		var ss []string
		for k, e := range x {
			ss = append(ss, k+"="+fmt.Sprint(e))
		}
		sort.Strings(ss)
		return strings.Join(ss, "\n")
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
