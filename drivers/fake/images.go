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

// DefaultImage is the tag every fake driver starts with in its image table;
// sandboxes whose config has no image run it (a provider default, which
// never qualifies: QUAL-5).
const DefaultImage = "registry.fake.test/berth/base:latest"

// Prefixes of the image config field for provider snapshots.
const (
	// SnapshotPrefix selects a snapshot by its provider id: "snapshot:<id>".
	// The text form of a snapshot images.Identity ("snapshot:<provider>/<id>")
	// is accepted as well.
	SnapshotPrefix = "snapshot:"
	// SnapshotNamePrefix selects a snapshot by name: "snapshot-name:<name>".
	// The name is resolved at each Acquire, so it is mutable.
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

// parseImage reads an image config value: "snapshot:<id>" and
// "snapshot-name:<name>" name this provider's snapshots; other text is an
// images.Reference; "" is the provider default (the zero Reference).
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

// AddImage pushes ref to the fake provider's image table and returns the
// identity it now names. A tag reference ("repo:tag", "repo") gets a new
// digest derived deterministically from the repository, tag and the number
// of earlier pushes of that tag, so pushing the same tag again moves it to a
// new digest while the old digest stays pullable. A digest reference
// registers that digest. AddImage panics on a malformed or snapshot
// reference.
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

// AddSnapshot creates a provider snapshot named snapName and returns its
// provider id (deterministic: derived from the name and a sequence number).
// The name now resolves to the new id; an older snapshot of the same name
// keeps its id until deleted.
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

// DeleteSnapshot deletes the snapshot with provider id id. Its name no
// longer resolves to it, and a later Acquire of the id fails with
// drivers.ErrImageNotFound, even when a new snapshot takes the same name
// (QUAL-6). Deleting an unknown id does nothing.
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
