package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/images"
)

var nameRE = regexp.MustCompile(`[^a-z0-9._-]+`)

// templateName turns a human-readable name into a repository path
// component: lower case, [a-z0-9._-], at most 64 characters.
func templateName(s string) string {
	n := strings.Trim(nameRE.ReplaceAllString(strings.ToLower(s), "-"), "-._")
	if len(n) > 64 {
		n = strings.Trim(n[:64], "-._")
	}
	if n == "" {
		n = "template"
	}
	return n
}

// Capture commits the container (paused during the commit) to a new image
// labelled labelTemplate=NAME plus req.Labels, and returns its immutable
// identity:
//
//   - without capture_repository, the image stays in this engine, tagged
//     berth.local/templates/NAME:RANDOM, and its identity is
//     "berth.local/templates/NAME@<image id>" (see localRegistry);
//   - with capture_repository REPO, the image is also pushed as
//     REPO:NAME-RANDOM with registry_auth, and its identity is
//     "REPO@<manifest digest>" as the registry reported it.
//
// Labels the container carried (berth.managed, the lease labels) are
// blanked in the image so that containers made from it are not mistaken for
// this lease's. The image keeps the container's environment and the
// driver's idle entrypoint (which Acquire always overrides).
func (s *sandbox) Capture(ctx context.Context, req drivers.CaptureRequest) (images.Identity, error) {
	if err := s.checkLive(); err != nil {
		return images.Identity{}, err
	}
	ins, err := s.cli.ContainerInspect(ctx, s.id)
	if err != nil {
		return images.Identity{}, engineErr(s.cfg.host, "inspect container "+s.id, err)
	}
	nm := templateName(req.Name)
	labels := map[string]string{}
	if ins.Config != nil {
		for k := range ins.Config.Labels {
			if _, extra := s.cfg.labels[k]; !extra {
				labels[k] = ""
			}
		}
	}
	maps.Copy(labels, req.Labels)
	labels[labelTemplate] = nm
	localRepo := localRegistry + "/templates/" + nm
	tag := randomHex(6)
	resp, err := s.cli.ContainerCommit(ctx, s.id, container.CommitOptions{
		Reference: localRepo + ":" + tag,
		Comment:   "berth template " + nm,
		Pause:     true,
		Config:    &container.Config{Labels: labels},
	})
	if err != nil {
		return images.Identity{}, engineErr(s.cfg.host, "commit container "+s.id, err)
	}
	if s.cfg.captureRepo == "" {
		return images.DigestIdentity(localRepo, resp.ID)
	}
	return s.push(ctx, resp.ID, nm+"-"+tag)
}

