package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/images"
)

// isLocal reports whether ref names an engine-local template
// (berth.local/...@sha256:<image id>).
func isLocal(ref name.Reference) bool { return ref.Context().RegistryStr() == localRegistry }

// imageKey names a pinned reference on one engine: the key of the driver's
// image cache.
type imageKey struct{ host, ref string }

// cachedImage returns the image ID that an earlier Acquire on the same
// engine resolved the configured pinned reference to. A tag is never
// cached: it may move, so every Acquire resolves it (pull_policy).
//
// A pin names content (a manifest digest, or a berth.local image ID), and
// the engine's image ID is a digest of the image config that manifest
// names, so the mapping cannot go stale while the image exists; an image
// removed since makes create answer "No such image", and Acquire then
// forgets the entry and resolves the reference again (inspect, pull). The
// container inspect that waitRunning makes checks that the container runs
// the cached image ID.
func (d *driver) cachedImage(cfg *settings) (string, bool) {
	if _, pinned := cfg.ref.(name.Digest); !pinned {
		return "", false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.images[imageKey{cfg.host, cfg.image}]
	return id, ok
}

// rememberImage caches id as what the configured pinned reference resolves
// to on its engine; a tag is not cached.
func (d *driver) rememberImage(cfg *settings, id string) {
	if _, pinned := cfg.ref.(name.Digest); !pinned || id == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.images[imageKey{cfg.host, cfg.image}] = id
}

// forgetImage drops the cache entry of the configured reference if it
// still names id.
func (d *driver) forgetImage(cfg *settings, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := imageKey{cfg.host, cfg.image}
	if d.images[k] == id {
		delete(d.images, k)
	}
}

// isNoSuchImage reports whether a container create failed because the
// engine has no image of that reference or ID.
func isNoSuchImage(err error) bool {
	return cerrdefs.IsNotFound(err) && strings.Contains(strings.ToLower(err.Error()), "no such image")
}

// ensureImage makes the configured image present in the engine and returns
// its image ID (and caches it for a pinned reference). A pinned digest is
// pulled only when the engine lacks it; a tag follows pull_policy. A missing
// image wraps drivers.ErrImageNotFound.
func (d *driver) ensureImage(ctx context.Context, cli *client.Client, cfg *settings) (string, error) {
	id, err := d.resolveImage(ctx, cli, cfg)
	if err == nil {
		d.rememberImage(cfg, id)
	}
	return id, err
}

func (d *driver) resolveImage(ctx context.Context, cli *client.Client, cfg *settings) (string, error) {
	notFound := func(detail string) error {
		return fmt.Errorf("docker %s: image %q: %s: %w", cfg.host, cfg.image, detail, drivers.ErrImageNotFound)
	}
	dig, pinned := cfg.ref.(name.Digest)
	if isLocal(cfg.ref) {
		if !pinned {
			return "", notFound("a berth.local template must be pinned by its image id")
		}
		ins, err := cli.ImageInspect(ctx, dig.DigestStr())
		if cerrdefs.IsNotFound(err) || (err == nil && ins.ID != dig.DigestStr()) {
			return "", notFound("no such image in the engine")
		}
		if err != nil {
			return "", engineErr(cfg.host, "inspect image "+cfg.image, err)
		}
		return ins.ID, nil
	}
	pull := cfg.pullPolicy == pullAlways && !pinned
	if !pull {
		ins, err := cli.ImageInspect(ctx, cfg.image)
		switch {
		case err == nil:
			return ins.ID, nil
		case !cerrdefs.IsNotFound(err):
			return "", engineErr(cfg.host, "inspect image "+cfg.image, err)
		case cfg.pullPolicy == pullNever:
			return "", notFound("not in the engine and pull_policy is never")
		}
	}
	if err := d.pull(ctx, cli, cfg, cfg.image); err != nil {
		return "", err
	}
	ins, err := cli.ImageInspect(ctx, cfg.image)
	if cerrdefs.IsNotFound(err) {
		return "", notFound("not in the engine after the pull")
	}
	if err != nil {
		return "", engineErr(cfg.host, "inspect image "+cfg.image, err)
	}
	return ins.ID, nil
}

// pullMessage is one line of the engine's pull progress stream.
type pullMessage struct {
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
}

// pull pulls ref (for linux/amd64 only when the engine is; the engine picks
// its own platform) and reads the progress stream to the end, where the
// engine reports failures.
func (d *driver) pull(ctx context.Context, cli *client.Client, cfg *settings, ref string) error {
	d.log.Debug("docker: pulling", "host", cfg.host, "image", ref)
	rc, err := cli.ImagePull(ctx, ref, image.PullOptions{RegistryAuth: cfg.auth})
	if err != nil {
		return pullErr(cfg, ref, err)
	}
	defer rc.Close()
	dec := json.NewDecoder(rc)
	for {
		var m pullMessage
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("docker %s: pulling %q: %w", cfg.host, ref, ctx.Err())
			}
			return fmt.Errorf("docker %s: pulling %q: reading progress: %v: %w", cfg.host, ref, err, drivers.ErrTransient)
		}
		if m.Error != "" {
			return pullErr(cfg, ref, errors.New(m.Error))
		}
	}
}

