package daytonatest_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/berthdev/berth/drivers/daytona/daytonatest"
)

// The snapshot lifecycle of v0.190.0: created pending, then active; aged
// past 14 idle days, inactive (creates refused); activation by UUID only,
// not within 10 minutes of the deactivation, pending, then active.
func TestSnapshotActivationRules(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonatest.Knobs{SnapshotDelay: time.Minute})
	made := c.want("POST", "/snapshots", map[string]any{"name": "s", "imageName": "debian:12"}, 200)
	if made["state"] != "pending" {
		t.Errorf("a new snapshot is %v, want pending", made["state"])
	}
	srv.Advance(time.Minute)
	id := made["id"].(string)
	if got := c.want("GET", "/snapshots/"+id, nil, 200); got["state"] != "active" {
		t.Fatalf("after the delay the snapshot is %v, want active", got["state"])
	}
	c.want("POST", "/snapshots/"+id+"/activate", nil, 400) // already active
	if err := srv.AgeSnapshot(id, daytonatest.SnapshotIdleLimit+5*time.Minute); err != nil {
		t.Fatal(err)
	}
	c.want("POST", "/sandbox", map[string]any{"snapshot": id}, 400) // "Snapshot <id> is inactive"
	c.want("POST", "/snapshots/s/activate", nil, 400)               // a name is not a UUID
	c.want("POST", "/snapshots/"+id+"/activate", nil, 400)          // cooldown: deactivated 5 minutes ago
	srv.Advance(5 * time.Minute)
	if got := c.want("POST", "/snapshots/"+id+"/activate", nil, 200); got["state"] != "pending" {
		t.Errorf("activation answered %v, want pending", got["state"])
	}
	srv.Advance(time.Minute)
	c.want("POST", "/sandbox", map[string]any{"snapshot": id}, 200)
}

// GET /sandbox's default order is by last activity, newest first, with the
// cursor on it; sort=createdAt&order=asc is stable while sandboxes are used.
func TestListSortAndCursor(t *testing.T) {
	t.Parallel()
	srv, _, c := newServer(t, daytonatest.Knobs{PageSize: 1})
	snap, _ := srv.CreateSnapshot("base:1", "debian:12")
	var ids []string
	for range 3 {
		sb := c.want("POST", "/sandbox", map[string]any{"snapshot": snap.ID}, 200)
		ids = append(ids, sb["id"].(string))
	}
	srv.Advance(time.Minute) // all started
	walk := func(q url.Values, touch string) []string {
		var got []string
		for {
			page := c.want("GET", "/sandbox?"+q.Encode(), nil, 200)
			for _, it := range page["items"].([]any) {
				got = append(got, it.(map[string]any)["id"].(string))
			}
			if touch != "" {
				c.want("POST", srv.ToolboxProxyURL()+"/"+touch+"/process/execute", map[string]any{"command": "true"}, 200)
				touch = ""
			}
			next, _ := page["nextCursor"].(string)
			if next == "" {
				return got
			}
			q.Set("cursor", next)
		}
	}
	// Default: the last one created is the most recently active; using
	// the oldest after the first page moves it before the cursor: missed.
	if got := walk(url.Values{}, ids[0]); len(got) != 2 || got[0] != ids[2] || got[1] != ids[1] {
		t.Errorf("default walk with activity = %v, want [%s %s] (the used one skipped)", got, ids[2], ids[1])
	}
	if got := walk(url.Values{"sort": {"createdAt"}, "order": {"asc"}}, ids[0]); len(got) != 3 {
		t.Errorf("createdAt walk with activity = %v, want all three", got)
	}
	c.want("GET", "/sandbox?sort=color", nil, 400)
	c.want("GET", "/sandbox?cursor=!!", nil, 400)
}
