package fake

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

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

// imageReference reads the image field of a fake config: snapshots by id
// (pinned) or by name (mutable) with provider name driver, else an OCI
// reference; "" is the provider default (the zero Reference).
func imageReference(driver, raw string) (images.Reference, error) {
	switch {
	case raw == "":
		return images.Reference{}, nil
	case strings.HasPrefix(raw, SnapshotNamePrefix) && !strings.Contains(raw[len(SnapshotNamePrefix):], "/"):
		return images.ParseReference(SnapshotNamePrefix + driver + "/" + raw[len(SnapshotNamePrefix):])
	case strings.HasPrefix(raw, SnapshotPrefix) && !strings.Contains(raw[len(SnapshotPrefix):], "/"):
		return images.ParseReference(SnapshotPrefix + driver + "/" + raw[len(SnapshotPrefix):])
	}
	return images.ParseReference(raw)
}

// images is the fake provider's image table. Guarded by Driver.mu.
type imageTable struct {
	tags      map[string]string // "repo:tag" -> "sha256:..."
	digests   map[string]bool   // "repo@sha256:..."
	pushes    map[string]int    // "repo:tag" -> times pushed
	snapshots map[string]string // snapshot id -> name
	snapNames map[string]string // snapshot name -> newest id
	snapSeq   int
}

func newImageTable() *imageTable {
	return &imageTable{
		tags: map[string]string{}, digests: map[string]bool{}, pushes: map[string]int{},
		snapshots: map[string]string{}, snapNames: map[string]string{},
	}
}