// push tags imageID as capture_repository:tag, pushes it and returns the
// manifest digest the engine reported.
func (s *sandbox) push(ctx context.Context, imageID, tag string) (images.Identity, error) {
	repo, err := name.NewRepository(s.cfg.captureRepo, name.WeakValidation)
	if err != nil {
		return images.Identity{}, fmt.Errorf("docker config: field %q: %v: %w", fieldCaptureRepo, err, config.ErrInvalid)
	}
	target := s.cfg.captureRepo + ":" + tag
	if err := s.cli.ImageTag(ctx, imageID, target); err != nil {
		return images.Identity{}, engineErr(s.cfg.host, "tag image "+target, err)
	}
	auth, err := encodeAuth(s.d.secretOf(s.cfg), repo.Tag(tag))
	if err != nil {
		return images.Identity{}, err
	}
	if auth == "" {
		auth = emptyAuth // the engine requires the header on push
	}
	rc, err := s.cli.ImagePush(ctx, target, image.PushOptions{RegistryAuth: auth})
	if err != nil {
		return images.Identity{}, pullErr(s.cfg, target, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	var digest string
	for {
		var m struct {
			pullMessage
			Aux *struct {
				Digest string `json:"Digest"`
			} `json:"aux"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return images.Identity{}, fmt.Errorf("docker %s: pushing %q: %v: %w", s.cfg.host, target, err, drivers.ErrTransient)
		}
		if m.Error != "" {
			return images.Identity{}, pullErr(s.cfg, target, errors.New(m.Error))
		}
		if m.Aux != nil && m.Aux.Digest != "" {
			digest = m.Aux.Digest
		}
	}
	if digest == "" {
		return images.Identity{}, fmt.Errorf("docker %s: pushing %q: the engine reported no digest", s.cfg.host, target)
	}
	return images.DigestIdentity(repo.Name(), digest)
}

// emptyAuth is the X-Registry-Auth value of "no credential" ({} in base64url).
const emptyAuth = "e30="

// DeleteTemplate removes a captured template: from the engine (by image id
// for berth.local identities, by REPO@DIGEST otherwise) and, for a pushed
// template, its manifest from the registry, and reads back that it is gone.
// A template that is already gone (in the engine or the registry) is a
// confirmed receipt.
//
// The engine removes the image without force (DELETE /images/{id} with
// force=false, noprune=true): an image that a container uses, running or
// stopped, of this instance or of anyone else, or that another image is
// built on, is answered 409 by the engine and DeleteTemplate returns an
// error wrapping drivers.ErrInUse that names the image and the engine's
// reason; nothing is untagged and the registry is not touched, so the
// caller retries later. Only the template's own tags are removed first (the
// berth.local tag of a pushed capture), and only after the engine lists no
// container using the image; a tag of another repository is a use too.
// Untagged parent images are left alone (noprune): the delete removes the
// template and nothing else.
func (d *driver) DeleteTemplate(ctx context.Context, raw config.Config, id images.Identity) (drivers.Receipt, error) {
	if id.Digest() == "" {
		return drivers.Receipt{}, fmt.Errorf("docker: template %q is not an image digest: %w", id, config.ErrInvalid)
	}
	cfg, err := d.parseConfig(raw)
	if err != nil {
		return drivers.Receipt{}, err
	}
	cli, err := d.client(cfg.host)
	if err != nil {
		return drivers.Receipt{}, err
	}
	ref, err := name.NewDigest(id.String(), name.WeakValidation)
	if err != nil {
		return drivers.Receipt{}, fmt.Errorf("docker: template %q: %v: %w", id, err, config.ErrInvalid)
	}
	local := isLocal(ref)
	lookup := id.String()
	if local {
		lookup = id.Digest()
	}
	ins, err := cli.ImageInspect(ctx, lookup)
	switch {
	case err == nil:
		if local && ins.ID != id.Digest() {
			break
		}
		if err := removeTemplateImage(ctx, cli, cfg.host, id, ref, ins); err != nil {
			return drivers.Receipt{}, err
		}
	case !cerrdefs.IsNotFound(err):
		return drivers.Receipt{}, engineErr(cfg.host, "inspect image "+id.String(), err)
	}
	if again, err := cli.ImageInspect(ctx, lookup); err == nil {
		if !local || again.ID == id.Digest() {
			return drivers.Receipt{}, fmt.Errorf("docker: template %s is still in the engine after its removal", id)
		}
	} else if !cerrdefs.IsNotFound(err) {
		return drivers.Receipt{}, engineErr(cfg.host, "inspect image "+id.String(), err)
	}
	evidence := "inspect image: not found"
	if !local {
		opts := []remote.Option{remote.WithContext(ctx)}
		if secret := d.secretOf(cfg); secret != "" {
			opts = append(opts, remote.WithAuth(authenticator(secret)))
		}
		if err := remote.Delete(ref, opts...); err != nil {
			var te *transport.Error
			if !errors.As(err, &te) || te.StatusCode != http.StatusNotFound {
				return drivers.Receipt{}, fmt.Errorf("docker: deleting template %s at the registry: %w", id, err)
			}
		}
		if _, err := remote.Head(ref, opts...); err == nil {
			return drivers.Receipt{}, fmt.Errorf("docker: template %s is still in the registry after its deletion", id)
		} else {
			var te *transport.Error
			if !errors.As(err, &te) || te.StatusCode != http.StatusNotFound {
				return drivers.Receipt{}, fmt.Errorf("docker: reading back template %s at the registry: %w", id, err)
			}
		}
		evidence += "; registry HEAD manifest: 404"
	}
	return drivers.Receipt{
		State: drivers.StateDestroyed, Confirmed: true, ConfirmedAt: time.Now().UTC(),
		Evidence: evidence, EvidenceKind: drivers.EvidenceProvider,
	}, nil
}

// removeTemplateImage removes the engine's image ins of template id without
// force. The engine removes an image by id without force only when its
// references are one repository with at most one tag (moby
// daemon/images/image_delete.go, isSingleReference; else it answers 409
// "referenced in multiple repositories"), so the template's tags outside
// the identity's repository (berth.local/templates/NAME:TAG of a pushed
// capture) are removed first, and only when no container uses the image:
// the engine untags a reference with other references left even while a
// container uses the image, which would take the tag from under it.
func removeTemplateImage(ctx context.Context, cli *client.Client, host string, id images.Identity, ref name.Digest, ins image.InspectResponse) error {
	own := ref.Context().Name()
	var extra []string
	for _, t := range ins.RepoTags {
		r, err := name.ParseReference(t, name.WeakValidation)
		if err != nil || r.Context().Name() == own || r.Context().RegistryStr() != localRegistry {
			continue // the identity's own references go with the image; another repository's tag is a use
		}
		extra = append(extra, t)
	}
	if len(extra) > 0 {
		users, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", ins.ID))})
		if err != nil {
			return engineErr(host, "list containers of image "+id.String(), err)
		}
		if len(users) > 0 {
			ids := make([]string, 0, len(users))
			for _, u := range users {
				ids = append(ids, shortID(u.ID))
			}
			return fmt.Errorf("docker %s: template %s: image %s is used by container %s: not removed, the delete is to be retried once nothing uses it: %w",
				host, id, shortID(ins.ID), strings.Join(ids, ", "), drivers.ErrInUse)
		}
		for _, t := range extra {
			if _, err := cli.ImageRemove(ctx, t, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				return removeErr(host, id, ins.ID, err)
			}
		}
	}
	if _, err := cli.ImageRemove(ctx, ins.ID, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return removeErr(host, id, ins.ID, err)
	}
	return nil
}

// removeErr classifies a failed image removal: the engine's 409 (a
// container or a child image uses it, or another repository references it)
// is drivers.ErrInUse, with the engine's reason.
func removeErr(host string, id images.Identity, imageID string, err error) error {
	if cerrdefs.IsConflict(err) {
		return fmt.Errorf("docker %s: template %s: the engine refuses to remove image %s (%v): not removed, the delete is to be retried once nothing uses it: %w",
			host, id, shortID(imageID), err, drivers.ErrInUse)
	}
	return engineErr(host, "remove image "+id.String(), err)
}

// shortID is the 12-hex-digit form of a container or image id.
func shortID(s string) string {
	s = strings.TrimPrefix(s, "sha256:")
	if len(s) > 12 {
		s = s[:12]
	}
	return s
}

// authenticator returns the go-containerregistry form of registry_auth.
func authenticator(secret string) authn.Authenticator {
	if u, p, ok := strings.Cut(secret, ":"); ok {
		return &authn.Basic{Username: u, Password: p}
	}
	return &authn.Bearer{Token: secret}
}

// secretOf returns the resolved registry credential of cfg.
func (d *driver) secretOf(cfg *settings) string { return cfg.secret }
