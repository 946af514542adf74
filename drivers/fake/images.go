package fake

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"strings"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/images"
)

// Image config values.
const (
	// DefaultImage is the tag every image table starts with, which sandboxes
	// without an image run (a provider default: QUAL-5).
	DefaultImage       = "registry.fake.test/berth/base:latest"
	SnapshotPrefix     = "snapshot:"      // "snapshot:<id>", or an identity's "snapshot:<provider>/<id>"
	SnapshotNamePrefix = "snapshot-name:" // "snapshot-name:<name>", resolved at each Acquire
)

// imageTable is the provider's images: ids can be pulled, names resolve to
// one of them ("repo:tag" to a digest, "snapshot-name:<name>" to a
// snapshot). Guarded by Driver.mu.
type imageTable struct {
	ids    map[images.Identity]bool
	names  map[string]images.Identity
	pushes map[string]int // times each name was pushed
}

// push points name at a new identity made from a seed derived from the name
// and its pushes.
func (t *imageTable) push(name string, mk func(seed string) (images.Identity, error)) images.Identity {
	t.pushes[name]++
	id, _ := mk(fmt.Sprintf("%s#%d", name, t.pushes[name])) // cannot fail: the parts are valid
	t.ids[id], t.names[name] = true, id
	return id
}

// remove deletes id and the names of it.
func (t *imageTable) remove(id images.Identity) {
	delete(t.ids, id)
	maps.DeleteFunc(t.names, func(_ string, v images.Identity) bool { return v == id })
}

func fakeDigest(seed string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(seed))) }

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

// AddImage pushes ref to the image table and returns the identity it names:
// a tag gets a new digest derived from it and its pushes (pushing it again
// moves it; the old digest stays), a digest is registered. It panics on a
// malformed or snapshot reference.
func (d *Driver) AddImage(ref string) images.Identity {
	r, err := images.ParseReference(ref)
	if err != nil || !r.IsOCI() {
		panic(fmt.Sprintf("fake: AddImage(%q): not an OCI reference: %v", ref, err))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if id, ok := r.Identity(); ok {
		d.images.ids[id] = true
		return id
	}
	return d.images.push(r.Repository()+":"+r.Tag(), func(seed string) (images.Identity, error) {
		return images.DigestIdentity(r.Repository(), fakeDigest(seed))
	})
}

// AddSnapshot creates a snapshot named snapName and returns its provider id
// (derived from the name and its earlier snapshots). The name now resolves
// to it; an older snapshot of the name keeps its id until deleted.
func (d *Driver) AddSnapshot(snapName string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.images.push(SnapshotNamePrefix+snapName, func(seed string) (images.Identity, error) {
		return images.SnapshotIdentity(d.provider, "snap-"+fakeDigest(seed)[7:19])
	}).SnapshotID()
}

// DeleteSnapshot deletes the snapshot id at the provider, used or not: its
// name no longer resolves to it, and an Acquire of the id fails with
// drivers.ErrImageNotFound, even when a new snapshot takes the name (QUAL-6).
func (d *Driver) DeleteSnapshot(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if sid, err := images.SnapshotIdentity(d.provider, id); err == nil {
		d.images.remove(sid)
	}
}

// resolveImageLocked returns the identity the image config value names
// now, or an error wrapping drivers.ErrImageNotFound that quotes it.
func (d *Driver) resolveImageLocked(raw string) (images.Identity, error) {
	raw = cmp.Or(raw, DefaultImage)
	r, err := d.parseImage(raw)
	if err != nil {
		return images.Identity{}, fmt.Errorf("fake: image %w", err)
	}
	id, _ := r.Identity() // a digest or a snapshot id
	why := map[images.RefKind]string{images.RefTag: "no such tag", images.RefDigest: "no such digest",
		images.RefSnapshotID: "no snapshot has that id", images.RefSnapshotName: "no snapshot has that name"}[r.Kind()]
	switch {
	case r.Kind() == images.RefTag:
		id = d.images.names[r.Repository()+":"+r.Tag()]
	case r.Kind() == images.RefSnapshotName:
		id = d.images.names[SnapshotNamePrefix+r.SnapshotName()]
	}
	if p := r.Provider(); p != "" && p != d.provider {
		why = fmt.Sprintf("snapshot of provider %q, not %q", p, d.provider)
	} else if d.images.ids[id] {
		return id, nil
	}
	return images.Identity{}, fmt.Errorf("fake: image %q: %s: %w", raw, why, drivers.ErrImageNotFound)
}