// pullErr classifies a pull failure. The engine reports a missing manifest
// or repository as "not found" / "manifest unknown"; it never echoes the
// credential.
func pullErr(cfg *settings, ref string, err error) error {
	msg := err.Error()
	low := strings.ToLower(msg)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("docker %s: pulling %q: %w", cfg.host, ref, err)
	case cerrdefs.IsNotFound(err), strings.Contains(low, "manifest unknown"), strings.Contains(low, "not found"),
		strings.Contains(low, "name unknown"), strings.Contains(low, "does not exist"):
		return fmt.Errorf("docker %s: pulling %q: %s: %w", cfg.host, ref, msg, drivers.ErrImageNotFound)
	case cerrdefs.IsUnauthorized(err), strings.Contains(low, "unauthorized"), strings.Contains(low, "authentication required"),
		strings.Contains(low, "denied"):
		return fmt.Errorf("docker %s: pulling %q: %s: %w", cfg.host, ref, msg, drivers.ErrAuth)
	case isTLSErr(err):
		return fmt.Errorf("docker %s: pulling %q: %s: %w", cfg.host, ref, msg, drivers.ErrTLSUnverified)
	case client.IsErrConnectionFailed(err):
		return fmt.Errorf("docker %s: pulling %q: %s: %w", cfg.host, ref, msg, drivers.ErrUnavailable)
	case strings.Contains(low, "connection refused"), strings.Contains(low, "no such host"), strings.Contains(low, "i/o timeout"):
		return fmt.Errorf("docker %s: pulling %q: registry unreachable: %s: %w", cfg.host, ref, msg, drivers.ErrUnreachable)
	}
	return fmt.Errorf("docker %s: pulling %q: %w", cfg.host, ref, err)
}

// ImageIdentity reads, from the engine, the identity of the image the
// container runs (IMG-3): the container's image ID, then that image's repo
// digests. It prefers the repo digest of the configured repository with the
// configured digest; else any repo digest of the configured repository;
// else the first other one. So a tag that was moved to another image after
// the container started reports the digest the container really runs, never
// the tag's new one. A berth.local template reports its image ID. An image
// without any repo digest (built or loaded locally) is an error.
//
// A sandbox Acquire made from a pinned reference reports the identity
// Acquire proved without asking the engine again: Acquire's inspect showed
// the container runs the image ID the pinned reference resolves to, a
// container's image never changes, and a digest names one manifest and so
// one image ID (provenIdentity). A warm pool's member is adopted without
// two Engine API calls in the way of its first exec.
func (s *sandbox) ImageIdentity(ctx context.Context) (images.Identity, error) {
	if s.released.Load() {
		return images.Identity{}, fmt.Errorf("docker: container %s: %w", s.id, drivers.ErrReleased)
	}
	if s.pinned != (images.Identity{}) {
		return s.pinned, nil
	}
	ins, err := s.cli.ContainerInspect(ctx, s.id)
	if err != nil {
		return images.Identity{}, engineErr(s.cfg.host, "inspect container "+s.id, err)
	}
	imageID := ins.Image
	wantRepo := s.cfg.ref.Context().Name()
	if isLocal(s.cfg.ref) {
		return images.DigestIdentity(wantRepo, imageID)
	}
	img, err := s.cli.ImageInspect(ctx, imageID)
	if err != nil {
		return images.Identity{}, engineErr(s.cfg.host, "inspect image "+imageID, err)
	}
	return pickRepoDigest(img.RepoDigests, s.cfg.ref, imageID)
}

// provenIdentity returns the identity of a container that runs imageID,
// the image ID the engine resolved cfg's pinned reference to (Acquire
// checked the container's inspect against it): the configured digest in
// the configured repository, which pickRepoDigest would choose among the
// image's repo digests, or the image ID of a berth.local template. A
// reference that is not pinned gives the zero Identity (a tag can move:
// ImageIdentity asks the engine).
func provenIdentity(cfg *settings, imageID string) images.Identity {
	dig, ok := cfg.ref.(name.Digest)
	if !ok {
		return images.Identity{}
	}
	var (
		id  images.Identity
		err error
	)
	if isLocal(cfg.ref) {
		id, err = images.DigestIdentity(cfg.ref.Context().Name(), imageID)
	} else {
		id, err = images.DigestIdentity(dig.Context().Name(), dig.DigestStr())
	}
	if err != nil {
		return images.Identity{}
	}
	return id
}

// pickRepoDigest chooses the identity to report among an image's repo
// digests; see ImageIdentity.
func pickRepoDigest(repoDigests []string, want name.Reference, imageID string) (images.Identity, error) {
	var same, other []images.Identity
	for _, rd := range repoDigests {
		d, err := name.NewDigest(rd, name.WeakValidation)
		if err != nil {
			continue
		}
		id, err := images.DigestIdentity(d.Context().Name(), d.DigestStr())
		if err != nil {
			continue
		}
		if id.Repository() == want.Context().Name() {
			same = append(same, id)
		} else {
			other = append(other, id)
		}
	}
	if wd, ok := want.(name.Digest); ok {
		for _, id := range same {
			if id.Digest() == wd.DigestStr() {
				return id, nil
			}
		}
	}
	for _, list := range [][]images.Identity{same, other} {
		if len(list) > 0 {
			sort.Slice(list, func(i, j int) bool { return list[i].String() < list[j].String() })
			return list[0], nil
		}
	}
	return images.Identity{}, fmt.Errorf("docker: image %s has no registry digest (built or loaded locally), so it has no pinnable identity", imageID)
}
