package fake_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/config"
	"github.com/berthdev/berth/drivers/fake"
	"github.com/berthdev/berth/errcode"
	"github.com/berthdev/berth/images"
	"github.com/berthdev/berth/internal/fakectl"
	"github.com/berthdev/berth/internal/secretcfg"
)

func acquireImage(t *testing.T, d *fake.Driver, image string) (images.Identity, error) {
	t.Helper()
	cfg, err := d.Schema().Normalize(map[string]any{"image": image})
	if err != nil {
		t.Fatalf("Normalize(image %q): %v", image, err)
	}
	sb, err := d.Acquire(bg, cfg, drivers.AcquireRequest{})
	if err != nil {
		return images.Identity{}, err
	}
	defer sb.Release(bg, drivers.Destroy)
	return sb.(drivers.ImageReporter).ImageIdentity(bg)
}

func TestTagsAndDigests(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	v1 := d.AddImage("example.test/app:1")
	if v1.Digest() == "" || v1.Repository() != "example.test/app" {
		t.Fatalf("AddImage = %v", v1)
	}
	if again := fake.New(nil).AddImage("example.test/app:1"); again != v1 {
		t.Errorf("digests are not deterministic: %v vs %v", again, v1)
	}
	if got, err := acquireImage(t, d, "example.test/app:1"); err != nil || got != v1 {
		t.Errorf("acquire tag: %v, %v; want %v", got, err, v1)
	}
	v2 := d.AddImage("example.test/app:1") // pushing the tag again moves it
	if v2 == v1 {
		t.Fatalf("re-push kept the digest %v", v1)
	}
	if got, _ := acquireImage(t, d, "example.test/app:1"); got != v2 {
		t.Errorf("tag now runs %v, want %v", got, v2)
	}
	if got, err := acquireImage(t, d, v1.String()); err != nil || got != v1 {
		t.Errorf("old digest: %v, %v; want %v", got, err, v1)
	}
	if _, err := d.DeleteTemplate(bg, config.Config{}, v2); err != nil { // removes the digest and the tags on it
		t.Fatal(err)
	}
	if got, err := acquireImage(t, d, v1.String()); err != nil || got != v1 {
		t.Errorf("old digest after deleting the new: %v, %v; want %v", got, err, v1)
	}
	for _, ref := range []string{v2.String(), "example.test/app:1", "example.test/other:1", "example.test/app@sha256:" + strings.Repeat("0", 64)} {
		_, err := acquireImage(t, d, ref)
		if !errors.Is(err, drivers.ErrImageNotFound) || !strings.Contains(err.Error(), ref) {
			t.Errorf("acquire %q: err = %v, want ErrImageNotFound naming it", ref, err)
		}
	}
}

// QUAL-5, QUAL-6: snapshot ids are immutable, names are not; a deleted id
// never resolves to a replacement of the same name.
func TestSnapshots(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	id1 := fakectl.Of(d).AddSnapshot("base")
	want1, _ := images.SnapshotIdentity(fake.Name, id1)
	for _, ref := range []string{"snapshot:" + id1, "snapshot:fake/" + id1, "snapshot-name:base"} {
		if got, err := acquireImage(t, d, ref); err != nil || got != want1 {
			t.Errorf("acquire %q: %v, %v; want %v", ref, got, err, want1)
		}
	}
	fakectl.Of(d).DeleteSnapshot(id1)
	id2 := fakectl.Of(d).AddSnapshot("base")
	if id2 == id1 {
		t.Fatalf("new snapshot reused id %q", id1)
	}
	if _, err := acquireImage(t, d, "snapshot:"+id1); !errors.Is(err, drivers.ErrImageNotFound) {
		t.Errorf("acquire deleted id: err = %v, want ErrImageNotFound", err)
	}
	want2, _ := images.SnapshotIdentity(fake.Name, id2)
	if got, _ := acquireImage(t, d, "snapshot-name:base"); got != want2 {
		t.Errorf("name resolves to %v, want the new %v", got, want2)
	}
	if _, err := acquireImage(t, d, "snapshot:other/"+id2); !errors.Is(err, drivers.ErrImageNotFound) {
		t.Errorf("another provider's snapshot: err = %v, want ErrImageNotFound", err)
	}
	if _, err := acquireImage(t, d, "snapshot-name:nope"); !errors.Is(err, drivers.ErrImageNotFound) {
		t.Errorf("unknown name: err = %v, want ErrImageNotFound", err)
	}
}

