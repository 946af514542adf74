package fake

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/images"
)

// Image config values.
const (
	// DefaultImage is the tag every fake's image table starts with; sandboxes
	// whose config has no image run it (a provider default: QUAL-5).
	DefaultImage = "registry.fake.test/berth/base:latest"
	// SnapshotPrefix selects a snapshot by its provider id: "snapshot:<id>"
	// (or an identity's text, "snapshot:<provider>/<id>").
	SnapshotPrefix = "snapshot:"
	// SnapshotNamePrefix selects a snapshot by a name, resolved at each
	// Acquire: "snapshot-name:<name>".
	SnapshotNamePrefix = "snapshot-name:"
)

// imageTable is the fake provider's image table. Guarded by Driver.mu.
type imageTable struct {
	tags      map[string]string // "repo:tag" -> "sha256:..."
	digests   map[string]bool   // "repo@sha256:..."
	pushes    map[string]int    // "repo:tag" -> times pushed
	snapshots map[string]string // snapshot id -> name
	snapNames map[string]string // snapshot name -> newest id
	snapSeq   int
}

func fakeDigest(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// digestIdentity cannot fail: repo is normalized and digest well-formed.
func digestIdentity(repo, digest string) images.Identity {
	id, _ := images.DigestIdentity(repo, digest)
	return id
}

// parseImage reads an image config value: SnapshotPrefix and
// SnapshotNamePrefix without a provider name this provider's snapshots; ""
// is the provider default (the zero Reference).
func (d *Driver) parseImage(raw string) (images.Reference, error) {
	for _, p := range []string{SnapshotNamePrefix, SnapshotPrefix} {
		if rest, ok := strings.CutPrefix(raw, p); ok && !strings.Contains(rest, "/") {
			raw = p + d.provider + "/" + rest
		}
	}
	if raw == "" {
		return images.Reference{}, nil
	}
	return images.ParseReference(raw)
}

// AddImage pushes ref to the image table and returns the identity it names.
// A tag ("repo:tag", "repo") gets a new digest derived from the repository,
// tag and number of earlier pushes of it: pushing it again moves it, and the
// old digest stays pullable. A digest is registered. It panics on a
// malformed or snapshot reference.
func (d *Driver) AddImage(ref string) images.Identity {
	r, err := images.ParseReference(ref)
	if err != nil || !r.IsOCI() {
		panic(fmt.Sprintf("fake: AddImage(%q): not an OCI reference: %v", ref, err))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	t, repo, dg := &d.images, r.Repository(), r.Digest()
	if key := repo + ":" + r.Tag(); r.Kind() == images.RefTag {
		t.pushes[key]++
		dg = fakeDigest(fmt.Sprintf("%s#%d", key, t.pushes[key]))
		t.tags[key] = dg
	}
	t.digests[repo+"@"+dg] = true
	return digestIdentity(repo, dg)
}

// remove deletes the image or this provider's snapshot id.
func (t *imageTable) remove(id images.Identity, provider string) {
	switch {
	case id.Kind() == images.KindDigest:
		delete(t.digests, id.String())
		for k, dg := range t.tags {
			if dg == id.Digest() && strings.HasPrefix(k, id.Repository()+":") {
				delete(t.tags, k)
			}
		}
	case id.Kind() == images.KindSnapshot && id.Provider() == provider:
		if n, ok := t.snapshots[id.SnapshotID()]; ok {
			delete(t.snapshots, id.SnapshotID())
			if t.snapNames[n] == id.SnapshotID() {
				delete(t.snapNames, n)
			}
		}
	}
}

// AddSnapshot creates a snapshot named snapName and returns its provider id
// (derived from the name and a sequence number). The name now resolves to
// it; an older snapshot of the name keeps its id until deleted.
func (d *Driver) AddSnapshot(snapName string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := &d.images
	t.snapSeq++
	sum := sha256.Sum256(fmt.Appendf(nil, "%s#%d", snapName, t.snapSeq))
	id := "snap-" + hex.EncodeToString(sum[:6])
	t.snapshots[id], t.snapNames[snapName] = snapName, id
	return id
}

// DeleteSnapshot deletes the snapshot id at the provider, used or not: its
// name no longer resolves to it, and an Acquire of the id fails with
// drivers.ErrImageNotFound, even when a new snapshot takes the name (QUAL-6).
func (d *Driver) DeleteSnapshot(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sid, err := images.SnapshotIdentity(d.provider, id); err == nil {
		d.images.remove(sid, d.provider)
	}
}

// resolveImageLocked returns the identity the image config value names
// now, or an error wrapping drivers.ErrImageNotFound that quotes it.
func (d *Driver) resolveImageLocked(raw string) (images.Identity, error) {
	r, err := d.parseImage(cmp.Or(raw, DefaultImage))
	if err != nil {
		return images.Identity{}, fmt.Errorf("fake: image %w", err)
	}
	t, why := &d.images, "no such digest"
	switch r.Kind() {
	case images.RefSnapshotID, images.RefSnapshotName:
		id, ok := r.SnapshotID(), false
		why = "no snapshot has that id"
		if r.Kind() == images.RefSnapshotName {
			id, ok = t.snapNames[r.SnapshotName()]
			why = "no snapshot has that name"
		} else {
			_, ok = t.snapshots[id]
		}
		if r.Provider() != d.provider {
			ok, why = false, fmt.Sprintf("snapshot of provider %q, not %q", r.Provider(), d.provider)
		}
		if ok {
			return images.SnapshotIdentity(d.provider, id)
		}
	default:
		repo, dg := r.Repository(), r.Digest()
		if r.Kind() == images.RefTag {
			dg, why = t.tags[repo+":"+r.Tag()], "no such tag"
		}
		if t.digests[repo+"@"+dg] {
			return digestIdentity(repo, dg), nil
		}
	}
	return images.Identity{}, fmt.Errorf("fake: image %q: %s: %w", cmp.Or(raw, DefaultImage), why, drivers.ErrImageNotFound)
}
