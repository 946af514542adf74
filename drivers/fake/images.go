package fake

import (
	"cmp"
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
	for _, p := range []string{SnapshotNamePrefix, SnapshotPrefix} {
		if rest, ok := strings.CutPrefix(raw, p); ok && !strings.Contains(rest, "/") {
			return images.ParseReference(p + driver + "/" + rest)
		}
	}
	if raw == "" {
		return images.Reference{}, nil
	}
	return images.ParseReference(raw)
}

// imageTable is the fake provider's image table. Guarded by Driver.mu.
type imageTable struct {
	tags      map[string]string // "repo:tag" -> "sha256:..."
	digests   map[string]bool   // "repo@sha256:..."
	pushes    map[string]int    // "repo:tag" -> times pushed
	snapshots map[string]string // snapshot id -> name
	snapNames map[string]string // snapshot name -> newest id
	snapSeq   int
}

func newImageTable() *imageTable {
	return &imageTable{tags: map[string]string{}, digests: map[string]bool{}, pushes: map[string]int{},
		snapshots: map[string]string{}, snapNames: map[string]string{}}
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
	repo, dg := r.Context().Name(), r.Identifier()
	if t, ok := r.(name.Tag); ok {
		key := repo + ":" + t.TagStr()
		d.images.pushes[key]++
		dg = fakeDigest(fmt.Sprintf("%s#%d", key, d.images.pushes[key]))
		d.images.tags[key] = dg
	}
	d.images.digests[repo+"@"+dg] = true
	return mustIdentity(repo, dg)
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
	if n, ok := d.images.snapshots[id]; ok {
		delete(d.images.snapshots, id)
		if d.images.snapNames[n] == id {
			delete(d.images.snapNames, n)
		}
	}
}

// checkImageRef validates the syntax of an image config value.
func checkImageRef(v any) error {
	s, _ := v.(string)
	_, err := parseImage("fake", s)
	return err
}

// parsedImage is an image config value: a snapshot by name or id, or an
// OCI reference.
type parsedImage struct {
	snapName, snapID, provider string
	ref                        name.Reference
}

// parseImage reads an image config value ("" is DefaultImage); provider is
// the snapshot provider of "snapshot:<id>".
func parseImage(provider, s string) (parsedImage, error) {
	if n, ok := strings.CutPrefix(s, SnapshotNamePrefix); ok {
		if n == "" {
			return parsedImage{}, fmt.Errorf("%q: empty snapshot name", s)
		}
		return parsedImage{snapName: n}, nil
	}
	if rest, ok := strings.CutPrefix(s, SnapshotPrefix); ok {
		id, err := images.SnapshotIdentity(provider, rest)
		if strings.Contains(rest, "/") {
			id, err = images.ParseIdentity(s)
		}
		if err != nil {
			return parsedImage{}, fmt.Errorf("%q: invalid snapshot id: %v", s, err)
		}
		return parsedImage{snapID: id.SnapshotID(), provider: id.Provider()}, nil
	}
	r, err := name.ParseReference(cmp.Or(s, DefaultImage))
	if err != nil {
		return parsedImage{}, fmt.Errorf("%q is not an OCI reference or snapshot:<id>: %v", s, err)
	}
	return parsedImage{ref: r}, nil
}

// resolveImageLocked returns the identity the image config value names
// now, or an error wrapping drivers.ErrImageNotFound that quotes it.
func (d *Driver) resolveImageLocked(ref string) (images.Identity, error) {
	p, err := parseImage(d.provider, ref)
	if err != nil {
		return images.Identity{}, fmt.Errorf("fake: image %w", err)
	}
	why := ""
	switch {
	case p.snapName != "":
		if id, ok := d.images.snapNames[p.snapName]; ok {
			return images.SnapshotIdentity(d.provider, id)
		}
		why = "no snapshot has that name"
	case p.snapID != "" && p.provider != d.provider:
		why = fmt.Sprintf("snapshot of provider %q, not %q", p.provider, d.provider)
	case p.snapID != "":
		if _, ok := d.images.snapshots[p.snapID]; ok {
			return images.SnapshotIdentity(d.provider, p.snapID)
		}
		why = "no snapshot has that id"
	default:
		repo, dg := p.ref.Context().Name(), p.ref.Identifier()
		why = "no such digest"
		if t, ok := p.ref.(name.Tag); ok {
			dg, why = d.images.tags[repo+":"+t.TagStr()], "no such tag"
		}
		if d.images.digests[repo+"@"+dg] {
			return mustIdentity(repo, dg), nil
		}
	}
	return images.Identity{}, fmt.Errorf("fake: image %q: %s: %w", cmp.Or(ref, DefaultImage), why, drivers.ErrImageNotFound)
}