func TestSchema(t *testing.T) {
	t.Parallel()
	s := fake.New(nil).Schema()
	cfg, err := s.Normalize(map[string]any{"image": "alpine", "cpus": float64(2), "notes": "n"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.String("region") != "local-1" || cfg.Int("cpus") != 2 || s.ImageField != "image" {
		t.Errorf("normalized %v", cfg)
	}
	p := secretcfg.Partition(s, cfg)
	if _, ok := p.Identity["image"]; !ok || p.Knobs["cpus"] != int64(2) || p.Metadata["notes"] != "n" {
		t.Errorf("Partition = %+v", p)
	}
	for _, raw := range []map[string]any{
		{"image": "Not A Reference!"},
		{"image": "snapshot:"},
		{"image": "snapshot-name:"},
		{"cpus": float64(0)},
		{"cpus": "two"},
		{"zones": "x"},
	} {
		if _, err := s.Normalize(raw); !errors.Is(err, config.ErrInvalid) {
			t.Errorf("Normalize(%v): err = %v, want config.ErrInvalid", raw, err)
		}
	}
}

func TestCaptureAndDeleteTemplate(t *testing.T) {
	t.Parallel()
	d := fake.New(&fake.Options{Name: "fake-b"})
	sb := mustAcquire(t, d, drivers.AcquireRequest{})
	id, err := sb.(drivers.Capturer).Capture(bg, drivers.CaptureRequest{Name: "tpl"})
	if err != nil || id.Provider() != "fake-b" {
		t.Fatalf("Capture = %v, %v; want a fake-b snapshot", id, err)
	}
	if got, err := acquireImage(t, d, "snapshot-name:tpl"); err != nil || got != id {
		t.Errorf("acquire captured: %v, %v", got, err)
	}
	if _, err := d.DeleteTemplate(bg, config.Config{}, images.MustParseIdentity("snapshot:fake/"+id.SnapshotID())); !errors.Is(err, errcode.ErrNotFound) {
		t.Errorf("DeleteTemplate of another provider's id: %v, want ErrNotFound", err)
	}
	if _, err := d.DeleteTemplate(bg, config.Config{}, id); err != nil {
		t.Fatal(err)
	}
	if _, err := acquireImage(t, d, "snapshot:"+id.SnapshotID()); !errors.Is(err, drivers.ErrImageNotFound) {
		t.Errorf("acquire deleted template: %v", err)
	}
}

// Issue 27: a template that a sandbox not yet destroyed (running or stopped)
// was created from is refused with drivers.ErrInUse naming the template and
// the sandboxes; once they are destroyed it is removed, with a confirmed
// receipt, and no longer resolves.
func TestDeleteTemplateInUse(t *testing.T) {
	t.Parallel()
	d := fake.New(nil)
	snap, err := images.SnapshotIdentity(fake.Name, fakectl.Of(d).AddSnapshot("tpl"))
	if err != nil {
		t.Fatal(err)
	}
	for ref, tpl := range map[string]images.Identity{"example.test/app:1": d.AddImage("example.test/app:1"), "snapshot:" + snap.SnapshotID(): snap} {
		cfg, err := d.Schema().Normalize(map[string]any{"image": ref})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for range 2 {
			sb, err := d.Acquire(bg, cfg, drivers.AcquireRequest{})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, sb.ID())
		}
		mustAcquire(t, d, drivers.AcquireRequest{}) // of the default image: not a user of tpl
		if _, err := d.Destroy(bg, cfg, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Resume(bg, cfg, ids[1]); err != nil {
			t.Fatal(err)
		}
		for _, disp := range []drivers.Disposition{drivers.Keep, drivers.Stop} {
			_, err := d.DeleteTemplate(bg, cfg, tpl)
			if !errors.Is(err, drivers.ErrInUse) || !strings.Contains(err.Error(), tpl.String()) || !strings.Contains(err.Error(), "sandbox "+ids[1]+":") {
				t.Errorf("DeleteTemplate(%s) with %s live: %v; want ErrInUse naming the template and only %s", tpl, ids[1], err, ids[1])
			}
			if got, err := acquireImage(t, d, ref); err != nil || got != tpl {
				t.Errorf("after a refused delete, acquire %q = %v, %v; want %v", ref, got, err, tpl)
			}
			sb, err := d.Resume(bg, cfg, ids[1])
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sb.Release(bg, disp); err != nil { // a stopped sandbox still uses it
				t.Fatal(err)
			}
		}
		if _, err := d.Destroy(bg, cfg, ids[1]); err != nil {
			t.Fatal(err)
		}
		rc, err := d.DeleteTemplate(bg, cfg, tpl)
		if err != nil || !rc.Confirmed || rc.State != drivers.StateDestroyed || rc.EvidenceKind != drivers.EvidenceProvider {
			t.Errorf("DeleteTemplate(%s) once its sandboxes are destroyed: %+v, %v; want a confirmed receipt", tpl, rc, err)
		}
		if _, err := acquireImage(t, d, ref); !errors.Is(err, drivers.ErrImageNotFound) {
			t.Errorf("acquire %q after the delete: %v, want ErrImageNotFound", ref, err)
		}
	}
}
