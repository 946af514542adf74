package main

import (
	"net/http"

	"github.com/berthdev/berth/authz"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/examples/internal/hostkey"
)

// scanHostKey serves POST /api/v1/environments/{id}/host-key/scan: the host
// key the server of an SSH environment offers, with its fingerprint and
// whether the environment trusts it already (issue 53: trust a host key).
// It needs the right to update the environment: the scan is the first
// half of that change. Nothing is saved.
func (s *server) scanHostKey(w http.ResponseWriter, r *http.Request) {
	id, p := r.PathValue("id"), principalOf(r)
	v, err := s.sys.Catalog().Get(r.Context(), p, id)
	if err == nil {
		err = s.sys.Catalog().Authorize(r.Context(), p, authz.ActionUpdate, authz.Resource{Kind: authz.ResourceKindEnvironment, Name: v.ID, Driver: v.Driver})
	}
	var sc hostkey.Scanned
	if err == nil {
		sc, err = hostkey.Scan(r.Context(), v)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeJSON(w, r, http.StatusOK, sc)
}

// trustHostKey serves POST /api/v1/environments/{id}/host-key/trust with
// {"fingerprint": "SHA256:…"} and If-Match: it scans again and saves the
// key in known_hosts at that revision only when the server still offers the
// key the operator confirmed (409 otherwise), through the catalog's Update.
func (s *server) trustHostKey(w http.ResponseWriter, r *http.Request) {
	id, p := r.PathValue("id"), principalOf(r)
	var body struct {
		Fingerprint string `json:"fingerprint"`
	}
	rev, err := ifMatch(r)
	if err == nil {
		err = decode(w, r, &body, false)
	}
	if err == nil && body.Fingerprint == "" {
		err = invalid("fingerprint", "the fingerprint the operator confirmed is required")
	}
	var nv *environment.View
	if err == nil {
		v, gerr := s.sys.Catalog().Get(r.Context(), p, id)
		if err = gerr; err == nil {
			v.Revision = rev // a stale page is refused by the catalog
			nv, _, err = hostkey.Trust(r.Context(), s.sys.Catalog(), p, v, body.Fingerprint)
		}
	}
	s.audit(r, "environment.trust_host_key", id, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.writeView(w, r, http.StatusOK, nv)
}
