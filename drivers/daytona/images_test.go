package daytona_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers"
	"github.com/berthdev/berth/drivers/daytona"
	"github.com/berthdev/berth/internal/daytonafake"
)

// Issue 53 item 3: the snapshot picker. ListImages lists the account's
// snapshots whose name holds the match, each by its id (what snapshot_id
// takes) with its name, image and state; an inactive one is usable only
// where the driver may reactivate it; a wrong key is ErrAuth, without the
// key in the text.
func TestListImagesListsTheSnapshotsByName(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tools, err := e.srv.CreateSnapshot("team-tools", "debian:12")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.AgeSnapshot(tools.ID, daytonafake.SnapshotIdleLimit+time.Hour); err != nil {
		t.Fatal(err)
	}
	l, err := drivers.DriverAs[drivers.ImageLister](e.drv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config(t, e.snap.ID)
	got, err := l.ListImages(ctx, cfg, "TEAM")
	if err != nil {
		t.Fatal(err)
	}
	want := drivers.ImageChoice{Value: tools.ID, Name: "team-tools", Source: "debian:12", State: "inactive", Usable: true}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("ListImages(TEAM) = %+v, want [%+v]", got, want)
	}
	all, err := l.ListImages(ctx, cfg, "")
	if err != nil || len(all) < 2 {
		t.Fatalf("ListImages() = %+v, %v; want the default snapshot and team-tools", all, err)
	}
	var def *drivers.ImageChoice
	for i := range all {
		if all[i].Value == e.snap.ID {
			def = &all[i]
		}
	}
	if def == nil || def.Name != e.snap.Name || def.State != "active" || !def.Usable {
		t.Errorf("the configured snapshot in the list: %+v, want it active and usable under its name %q", def, e.snap.Name)
	}

	cfg[daytona.FieldReactivateSnapshot] = false
	if got, err := l.ListImages(ctx, cfg, "team"); err != nil || len(got) != 1 || got[0].Usable {
		t.Errorf("without reactivation, the inactive snapshot: %+v, %v; want it listed and not usable", got, err)
	}

	bad := e.config(t, e.snap.ID)
	bad["api_key"] = "dtn-wrong-key-0123456789"
	_, err = l.ListImages(ctx, bad, "")
	if !errors.Is(err, drivers.ErrAuth) || strings.Contains(err.Error(), "dtn-wrong-key-0123456789") {
		t.Errorf("ListImages with a wrong key = %v, want ErrAuth without the key", err)
	}
}
