package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/examples/internal/probejson"
	"github.com/berthdev/berth/handover"
	"github.com/berthdev/berth/lease"
	"github.com/berthdev/berth/probe"
)

// wantsEvents reports whether the client asked for server-sent events.
func wantsEvents(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// sse is an open server-sent event stream.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// openEvents starts an event stream after taking a stream slot of the
// principal; the returned release frees it.
func (s *server) openEvents(w http.ResponseWriter, r *http.Request) (*sse, func(), error) {
	release, err := s.streams.acquire(identityOf(r))
	if err != nil {
		return nil, nil, err
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// A stream outlives the server's read timeout: clear the deadlines so
	// that the connection is not cut under it.
	rc.SetReadDeadline(timeZero)
	rc.SetWriteDeadline(timeZero)
	rc.Flush()
	return &sse{w: w, rc: rc}, release, nil
}

// send writes one event (id may be "").
func (e *sse) send(event, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if id != "" {
		fmt.Fprintf(e.w, "id: %s\n", id)
	}
	if _, err := fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", event, b); err != nil {
		return err
	}
	return e.rc.Flush()
}

// comment writes an SSE comment line (clients ignore it): a keep-alive.
func (e *sse) comment(text string) error {
	if _, err := fmt.Fprintf(e.w, ": %s\n\n", text); err != nil {
		return err
	}
	return e.rc.Flush()
}

// probeBody is the optional body of a saved probe.
type probeBody struct {
	Workspace string `json:"workspace,omitempty"`
	Runner    bool   `json:"runner,omitempty"`
}

// draftBody is the body of a draft probe.
type draftBody struct {
	Driver string         `json:"driver"`
	Config map[string]any `json:"config,omitempty"`
}

// runProbe answers a probe as JSON, or as progress events and then the
// result when the client accepts text/event-stream.
func (s *server) runProbe(w http.ResponseWriter, r *http.Request, envID string, do func(probe.Request) (*probe.Result, error)) {
	company := r.PathValue("company")
	if !wantsEvents(r) {
		res, err := do(probe.Request{Company: company})
		s.audit(r, "probe", envID, err, "company", company, "ok", res != nil && res.OK)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.writeJSON(w, r, http.StatusOK, probejson.Of(res))
		return
	}
	ev, release, err := s.openEvents(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	stages := make(chan probejson.Stage, 64)
	type outcome struct {
		res *probe.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := do(probe.Request{Company: company, Progress: func(st probe.Stage, running bool) {
			select {
			case stages <- probejson.StageOf(st, running):
			default: // a slow reader loses progress lines, never the result
			}
		}})
		done <- outcome{res, err}
	}()
	for {
		select {
		case st := <-stages:
			ev.send("stage", "", st)
		case <-s.closing:
			return // the probe ends with the request's context
		case o := <-done:
			for len(stages) > 0 {
				ev.send("stage", "", <-stages)
			}
			s.audit(r, "probe", envID, o.err, "company", company, "ok", o.res != nil && o.res.OK)
			if o.err != nil {
				ev.send("error", "", struct {
					Error apiError `json:"error"`
				}{errorBody(o.err)})
				return
			}
			ev.send("result", "", probejson.Of(o.res))
			return
		}
	}
}

func (s *server) probeSaved(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body probeBody
	if err := decode(w, r, &body, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	s.runProbe(w, r, id, func(req probe.Request) (*probe.Result, error) {
		req.Workspace, req.Runner = body.Workspace, body.Runner
		return s.sys.Prober().Probe(r.Context(), principalOf(r), id, req)
	})
}

func (s *server) probeDraft(w http.ResponseWriter, r *http.Request) {
	var body draftBody
	if err := decode(w, r, &body, false); err != nil {
		s.writeError(w, r, err)
		return
	}
	if body.Driver == "" {
		s.writeError(w, r, invalid("driver", "required"))
		return
	}
	s.runProbe(w, r, "", func(req probe.Request) (*probe.Result, error) {
		return s.sys.Prober().ProbeDraft(r.Context(), principalOf(r), body.Driver, body.Config, req)
	})
}

func (s *server) qualification(w http.ResponseWriter, r *http.Request) {
	v, err := s.sys.Prober().Qualification(r.Context(), principalOf(r), r.PathValue("id"), r.PathValue("company"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, v)
}

// bindingRef reads {kind}/{key} ("_" is the instance default's empty key)
// and the company a binding of that kind belongs to: the path's {company}
// (binding keys are per company), "" for the instance default.
func bindingRef(r *http.Request) (environment.BindingRef, string, error) {
	kind := environment.BindingKind(r.PathValue("kind"))
	key := r.PathValue("key")
	company := r.PathValue("company")
	switch kind {
	case environment.BindingInstanceDefault:
		if key != "_" {
			return environment.BindingRef{}, "", invalid("key", `the instance default's key is "_"`)
		}
		return environment.BindingRef{Kind: kind}, "", nil
	case environment.BindingWorkspace, environment.BindingProject, environment.BindingAgent:
		return environment.BindingRef{Kind: kind, Company: company, Key: key}, company, nil
	}
	return environment.BindingRef{}, "", invalid("kind", "%q is no binding kind (workspace, project, agent, instance_default)", kind)
}

// belongs checks that a company-bound record read under {company} is that
// company's: another company's record is not found, as a missing one.
func belongs(r *http.Request, company string, notFound error) error {
	if company != "" && company != r.PathValue("company") {
		return notFound
	}
	return nil
}

func (s *server) listAssignments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bs, err := s.sys.Assignments().List(r.Context(), principalOf(r), environment.BindingFilter{
		Company: r.PathValue("company"), Kind: environment.BindingKind(q.Get("kind")), EnvironmentID: q.Get("environmentId"),
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := paginate(r, bs, func(b *environment.Binding) string { return string(b.Kind) + "/" + b.Key })
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, p)
}

// bindingBody is the body of PUT …/assignments/{kind}/{key}.
type bindingBody struct {
	EnvironmentID string `json:"environmentId"`
}

// setAssignment creates a binding (no If-Match), replaces revision N
// (If-Match "N") or whatever is stored (If-Match *).
func (s *server) setAssignment(w http.ResponseWriter, r *http.Request) {
	ref, _, err := bindingRef(r)
	var body bindingBody
	if err == nil {
		err = decode(w, r, &body, false)
	}
	req := environment.Binding{BindingRef: ref, EnvironmentID: body.EnvironmentID}
	var base int64
	if err == nil {
		switch im := r.Header.Get("If-Match"); im {
		case "":
		case "*":
			base = environment.AnyRevision
		default:
			base, err = ifMatch(r)
		}
	}
	var b *environment.Binding
	if err == nil {
		b, err = s.sys.Assignments().Set(r.Context(), principalOf(r), req, base)
	}
	s.audit(r, "assignment.set", body.EnvironmentID, err, "binding", ref.String())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(b.Revision))
	s.writeJSON(w, r, http.StatusOK, b)
}

func (s *server) showAssignment(w http.ResponseWriter, r *http.Request) {
	ref, _, err := bindingRef(r)
	var b *environment.Binding
	if err == nil {
		b, err = s.sys.Assignments().Show(r.Context(), principalOf(r), ref)
	}
	if err == nil {
		err = belongs(r, b.Company, errcode.ErrNotFound)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(b.Revision))
	s.writeJSON(w, r, http.StatusOK, b)
}

func (s *server) clearAssignment(w http.ResponseWriter, r *http.Request) {
	ref, _, err := bindingRef(r)
	var rev int64
	if err == nil {
		rev, err = ifMatch(r)
	}
	if err == nil {
		var b *environment.Binding
		if b, err = s.sys.Assignments().Show(r.Context(), principalOf(r), ref); err == nil {
			err = belongs(r, b.Company, errcode.ErrNotFound)
		}
	}
	if err == nil {
		err = s.sys.Assignments().Clear(r.Context(), principalOf(r), ref, rev)
	}
	s.audit(r, "assignment.clear", "", err, "binding", ref.String())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resolveBody is the body of POST …/resolve.
type resolveBody struct {
	Workspace string      `json:"workspace,omitempty"`
	Project   string      `json:"project,omitempty"`
	Agent     string      `json:"agent,omitempty"`
	Required  drivers.Set `json:"required,omitempty"`
}

// resolve answers what a run of the scope would get, and which binding won.
func (s *server) resolve(w http.ResponseWriter, r *http.Request) {
	var body resolveBody
	if err := decode(w, r, &body, true); err != nil {
		s.writeError(w, r, err)
		return
	}
	scope := authz.Scope{Company: r.PathValue("company"), Workspace: body.Workspace, Project: body.Project, Agent: body.Agent}
	res, err := s.sys.Assignments().Resolve(r.Context(), principalOf(r), scope, body.Required)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, res)
}

func (s *server) listLeases(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := lease.Filter{Company: r.PathValue("company"), Environment: q.Get("environment"), Live: q.Get("live") == "true"}
	if st := q.Get("status"); st != "" {
		f.Statuses = []lease.Status{lease.Status(st)}
	}
	ls, err := s.sys.Leases().List(r.Context(), principalOf(r), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if wantsEvents(r) {
		s.streamLeases(w, r, f, ls)
		return
	}
	p, err := paginate(r, ls, func(l *lease.Lease) string { return l.ID })
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, p)
}

// leasesPoll is how often a lease stream reads the leases again, and
// leasesKeepAlive how long it may stay silent before it sends a comment
// (so that a proxy does not close an idle stream).
const (
	leasesPoll      = time.Second
	leasesKeepAlive = 15 * time.Second
)

// streamLeases serves GET …/leases with Accept: text/event-stream, the
// page's live Leases section: an event "leases" with the whole list
// (the same filter, at most 500, as {"items": [...]}) at once and again
// whenever it changes, read every second; it ends when the client goes,
// the server shuts down, or a read fails (an event "error" first). It
// takes one of the principal's stream slots.
func (s *server) streamLeases(w http.ResponseWriter, r *http.Request, f lease.Filter, first []*lease.Lease) {
	ev, release, err := s.openEvents(w, r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	defer release()
	var last []byte
	quiet := time.Now()
	for ls := first; ; {
		if len(ls) > 500 {
			ls = ls[:500]
		}
		if ls == nil {
			ls = []*lease.Lease{}
		}
		b, _ := json.Marshal(ls)
		if !bytes.Equal(b, last) {
			if ev.send("leases", "", struct {
				Items []*lease.Lease `json:"items"`
			}{ls}) != nil {
				return
			}
			last, quiet = b, time.Now()
		} else if time.Since(quiet) >= leasesKeepAlive {
			if ev.comment("keep-alive") != nil {
				return
			}
			quiet = time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.closing:
			return
		case <-time.After(leasesPoll):
		}
		var err error
		if ls, err = s.sys.Leases().List(r.Context(), principalOf(r), f); err != nil {
			if r.Context().Err() == nil {
				ev.send("error", "", struct {
					Error apiError `json:"error"`
				}{errorBody(err)})
			}
			return
		}
	}
}

// companyLease reads lease {id} of {company}.
func (s *server) companyLease(r *http.Request) (*lease.Lease, error) {
	l, err := s.sys.Leases().Get(r.Context(), principalOf(r), r.PathValue("id"))
	if err != nil {
		return nil, err
	}
	if err := belongs(r, l.Company, fmt.Errorf("lease %s: %w", r.PathValue("id"), errcode.ErrNotFound)); err != nil {
		return nil, err
	}
	return l, nil
}

func (s *server) getLease(w http.ResponseWriter, r *http.Request) {
	l, err := s.companyLease(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, l)
}

// releaseBody is the body of POST …/leases/{id}/release.
type releaseBody struct {
	Disposition string `json:"disposition,omitempty"`
	RunFailed   bool   `json:"runFailed,omitempty"`
	Reason      string `json:"reason,omitempty"`
}

func (s *server) releaseLease(w http.ResponseWriter, r *http.Request) {
	var body releaseBody
	err := decode(w, r, &body, true)
	opts := lease.ReleaseOptions{Disposition: lease.Destroy, RunFailed: body.RunFailed, Reason: body.Reason}
	if err == nil && body.Disposition != "" {
		switch d := lease.Disposition(body.Disposition); d {
		case lease.ByPolicy, lease.Keep, lease.Stop, lease.Destroy:
			opts.Disposition = d
		default:
			err = invalid("disposition", "want keep, stop or destroy")
		}
	}
	var l *lease.Lease
	if err == nil {
		_, err = s.companyLease(r)
	}
	if err == nil {
		l, err = s.sys.Leases().Release(r.Context(), principalOf(r), r.PathValue("id"), opts)
	}
	s.audit(r, "lease.release", "", err, "lease", r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, l)
}

func (s *server) listAuthChecks(w http.ResponseWriter, r *http.Request) {
	cs, err := s.sys.Handover().List(r.Context(), principalOf(r), r.PathValue("company"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := paginate(r, cs, func(c handover.AuthCheck) string { return c.AccountRef })
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, p)
}

// authCheckBody is the body of PUT …/auth-checks/{account}: the host's
// answer to a project auth check of the managed account on an environment.
type authCheckBody struct {
	EnvironmentID string   `json:"environmentId"`
	Projects      []string `json:"projects,omitempty"`
	Status        string   `json:"status"`
	Message       string   `json:"message,omitempty"`
}

// recordAuthCheck prepares the hand-over and records the host's answer
// (AUTH-2).
func (s *server) recordAuthCheck(w http.ResponseWriter, r *http.Request) {
	company, account := r.PathValue("company"), r.PathValue("account")
	var body authCheckBody
	err := decode(w, r, &body, false)
	if err == nil && body.Status != string(handover.StatusSucceeded) && body.Status != string(handover.StatusFailed) {
		err = invalid("status", "want succeeded or failed")
	}
	var rec handover.AuthCheck
	if err == nil {
		rec, err = s.sys.Handover().PrepareManagedAccount(r.Context(), principalOf(r), company, account, body.EnvironmentID, body.Projects)
	}
	if err == nil {
		rec, err = s.sys.Handover().RecordResult(r.Context(), principalOf(r), company, account, rec.Preparation,
			handover.Status(body.Status), body.Message)
	}
	s.audit(r, "auth_check.record", body.EnvironmentID, err, "company", company)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, rec)
}

func (s *server) getAuthCheck(w http.ResponseWriter, r *http.Request) {
	rec, err := s.sys.Handover().Get(r.Context(), principalOf(r), r.PathValue("company"), r.PathValue("account"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, rec)
}

func (s *server) clearAuthCheck(w http.ResponseWriter, r *http.Request) {
	err := s.sys.Handover().Clear(r.Context(), principalOf(r), r.PathValue("company"), r.PathValue("account"))
	s.audit(r, "auth_check.clear", "", err, "company", r.PathValue("company"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
