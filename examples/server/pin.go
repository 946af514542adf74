package main

import (
	"net/http"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/environment"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/images/resolve"
)

// pinnedImage is the answer of POST /api/v1/images/pin.
type pinnedImage struct {
	// Reference is the reference asked for, normalized.
	Reference string `json:"reference"`
	// Identity is repo@sha256:… of the manifest for the platform.
	Identity string `json:"identity"`
	// Index is the digest of the multi-platform index the manifest was
	// chosen from, when the reference named one.
	Index    string `json:"index,omitempty"`
	Platform string `json:"platform,omitempty"`
}

// pinImage serves POST /api/v1/images/pin with {"reference": REF,
// "platform": "os/arch"}: the reference resolved to repo@sha256:… of the
// manifest for the platform (default linux/amd64), as `envctl image pin`
// does (issue 53: pin to digest beside every image field). It asks the
// image's registry (anonymously; a registry on loopback over plain HTTP)
// and saves nothing. It needs the right to create environments: the
// answer goes into an environment's config, and the request makes the
// server contact a registry an operator names.
func (s *server) pinImage(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reference string `json:"reference"`
		Platform  string `json:"platform"`
	}
	err := s.mayCreateEnvironment(r)
	if err == nil {
		err = decode(w, r, &body, false)
	}
	var ref images.Reference
	if err == nil {
		if body.Reference == "" {
			err = invalid("reference", "enter the image reference to pin, such as debian:bookworm")
		} else if ref, err = images.ParseReference(body.Reference); err != nil {
			err = invalid("reference", "%q is not an image reference such as debian:bookworm", body.Reference)
		}
	}
	var plat v1.Platform
	if err == nil && body.Platform != "" {
		if plat, err = resolve.ParsePlatform(body.Platform); err != nil {
			err = invalid("platform", "%q is not a platform such as linux/amd64", body.Platform)
		}
	}
	var res resolve.Result
	if err == nil {
		res, err = s.pins.Resolve(r.Context(), ref, plat)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := pinnedImage{Reference: ref.String(), Identity: res.Identity.String(), Index: res.Index}
	if res.Index != "" {
		out.Platform = res.Platform.String()
	}
	s.writeJSON(w, r, http.StatusOK, out)
}

// listImageChoices serves POST /api/v1/image-choices with {"environment":
// ID} (an edit form: the saved config asks) or {"driver": D, "config":
// {…}} (a create form: the config as typed, its secrets pasted), and an
// optional "match": the images the provider keeps, by name with the value
// the image field takes (Daytona's snapshots and their ids), the library's
// Catalog.ListImages. An explicit action of the editor's picker; nothing
// is saved. 501 for a driver that lists none.
func (s *server) listImageChoices(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Environment string         `json:"environment"`
		Driver      string         `json:"driver"`
		Config      map[string]any `json:"config"`
		Match       string         `json:"match"`
	}
	err := decode(w, r, &body, false)
	if err == nil && body.Environment == "" && body.Driver == "" {
		err = invalid("environment", "name the saved environment, or the driver and its config")
	}
	var items []drivers.ImageChoice
	if err == nil {
		items, err = s.sys.Catalog().ListImages(r.Context(), principalOf(r), environment.ImagesRequest{
			Environment: body.Environment, Driver: body.Driver, Config: body.Config, Match: body.Match})
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if items == nil {
		items = []drivers.ImageChoice{}
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"items": items})
}
