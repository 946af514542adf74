package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/berthdev/berth/instance"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/errcode"
)

// driverView is one driver of GET /api/v1/drivers: its capabilities and
// availability (test mode and the gate included) and the provider health
// last measured. Building it allocates nothing (CAP-1).
type driverView struct {
	drivers.DriverInfo
	Health []environment.ProviderHealth `json:"health"`
	// BelowMinimum, if not empty, says that the driver's isolation at its
	// defaults is below the instance's minimum (issue 56): its targets are
	// refused unless their config raises the level (Docker's runtime).
	BelowMinimum string `json:"belowMinimum,omitempty"`
}

// belowMinimum returns the sentence of driverView.BelowMinimum for an
// available driver that declares less than the minimum st sets, else "".
func belowMinimum(info drivers.DriverInfo, st instance.Settings) string {
	if m := st.Minimum(); info.Available && info.Isolation < m {
		return fmt.Sprintf("isolation %s at its defaults is below the minimum %s", info.Isolation, m)
	}
	return ""
}

func (s *server) listDrivers(w http.ResponseWriter, r *http.Request) {
	// Listing needs ActionRead, as a catalog listing does; the catalog's
	// gate marks a test driver outside test mode unavailable.
	infos, err := s.sys.Catalog().Drivers(r.Context(), principalOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	health, err := s.stores.Health.ListProviderHealth(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	settings, err := s.sys.Settings().Get(r.Context(), principalOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := []driverView{}
	for _, info := range infos {
		// The instance settings (CFG-9): a host driver under
		// managed-sandbox-only, every driver with environments disabled.
		if err := settings.Admit(info.Name, info.Kind == drivers.KindHost); err != nil && info.Available {
			info.Available, info.Reason, info.Effective = false, err.Error(), 0
		}
		v := driverView{DriverInfo: info, Health: []environment.ProviderHealth{}, BelowMinimum: belowMinimum(info, settings)}
		for _, h := range health {
			if h.Driver == info.Name {
				v.Health = append(v.Health, h)
			}
		}
		out = append(out, v)
	}
	s.writeJSON(w, r, http.StatusOK, struct {
		Items []driverView `json:"items"`
	}{out})
}

func (s *server) listEnvironments(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := environment.ListFilter{Driver: q.Get("driver"), Status: environment.Status(q.Get("status"))}
	envs, err := s.sys.Catalog().List(r.Context(), principalOf(r), f)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := paginate(r, envs, func(v *environment.View) string { return v.ID })
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, p)
}

// writeView writes an environment with its ETag.
func (s *server) writeView(w http.ResponseWriter, r *http.Request, st int, v *environment.View) {
	w.Header().Set("ETag", etag(v.Revision))
	s.writeJSON(w, r, st, v)
}

func (s *server) createEnvironment(w http.ResponseWriter, r *http.Request) {
	var req environment.CreateRequest
	if err := decode(w, r, &req, false); err != nil {
		s.audit(r, "environment.create", "", err)
		s.writeError(w, r, err)
		return
	}
	v, err := s.sys.Catalog().Create(r.Context(), principalOf(r), req)
	if err != nil {
		s.audit(r, "environment.create", "", err, "driver", req.Driver)
		s.writeError(w, r, err)
		return
	}
	s.audit(r, "environment.create", v.ID, nil, "driver", req.Driver)
	w.Header().Set("Location", "/api/v1/environments/"+v.ID)
	s.writeView(w, r, http.StatusCreated, v)
}

func (s *server) getEnvironment(w http.ResponseWriter, r *http.Request) {
	v, err := s.sys.Catalog().Get(r.Context(), principalOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeView(w, r, http.StatusOK, v)
}

// patchRequest is the body of PATCH /api/v1/environments/{id}: the
// revision comes from If-Match.
type patchRequest struct {
	Name        *string           `json:"name,omitempty"`
	Description *string           `json:"description,omitempty"`
	Config      map[string]any    `json:"config,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	Pool        *environment.Pool `json:"pool,omitempty"`
	// RequireIsolation replaces the least isolation the target must
	// declare ("none" removes it).
	RequireIsolation *drivers.Isolation `json:"requireIsolation,omitempty"`
}

func (s *server) updateEnvironment(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body patchRequest
	rev, err := ifMatch(r)
	if err == nil {
		err = decode(w, r, &body, false)
	}
	var v *environment.View
	if err == nil {
		v, err = s.sys.Catalog().Update(r.Context(), principalOf(r), id, environment.UpdateRequest{
			BaseRevision: rev, Name: body.Name, Description: body.Description,
			Config: body.Config, Env: body.Env, Metadata: body.Metadata, Pool: body.Pool,
			RequireIsolation: body.RequireIsolation,
		})
	}
	s.audit(r, "environment.update", id, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeView(w, r, http.StatusOK, v)
}

// lifecycle serves archive and restore: If-Match names the revision.
func (s *server) lifecycle(w http.ResponseWriter, r *http.Request, action string, f func(*http.Request, string, int64) (*environment.View, error)) {
	id := r.PathValue("id")
	rev, err := ifMatch(r)
	var v *environment.View
	if err == nil {
		v, err = f(r, id, rev)
	}
	s.audit(r, "environment."+action, id, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeView(w, r, http.StatusOK, v)
}

func (s *server) archiveEnvironment(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, "archive", func(r *http.Request, id string, rev int64) (*environment.View, error) {
		return s.sys.Catalog().Archive(r.Context(), principalOf(r), id, rev)
	})
}

func (s *server) restoreEnvironment(w http.ResponseWriter, r *http.Request) {
	s.lifecycle(w, r, "restore", func(r *http.Request, id string, rev int64) (*environment.View, error) {
		return s.sys.Catalog().Restore(r.Context(), principalOf(r), id, rev)
	})
}

func (s *server) blastRadius(w http.ResponseWriter, r *http.Request) {
	b, err := s.sys.Catalog().BlastRadius(r.Context(), principalOf(r), r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(b.Revision))
	s.writeJSON(w, r, http.StatusOK, b)
}

// deleteEnvironment deletes at the If-Match revision (the blast radius's).
// A refused delete answers 409 with the radius's blockers in the message.
func (s *server) deleteEnvironment(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rev, err := ifMatch(r)
	var b *environment.BlastRadius
	if err == nil {
		b, err = s.sys.Catalog().Delete(r.Context(), principalOf(r), id, rev)
	}
	s.audit(r, "environment.delete", id, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, b)
}

func (s *server) refreshHealth(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	h, err := s.sys.Catalog().RefreshHealth(r.Context(), principalOf(r), id)
	s.audit(r, "environment.health", id, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if h == nil {
		h = &environment.HealthView{Status: "not_applicable"}
	}
	s.writeJSON(w, r, http.StatusOK, h)
}

func (s *server) sweep(w http.ResponseWriter, r *http.Request) {
	rep, err := s.sys.Sweep(r.Context(), principalOf(r))
	s.audit(r, "sweep", "", err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, rep)
}

// getSettings serves GET /api/v1/settings: the instance settings (CFG-9),
// readable by every known role, with the revision as the ETag.
func (s *server) getSettings(w http.ResponseWriter, r *http.Request) {
	st, err := s.sys.Settings().Get(r.Context(), principalOf(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(st.Revision))
	s.writeJSON(w, r, http.StatusOK, st)
}

// patchSettings serves PATCH /api/v1/settings: instance admins and local
// operators change the flags they name, based on the revision in If-Match
// (the ETag of a GET; "0" while the settings were never written). A stale
// one is 412 and nothing changes.
func (s *server) patchSettings(w http.ResponseWriter, r *http.Request) {
	var body settingsPatch
	rev, err := settingsIfMatch(r)
	if err == nil {
		err = decode(w, r, &body, false)
	}
	var st instance.Settings
	if err == nil {
		st, err = s.sys.Settings().Update(r.Context(), principalOf(r), rev, body.apply)
	}
	s.audit(r, "settings.update", "", err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("ETag", etag(st.Revision))
	s.writeJSON(w, r, http.StatusOK, st)
}

// settingsPatch is the body of PATCH /api/v1/settings: the flags and
// lease quotas to change (the revision comes from If-Match).
type settingsPatch struct {
	EnableEnvironments *bool `json:"enableEnvironments,omitempty"`
	ManagedSandboxOnly *bool `json:"enableManagedSandboxOnly,omitempty"`
	// QuotaPerCompany and QuotaPerCompanyEnvironment are the lease quotas
	// (0: no limit).
	QuotaPerCompany            *int `json:"quotaPerCompany,omitempty"`
	QuotaPerCompanyEnvironment *int `json:"quotaPerCompanyEnvironment,omitempty"`
	// MinimumIsolation is the least isolation every target must declare
	// ("none": no minimum).
	MinimumIsolation *drivers.Isolation `json:"minimumIsolation,omitempty"`
}

// apply sets the fields p names in s; a patch that names none is invalid.
func (p settingsPatch) apply(s *instance.Settings) error {
	if p == (settingsPatch{}) {
		return fmt.Errorf("instance: settings update: fields \"enableEnvironments\", \"enableManagedSandboxOnly\", \"minimumIsolation\", \"quotaPerCompany\" and \"quotaPerCompanyEnvironment\": none is set, nothing to change: %w", errcode.ErrInvalid)
	}
	if p.EnableEnvironments != nil {
		s.EnableEnvironments = *p.EnableEnvironments
	}
	if p.ManagedSandboxOnly != nil {
		s.ManagedSandboxOnly = *p.ManagedSandboxOnly
	}
	if p.QuotaPerCompany != nil {
		s.QuotaPerCompany = *p.QuotaPerCompany
	}
	if p.MinimumIsolation != nil {
		s.MinimumIsolation = *p.MinimumIsolation
	}
	if p.QuotaPerCompanyEnvironment != nil {
		s.QuotaPerCompanyEnvironment = *p.QuotaPerCompanyEnvironment
	}
	return nil
}

// settingsIfMatch is ifMatch for the instance settings, whose revision is
// 0 until their first write.
func settingsIfMatch(r *http.Request) (int64, error) {
	if v := strings.TrimSpace(r.Header.Get("If-Match")); strings.Trim(strings.TrimPrefix(v, "W/"), `"`) == "0" {
		return 0, nil
	}
	return ifMatch(r)
}