func fakeDigest(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func mustIdentity(repo, digest string) images.Identity {
	id, err := images.DigestIdentity(repo, digest)
	if err != nil {
		panic(err) // repo came from name.ParseReference and digest from fakeDigest
	}
	return id
}

// AddImage pushes ref to the fake provider's image table and returns the
// identity it now names. A tag reference ("repo:tag", "repo") gets a new
// digest derived deterministically from the repository, tag and the number
// of earlier pushes of that tag, so pushing the same tag again moves it to a
// new digest while the old digest stays pullable. A digest reference
// registers that digest. AddImage panics on a malformed reference.
func (d *Driver) AddImage(ref string) images.Identity {
	r, err := name.ParseReference(ref)
	if err != nil {
		panic(fmt.Sprintf("fake: AddImage(%q): %v", ref, err))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	repo := r.Context().Name()
	switch r := r.(type) {
	case name.Digest:
		d.images.digests[repo+"@"+r.DigestStr()] = true
		return mustIdentity(repo, r.DigestStr())
	case name.Tag:
		key := repo + ":" + r.TagStr()
		d.images.pushes[key]++
		dg := fakeDigest(fmt.Sprintf("%s#%d", key, d.images.pushes[key]))
		d.images.tags[key] = dg
		d.images.digests[repo+"@"+dg] = true
		return mustIdentity(repo, dg)
	}
	panic(fmt.Sprintf("fake: AddImage(%q): unexpected reference type %T", ref, r))
}

// Retag points the tag reference ref at the digest identity to, which must
// already be in the table, in the same repository.
func (d *Driver) Retag(ref string, to images.Identity) error {
	t, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("fake: retag %q: %w", ref, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	repo := t.Context().Name()
	if to.Kind() != images.KindDigest || to.Repository() != repo || !d.images.digests[to.String()] {
		return fmt.Errorf("fake: retag %q to %q: %w", ref, to, drivers.ErrImageNotFound)
	}
	d.images.tags[repo+":"+t.TagStr()] = to.Digest()
	return nil
}

// RemoveImage deletes a digest identity and every tag pointing at it from
// the image table; sandboxes running it keep running. Removing an unknown
// image does nothing.
func (d *Driver) RemoveImage(id images.Identity) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeImageLocked(id)
}

func (d *Driver) removeImageLocked(id images.Identity) {
	switch id.Kind() {
	case images.KindDigest:
		delete(d.images.digests, id.String())
		for k, dg := range d.images.tags {
			if dg == id.Digest() && strings.HasPrefix(k, id.Repository()+":") {
				delete(d.images.tags, k)
			}
		}
	case images.KindSnapshot:
		if id.Provider() == d.provider {
			d.deleteSnapshotLocked(id.SnapshotID())
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
	return d.addSnapshotLocked(snapName)
}

func (d *Driver) addSnapshotLocked(snapName string) string {
	d.images.snapSeq++
	sum := sha256.Sum256(fmt.Appendf(nil, "%s#%d", snapName, d.images.snapSeq))
	id := "snap-" + hex.EncodeToString(sum[:6])
	d.images.snapshots[id] = snapName
	d.images.snapNames[snapName] = id
	return id
}

// DeleteSnapshot deletes the snapshot with provider id id. Its name no
// longer resolves to it, and a later Acquire of the id fails with
// drivers.ErrImageNotFound, even when a new snapshot takes the same name
// (QUAL-6). Deleting an unknown id does nothing.
func (d *Driver) DeleteSnapshot(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.deleteSnapshotLocked(id)
}

func (d *Driver) deleteSnapshotLocked(id string) {
	n, ok := d.images.snapshots[id]
	if !ok {
		return
	}
	delete(d.images.snapshots, id)
	if d.images.snapNames[n] == id {
		delete(d.images.snapNames, n)
	}
}

// SnapshotID returns the provider id the snapshot name resolves to now.
func (d *Driver) SnapshotID(snapName string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.images.snapNames[snapName]
	return id, ok
}

// SnapshotIdentity returns the images.Identity of the snapshot id of this
// provider (provider name: the driver's name).
func (d *Driver) SnapshotIdentity(id string) (images.Identity, error) {
	return images.SnapshotIdentity(d.provider, id)
}

// checkImageRef validates the syntax of an image config value.
func checkImageRef(v any) error {
	s, _ := v.(string)
	switch {
	case strings.HasPrefix(s, SnapshotNamePrefix):
		if strings.TrimPrefix(s, SnapshotNamePrefix) == "" {
			return fmt.Errorf("%q: empty snapshot name", s)
		}
		return nil
	case strings.HasPrefix(s, SnapshotPrefix):
		rest := strings.TrimPrefix(s, SnapshotPrefix)
		if strings.Contains(rest, "/") {
			if _, err := images.ParseIdentity(s); err != nil {
				return fmt.Errorf("%q: %v", s, err)
			}
			return nil
		}
		if _, err := images.SnapshotIdentity("fake", rest); err != nil {
			return fmt.Errorf("%q: invalid snapshot id", s)
		}
		return nil
	}
	if _, err := name.ParseReference(s); err != nil {
		return fmt.Errorf("%q is not an OCI reference or snapshot:<id>: %v", s, err)
	}
	return nil
}

// resolveImageLocked returns the identity the image config value names
// now, or an error wrapping drivers.ErrImageNotFound that quotes it.
func (d *Driver) resolveImageLocked(ref string) (images.Identity, error) {
	notFound := func(what string) (images.Identity, error) {
		return images.Identity{}, fmt.Errorf("fake: image %q: %s: %w", ref, what, drivers.ErrImageNotFound)
	}
	if ref == "" {
		ref = DefaultImage
	}
	switch {
	case strings.HasPrefix(ref, SnapshotNamePrefix):
		id, ok := d.images.snapNames[strings.TrimPrefix(ref, SnapshotNamePrefix)]
		if !ok {
			return notFound("no snapshot has that name")
		}
		return images.SnapshotIdentity(d.provider, id)
	case strings.HasPrefix(ref, SnapshotPrefix):
		rest := strings.TrimPrefix(ref, SnapshotPrefix)
		if strings.Contains(rest, "/") {
			id, err := images.ParseIdentity(ref)
			if err != nil {
				return images.Identity{}, fmt.Errorf("fake: image %q: %w", ref, err)
			}
			if id.Provider() != d.provider {
				return notFound(fmt.Sprintf("snapshot of provider %q, not %q", id.Provider(), d.provider))
			}
			rest = id.SnapshotID()
		}
		if _, ok := d.images.snapshots[rest]; !ok {
			return notFound("no snapshot has that id")
		}
		return images.SnapshotIdentity(d.provider, rest)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		return images.Identity{}, fmt.Errorf("fake: image %q: %w", ref, err)
	}
	repo := r.Context().Name()
	switch r := r.(type) {
	case name.Digest:
		if !d.images.digests[repo+"@"+r.DigestStr()] {
			return notFound("no such digest")
		}
		return mustIdentity(repo, r.DigestStr()), nil
	case name.Tag:
		dg, ok := d.images.tags[repo+":"+r.TagStr()]
		if !ok {
			return notFound("no such tag")
		}
		return mustIdentity(repo, dg), nil
	}
	return notFound("unexpected reference")
}
